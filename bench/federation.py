"""Federated query over N packs vs the same chunks merged into one pack; merge time and memory.

Builds N synthetic packs (bench/synth.py: real recombined sentences, random unit vectors
stamped with the default model's identity) of ``--chunks`` chunks each, merges them with
``kbpack merge`` in a child process (its wall time and peak RSS are the merge's own), then
runs the same queries on ``kbpack.open_many(packs)`` and on ``kbpack.open(merged)``,
alternating which goes first, and prints the median latency of each and their ratio. The
federated results are checked against the merged pack's (same locators, same BM25 scores).

    python bench/federation.py --packs 10 --chunks 10000
    python bench/federation.py --packs 10 --chunks 100000   # the issue's size: ~40 min here
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import kbpack  # noqa: E402
from kbpack.pack import format as F  # noqa: E402
from kbpack.pack.read import PackReader  # noqa: E402


def make_packs(folder: Path, n: int, chunks: int) -> list[Path]:
    from synth import build_pack

    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(n):
        path = folder / f"part-{i + 1:02d}.kbpack"
        if not path.exists():
            build_pack(path, chunks, seed=100 + i, prefix=f"part{i + 1:02d}")
        out.append(path)
    return out


def merge(packs: list[Path], out: Path) -> dict[str, Any]:
    kbpack_bin = Path(sys.executable).with_name("kbpack")
    t = time.perf_counter()
    done = subprocess.run(
        [str(kbpack_bin), "merge", *map(str, packs), "-o", str(out), "--json"],
        check=True,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - t
    report = json.loads(done.stdout)
    return {"wall_s": round(wall, 2), "peak_rss_mb": report["peak_rss_mb"], "bytes": report["size"]}


def queries(merged: Path, n: int, seed: int = 3) -> list[str]:
    """Queries of 3-6 words taken from random chunks (every one has lexical matches)."""
    rng = random.Random(seed)
    with PackReader(merged) as r:
        total = int(r.counts["chunks"])
        out: list[str] = []
        while len(out) < n:
            words = r.chunk_content(rng.randrange(total)).split()
            if len(words) >= 8:
                at = rng.randrange(len(words) - 6)
                out.append(" ".join(words[at : at + rng.randint(3, 6)]))
    return out


def timed(target: Any, q: str, mode: str) -> tuple[float, Any]:
    t = time.perf_counter()
    resp = target.search(q, k=10, mode=mode, refuse=False)
    return (time.perf_counter() - t) * 1000, resp


def compare(packs: list[Path], merged: Path, texts: list[str], mode: str) -> dict[str, Any]:
    fed_ms: list[float] = []
    one_ms: list[float] = []
    agree = 0
    with kbpack.open_many(packs) as fed, kbpack.open(merged) as one:
        # first query of each (loads vectors, vocabularies, the model): reported apart
        first_fed, _ = timed(fed, texts[0], mode)
        first_one, _ = timed(one, texts[0], mode)
        for i, q in enumerate(texts):
            pair = [(fed, fed_ms), (one, one_ms)]
            if i % 2:
                pair.reverse()  # neither always runs second (caches, CPU frequency)
            got = {}
            for target, sink in pair:
                ms, resp = timed(target, q, mode)
                sink.append(ms)
                got[id(target)] = [(r.doc, r.start, r.end) for r in resp.results]
            agree += got[id(fed)] == got[id(one)]
    fed_med, one_med = statistics.median(fed_ms), statistics.median(one_ms)
    return {
        "mode": mode,
        "federated_ms": round(fed_med, 2),
        "merged_ms": round(one_med, 2),
        "ratio": round(fed_med / one_med, 2),
        "first_federated_ms": round(first_fed, 1),
        "first_merged_ms": round(first_one, 1),
        "same_top10": f"{agree}/{len(texts)}",
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--packs", type=int, default=10)
    ap.add_argument("--chunks", type=int, default=10_000, help="chunks per pack")
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--modes", nargs="+", default=["bm25", "hybrid"])
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "bench" / "federation")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    folder = args.out / f"{args.packs}x{args.chunks}"
    t = time.perf_counter()
    packs = make_packs(folder, args.packs, args.chunks)
    built_s = time.perf_counter() - t
    merged = folder / "merged.kbpack"
    merged.unlink(missing_ok=True)
    merge_fig = merge(packs, merged)
    with PackReader(merged) as r:
        n_chunks = int(r.counts["chunks"])
        assert r.counts["chunks"] == len(r.column(F.BM25_DOC_LEN))
    texts = queries(merged, args.queries)
    report = {
        "packs": args.packs,
        "chunks_per_pack": args.chunks,
        "chunks": n_chunks,
        "build_s": round(built_s, 1),
        "merge": merge_fig,
        "merge_chunks_per_s": round(n_chunks / merge_fig["wall_s"]),
        "queries": [compare(packs, merged, texts, m) for m in args.modes],
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    m = report["merge"]
    print(f"{args.packs} packs x {args.chunks} chunks = {n_chunks} chunks")
    print(
        f"merge: {m['wall_s']} s wall ({report['merge_chunks_per_s']} chunks/s), "
        f"peak RSS {m['peak_rss_mb']} MB, {m['bytes'] / 2**20:.0f} MB written"
    )
    print(
        f"{'mode':<8} {'merged ms':>10} {'federated ms':>13} {'ratio':>6}  first (fed/merged)  same top-10"
    )
    for q in report["queries"]:
        print(
            f"{q['mode']:<8} {q['merged_ms']:>10} {q['federated_ms']:>13} {q['ratio']:>6}  "
            f"{q['first_federated_ms']}/{q['first_merged_ms']} ms  {q['same_top10']}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
