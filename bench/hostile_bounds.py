"""Issue 30, "Found 7": the four small hostile inputs at the issue's scale, time and peak
memory of the command each one drove without bound, for this tree and (``--before TREE``) an
older kbpack tree, in the same run.

    python bench/hostile_bounds.py --before /tmp/kbpack-0.3.0   # a `git archive` of the old tree

Inputs (crafted with this tree's kbpack.testing.fuzz.pack_mutations, as tests/hostile_inputs.py
does at test scale): 20,000 attributes on /chunks (verify), a manifest set count of 1,000,000
(verify), 50 M deflated chunk rows (query --mode bm25), a 50 MB one-line text file (build
--no-vectors). Peak memory is the largest process's resident set (RUSAGE_CHILDREN of a fresh
parent); a run over --limit seconds is stopped and shown as "> limit".
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kbpack.pack import format as F
from kbpack.testing.fuzz.pack_mutations import (
    _header_parts,
    _write_manifest,
    element_digests,
    restamp,
)

_PEAK = (
    "import resource, subprocess, sys\n"
    "try:\n"
    "    r = subprocess.run(sys.argv[2:], capture_output=True, timeout=float(sys.argv[1]))\n"
    "    code = r.returncode\n"
    "except subprocess.TimeoutExpired:\n"
    "    code = 'timeout'\n"
    "print(code, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
)


def measure(tree: Path, args: list[str], limit: float, cache: Path) -> tuple[str, float, int]:
    env = {"PYTHONPATH": str(tree), "KBPACK_CACHE_DIR": str(cache), "PATH": "/usr/bin:/bin"}
    t = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", _PEAK, str(limit), sys.executable, "-m", "kbpack", *args],
        capture_output=True, text=True, env=env, check=True, cwd=tree,  # -m looks in cwd first
    ).stdout.split()  # fmt: skip
    return out[0], time.perf_counter() - t, int(out[1]) // 1024


def restamped(pack: Path) -> Path:
    with h5py.File(pack, "r") as h:
        digests = element_digests(h)
    restamp(pack, "elements", digests)
    return pack


def craft(root: Path) -> dict[str, list[str]]:
    src = root / "src"
    src.mkdir()
    for i in range(3):
        (src / f"d{i}.md").write_text(f"# Doc {i}\n\nThe pump seal alarm {i} clears on reset.\n")
    base = root / "base.kbpack"
    subprocess.run(
        [sys.executable, "-m", "kbpack", "build", str(src), "-o", str(base), "--no-vectors", "-q"],
        check=True, env={**os.environ, "KBPACK_CACHE_DIR": str(root / "c")},
    )  # fmt: skip
    attrs = root / "attrs.kbpack"
    shutil.copyfile(base, attrs)
    with h5py.File(attrs, "r+") as h:
        for i in range(20_000):
            h[F.CHUNKS].attrs[f"x{i:05d}"] = i
    restamped(attrs)

    (root / "set").mkdir()
    data = bytearray(base.read_bytes())
    manifest, signature, _ = _header_parts(data)
    manifest["set"] = {"id": "abc", "index": 1, "count": 1_000_000}
    _write_manifest(data, manifest, signature)
    member = root / "set" / "s-001.kbpack"
    member.write_bytes(bytes(data))

    rows, n = root / "rows.kbpack", 50_000_000
    shutil.copyfile(base, rows)
    with h5py.File(rows, "r+") as h:
        for el in F.ELEMENTS:
            if el.rows != "chunks" or not el.dtype or el.path not in h:
                continue
            del h[el.path]
            ds = h.create_dataset(
                el.path, shape=(n,), dtype=np.dtype(el.dtype), chunks=(1 << 16,),
                shuffle=True, compression="gzip", fletcher32=True,
            )  # fmt: skip
            for i in range(0, n, 1 << 22):
                ds[i : i + (1 << 22)] = np.ones(min(1 << 22, n - i), el.dtype)
        for path in (F.BM25_DENSE_TERMS, F.BM25_DENSE_TF):
            if path in h:
                del h[path]
    data = bytearray(rows.read_bytes())
    manifest, signature, _ = _header_parts(data)
    manifest["counts"].update(chunks=n, dense_terms=0, dense_tf=0)
    _write_manifest(data, manifest, signature)
    rows.write_bytes(bytes(data))
    restamped(rows)

    line = root / "line"
    line.mkdir()
    words = np.array(["pump", "seal", "alarm", "reset", "valve", "flow", "gauge", "motor"])
    rng = np.random.default_rng(1)
    text = " ".join(words[rng.integers(0, len(words), 50_000_000 // 5)].tolist())
    (line / "line.txt").write_text(text[:50_000_000])
    for p in (attrs, rows):
        print(f"{p.name}: {p.stat().st_size / 1e6:.1f} MB", file=sys.stderr)
    return {
        "20,000 attributes on /chunks: verify": ["verify", str(attrs)],
        "set count 1,000,000: verify": ["verify", str(member)],
        "50 M declared chunks: query --mode bm25": ["query", str(rows), "--mode", "bm25", "pump"],
        "50 MB one-line file: build --no-vectors": [
            "build",
            str(line),
            "-o",
            str(root / "line.kbpack"),
            "--no-vectors",
            "-q",
            "--force",
        ],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, help="an older kbpack tree to measure too")
    ap.add_argument("--limit", type=float, default=300.0, help="seconds before a run is stopped")
    a = ap.parse_args()
    here = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cases = craft(root)
        trees = [("before", a.before)] if a.before else []
        trees.append(("after", here))
        print("| input | tree | exit | seconds | peak MB |")
        print("|---|---|---|---|---|")
        for label, args in cases.items():
            for name, tree in trees:
                code, secs, mb = measure(tree, args, a.limit, root / f"cache-{name}")
                shown = f"> {a.limit:.0f}" if code == "timeout" else f"{secs:.1f}"
                print(f"| {label} | {name} | {code} | {shown} | {mb} |", flush=True)


if __name__ == "__main__":
    main()
