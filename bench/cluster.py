"""Build throughput: one process vs a Dask LocalCluster of 1 and 2 workers, same sources.

Writes ``--docs`` synthetic Markdown documents (bench/synth.py: recombined real sentences),
then builds them with the default model three ways -- ``kbpack build`` in one process (one
embedding thread per worker's core budget: ``--threads``), ``--workers 1`` and ``--workers 2``
(one thread each) -- and prints chunks per second, each ratio to the one-process build, and
the cosine agreement of the vectors with the one-process pack. Each build runs in its own
child process (cold start included: what a user waits for).

    python bench/cluster.py --docs 40
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from kbpack.pack.read import PackReader  # noqa: E402


def run_build(src: Path, out: Path, extra: list[str]) -> dict[str, Any]:
    kbpack_bin = Path(sys.executable).with_name("kbpack")
    t = time.perf_counter()
    done = subprocess.run(
        [str(kbpack_bin), "build", str(src), "-o", str(out), "--json", *extra],
        check=True,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - t
    report = json.loads(done.stdout)
    return {"wall_s": round(wall, 2), "chunks": report["counts"]["chunks"]}


def agreement(a: Path, b: Path) -> float:
    """The smallest cosine between a chunk's vector in one pack and in the other."""
    with PackReader(a) as x, PackReader(b) as y:
        u, v = x.vectors(), y.vectors()
    cos = np.sum(u * v, axis=1) / (np.linalg.norm(u, axis=1) * np.linalg.norm(v, axis=1))
    return float(np.min(cos))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--docs", type=int, default=40)
    ap.add_argument(
        "--threads", type=int, default=1, help="embedding threads of the one-process build"
    )
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "bench" / "cluster")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    from synth import write_corpus

    src = args.out / f"docs-{args.docs}"
    if not src.exists():
        write_corpus(src, args.docs)
    runs = {
        "one process": ["--threads", str(args.threads)],
        "--workers 1": ["--workers", "1"],
        "--workers 2": ["--workers", "2"],
    }
    results: dict[str, Any] = {}
    for name, extra in runs.items():
        out = args.out / f"{name.strip('-').replace(' ', '-')}.kbpack"
        results[name] = run_build(src, out, extra) | {"pack": str(out)}
    base = results["one process"]
    for r in results.values():
        r["chunks_per_s"] = round(r["chunks"] / r["wall_s"], 2)
        r["vs_one_process"] = round(r["chunks_per_s"] / base["chunks_per_s"], 2)
        r["min_cosine_vs_one_process"] = round(agreement(Path(r["pack"]), Path(base["pack"])), 5)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"{args.docs} documents, {base['chunks']} chunks, default model")
    print(f"{'build':<14} {'wall s':>7} {'chunks/s':>9} {'x one process':>14} {'min cosine':>11}")
    for name, r in results.items():
        print(
            f"{name:<14} {r['wall_s']:>7} {r['chunks_per_s']:>9} {r['vs_one_process']:>14} "
            f"{r['min_cosine_vs_one_process']:>11}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
