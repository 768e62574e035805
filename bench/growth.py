"""Growth: build time, pack size and query latency at 10k, 100k and 1M chunks, with the fitted
exponent of each (the slope of log(figure) against log(chunks)) and a log-log plot.

Packs are bench/synth.py's (``--pieces``: recombined real sentences, kbpack's chunker, piece
cut and BM25; random unit vectors of 384 dims in place of embeddings -- synthetic vectors, so
build times exclude embedding, which is linear in the text and measured in bench/embed.py).
Each is built in its own process (or reused from ``--dir`` with the figures of its build).
Query latency, each in a new process (the CLI's case), median over ``--runs``:

* ``dense``: open + the first dense query (chunk and piece vectors scanned in place, top 100);
* ``bm25``: open + the first BM25 query (a Searcher's single-query path, top 100);
* ``search``: open + a whole hybrid ``Searcher.search`` (BM25, dense, fusion, gate, citations),
  the query vector handed in (the model's load and embedding are constant in the pack size:
  bench/cold_query.py has them).

An exponent of 1 is linear growth; below 1, sublinear (fixed costs still dominate).

    python bench/growth.py --dir /tmp/growth            # builds what is missing (1M: long)
    python bench/growth.py --dir /tmp/growth --sizes 10000 100000 --plot bench/growth.png
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SIZES = (10_000, 100_000, 1_000_000)
QUERY = "how do I configure the cache size limit"


def build(folder: Path, n: int) -> tuple[Path, dict[str, Any]]:
    """The pack of ``n`` chunks with pieces, and its build figures (wall and CPU seconds)."""
    pack = folder / f"synth-{n}-pieces.kbpack"
    figures = pack.with_suffix(".json")
    if not (pack.exists() and figures.exists()):
        folder.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, str(ROOT / "bench" / "synth.py"), "pack", "--pieces", "--json"]
        before = os.times()
        out = subprocess.run(
            [*cmd, "--chunks", str(n), "-o", str(pack)], check=True, capture_output=True, text=True
        ).stdout
        after = os.times()
        got = json.loads(out)
        got["cpu_s"] = round(
            (after.children_user - before.children_user)
            + (after.children_system - before.children_system),
            1,
        )
        figures.write_text(json.dumps(got))
    return pack, json.loads(figures.read_text())


def child(pack: str, what: str) -> float:
    """One cold process: open the pack, run one query of kind ``what``; seconds (open + query)."""
    import numpy as np

    sys.path.insert(0, str(ROOT))
    from kbpack.pack.read import PackReader
    from kbpack.search.searcher import Searcher

    class GivenVector:
        """The query's vector, handed back without a model (its cost does not grow)."""

        def __init__(self, dims: int) -> None:
            v = np.random.default_rng(1).standard_normal(dims).astype(np.float32)
            self.vector = v / np.linalg.norm(v)

        def embed(self, texts: list[str]) -> np.ndarray:
            return np.stack([self.vector for _ in texts])

    t = time.perf_counter()
    r = PackReader(pack)
    assert r.model is not None, f"{pack}: a BM25-only pack has no vectors to scan"
    s = Searcher(r, GivenVector(int(r.model["dims"])))
    if what == "dense":
        s._dense(QUERY, None)
    elif what == "bm25":
        s._bm25(QUERY, None)
    else:
        s.search(QUERY, k=5, mode="hybrid")
    return time.perf_counter() - t


def latency(pack: Path, what: str, runs: int) -> float:
    """Median ms of ``runs`` cold processes."""
    times = []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, __file__, "--child", str(pack), what],
            check=True,
            capture_output=True,
            text=True,
            env=dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1"),
        ).stdout
        times.append(float(out))
    return statistics.median(times) * 1000


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of log(y) on log(x): the growth exponent."""
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = statistics.mean(lx), statistics.mean(ly)
    num = sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True))
    den = sum((a - mx) ** 2 for a in lx)
    return num / den


COLUMNS = (
    ("build_cpu_s", "build CPU s"),
    ("build_wall_s", "build wall s"),
    ("pack_mb", "pack MB"),
    ("peak_rss_mb", "build peak RSS MB"),
    ("dense_ms", "dense first query ms"),
    ("bm25_ms", "BM25 first query ms"),
    ("search_ms", "hybrid search ms"),
)


def plot(rows: list[dict[str, Any]], exps: dict[str, float], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    n = [r["chunks"] for r in rows]
    groups = (
        ("build", ("build_cpu_s", "build_wall_s"), "seconds"),
        ("pack size", ("pack_mb", "peak_rss_mb"), "MB"),
        ("query, new process", ("dense_ms", "bm25_ms", "search_ms"), "ms"),
    )
    labels = dict(COLUMNS)
    for ax, (title, keys, unit) in zip(axes, groups, strict=True):
        for key in keys:
            ax.loglog(n, [r[key] for r in rows], "o-", label=f"{labels[key]} (n^{exps[key]:.2f})")
        ax.loglog(n, [n_ / n[0] * rows[0][keys[0]] for n_ in n], ":", color="grey", label="linear")
        ax.set_title(title)
        ax.set_xlabel("chunks")
        ax.set_ylabel(unit)
        ax.legend(fontsize=7)
    fig.suptitle("kbpack growth (bench/growth.py; synthetic vectors, sentence pieces on)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(child(sys.argv[2], sys.argv[3]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--dir", type=Path, required=True, help="where the packs are (or go)")
    ap.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--plot", type=Path, default=ROOT / "bench" / "growth.png")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = []
    for n in args.sizes:
        pack, fig = build(args.dir, n)
        rows.append(
            {
                "chunks": fig["chunks"],
                "pieces": fig.get("pieces"),
                "build_cpu_s": fig.get("cpu_s") or math.nan,
                "build_wall_s": fig["total_s"],
                "pack_mb": fig["bytes"] / 1e6,
                "peak_rss_mb": fig["peak_rss_mb"],
                "dense_ms": latency(pack, "dense", args.runs),
                "bm25_ms": latency(pack, "bm25", args.runs),
                "search_ms": latency(pack, "search", args.runs),
            }
        )
    n = [r["chunks"] for r in rows]
    exps = {key: slope(n, [r[key] for r in rows]) for key, _ in COLUMNS}
    load = os.getloadavg()
    report = {"rows": rows, "exponents": exps, "load_average": load}
    if len(rows) > 1:
        plot(rows, exps, args.plot)
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    print(f"{'':24}" + "".join(f"{r['chunks']:>12,}" for r in rows) + f"{'exponent':>10}")
    for key, label in COLUMNS:
        cells = "".join(f"{r[key]:>12.1f}" for r in rows)
        print(f"{label:24}{cells}{exps[key]:>10.2f}")
    print(f"load average {load[0]:.1f}; plot: {args.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
