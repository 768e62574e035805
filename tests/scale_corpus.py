"""A small corpus split into two folders plus their union, built with the real llama.cpp on a
tiny model: the packs that federation, merge and shard tests compare."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np

from kbpack.ops.build import BuildOptions, build

PART_A = {
    "alpha.md": """# Rotating logs

Logs grow without bound unless rotated.

## Configuration

Set `max_bytes` to 10485760 and `backup_count` to 5 in the handler.
The handler renames app.log to app.log.1 when the size is reached.

## Troubleshooting

Error 0x80070005 means access denied: run the service as its own user.
""",
    "beta.txt": "Deploy the service to EU-WEST-1 first, then to the other regions.\n\n"
    "Use %z in strftime for the UTC offset of the log handler.\n",
    "broken.pdf": "this is not a pdf",
}

PART_B = {
    "delta.md": """# Database

## Threads

Pass check_same_thread=False to share one connection between threads, and lock it yourself.
The log handler is not thread safe either.

## Compression

Archives use ZIP_DEFLATED when zlib is available, otherwise ZIP_STORED.
""",
    "gamma.md": """# Signals

The process got SIGKILL from the out-of-memory killer when the buffer grew past the limit.
Rotate the logs before the disk fills: the service stops writing when it is full.
""",
}


def write_folder(root: Path, files: dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def build_pack(src: Path, out: Path, model: Path | None, **kw: object) -> Path:
    """``kbpack build SRC -o OUT --model MODEL`` (``model`` None: BM25 only)."""
    opts = BuildOptions(
        sources=[src], out=out, model=model, vectors=model is not None, threads=1, **kw
    )  # type: ignore[arg-type]
    build(opts)
    return out


def datasets(path: Path) -> dict[str, object]:
    """Every dataset of a pack, read whole (strings as lists)."""
    out: dict[str, object] = {}
    with h5py.File(path, "r") as h:

        def visit(name: str, obj: object) -> None:
            if isinstance(obj, h5py.Dataset):
                out["/" + name] = (
                    list(obj.asstr()[()]) if obj.dtype.kind == "O" else np.asarray(obj[()])
                )

        h.visititems(visit)
    return out


def assert_same_content(got: Path, want: Path, skip: tuple[str, ...] = ()) -> None:
    """Every dataset of ``got`` equals ``want``'s (numbers bit for bit), but those in ``skip``."""
    a, b = datasets(got), datasets(want)
    assert sorted(a) == sorted(b)
    for path in a:
        if path in skip:
            continue
        x, y = a[path], b[path]
        if isinstance(x, np.ndarray):
            assert isinstance(y, np.ndarray) and x.dtype == y.dtype, path
            assert np.array_equal(x, y), path  # vectors too: bit for bit
        else:
            assert x == y, path
