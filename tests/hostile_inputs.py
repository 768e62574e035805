"""Small hostile inputs of issue 30 ("Found 7"), crafted the way a hostile pack maker can for
an unsigned pack: h5py edits, then every digest and the manifest restamped. Used by
test_hostile_bounds.py and test_hostile_audit.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np

from kbpack.pack import format as F
from kbpack.testing.fuzz.pack_mutations import (
    _header_parts,
    _write_manifest,
    element_digests,
    restamp,
)

DOCS = {
    "a.md": "# Pump\n\nHold the reset button to clear the pump seal alarm.\n",
    "b.md": "# Valve\n\nClose the inlet valve before you change the filter.\n",
    "c.txt": "Gauges read in bar. The flow gauge sits above the motor.\n",
}


def write_docs(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in DOCS.items():
        (folder / name).write_text(text)
    return folder


def kbpack(*args: str, cache: Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``kbpack ARGS`` in a child with its own model cache."""
    env = {"KBPACK_CACHE_DIR": str(cache), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, "-m", "kbpack", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=cwd,
    )


_PEAK = (
    "import resource, subprocess, sys\n"
    "r = subprocess.run(sys.argv[1:], capture_output=True)\n"
    "sys.stdout.write(f'{r.returncode} {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}')\n"
)


def peak_kb(*args: str, cache: Path) -> tuple[int, int]:
    """(exit code, peak resident KB of the largest process) of ``kbpack ARGS``, measured by a
    fresh parent so that nothing else this test process ran counts."""
    env = {"KBPACK_CACHE_DIR": str(cache), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", _PEAK, sys.executable, "-m", "kbpack", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=True,
    ).stdout.split()
    return int(out[0]), int(out[1])


def _restamped(pack: Path) -> Path:
    with h5py.File(pack, "r") as h:
        digests = element_digests(h)
    restamp(pack, "elements", digests)
    return pack


def many_attributes(base: Path, out: Path, n: int = 20_000) -> Path:
    """``n`` attributes on /chunks (the issue's: 20,000 in a 1.5 MB pack), one of them opaque
    (a type the spec refuses), so that the check still has something to find."""
    out.write_bytes(base.read_bytes())
    with h5py.File(out, "r+") as h:
        attrs = h[F.CHUNKS].attrs
        for i in range(n):
            attrs[f"x{i:05d}"] = i
        attrs["zz-opaque"] = np.void(b"\x00\x01")
    return _restamped(out)


def set_member(base: Path, folder: Path, count: int = 1_000_000) -> Path:
    """``s-001.kbpack`` whose manifest says it is member 1 of ``count``; the manifest's set is
    outside the digests (as the writer stamps it)."""
    folder.mkdir(parents=True, exist_ok=True)
    data = bytearray(base.read_bytes())
    manifest, signature, _ = _header_parts(data)
    manifest["set"] = {"id": "abc", "index": 1, "count": count}
    _write_manifest(data, manifest, signature)
    out = folder / "s-001.kbpack"
    out.write_bytes(bytes(data))
    return out


def declared_chunks(base: Path, out: Path, n: int) -> Path:
    """Every per-chunk column rewritten with ``n`` rows of deflated ones (a few hundred KB),
    the manifest counting ``n`` chunks: the issue's 3.6 MB pack declaring 50 M rows."""
    out.write_bytes(base.read_bytes())
    with h5py.File(out, "r+") as h:
        for el in F.ELEMENTS:
            if el.rows != "chunks" or not el.dtype or el.path not in h:
                continue
            attrs = dict(h[el.path].attrs)
            del h[el.path]
            ds = h.create_dataset(
                el.path, shape=(n,), dtype=np.dtype(el.dtype), chunks=(1 << 14,),
                shuffle=True, compression="gzip", fletcher32=True,
            )  # fmt: skip
            for i in range(0, n, 1 << 22):
                ds[i : i + (1 << 22)] = np.ones(min(1 << 22, n - i), el.dtype)
            ds.attrs.update(attrs)
        for path in (F.BM25_DENSE_TERMS, F.BM25_DENSE_TF):
            if path in h:
                del h[path]  # (optional: its rows are terms x chunks, stored unfiltered)
    data = bytearray(out.read_bytes())
    manifest, signature, _ = _header_parts(data)
    manifest["counts"].update(chunks=n, dense_terms=0, dense_tf=0)
    _write_manifest(data, manifest, signature)
    out.write_bytes(bytes(data))
    return _restamped(out)


def one_line_file(folder: Path, size: int) -> Path:
    """A text file of ``size`` bytes on one line: words, no sentence end, no newline."""
    folder.mkdir(parents=True, exist_ok=True)
    words = np.array(["pump", "seal", "alarm", "reset", "valve", "flow", "gauge", "motor"])
    rng = np.random.default_rng(1)
    text = " ".join(words[rng.integers(0, len(words), size // 5)].tolist())
    out = folder / "line.txt"
    out.write_text(text[:size])
    return out
