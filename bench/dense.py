"""Dense scan: kbpack's Searcher vs a bare numpy matmul + argpartition vs faiss IndexFlatIP.

All three search the same float32 matrix -- the one ``PackReader.vectors()`` loads from a
synthetic pack (bench/synth.py) of N chunks x 384 dims -- for the same real query vectors (the
evaluation questions, embedded once by the default model), top 100 (kbpack's candidate depth).

* kbpack: ``Searcher._dense`` -- the very method ``search()`` calls: query vector, matmul over
  the pack's vectors, argpartition, deterministic ordering. The query embedding is replayed from
  the vectors computed up front, so the scan alone is timed (embedding is bench/embed.py's).
* numpy: ``V @ q``, ``argpartition``, sort of the top 100: the floor any exact scan in numpy
  pays (memory bandwidth: N x 384 x 4 bytes read per query).
* faiss: ``IndexFlatIP.search(q, 100)`` (exact; the same threads).

Each size is measured with 1 and with 2 BLAS/OpenMP threads (threadpoolctl limits numpy's and
faiss's pools alike): on a shared 2-core machine one thread is the steadier figure.
The three are run interleaved, query by query, cycling through all six orders; medians are reported with
the ratio kbpack / numpy (target <= 1.2) and kbpack / faiss, plus the one-off cost of loading
the float16 vectors as float32 (the first dense query of a process pays it) and the top-100
agreement (must be 1.0: all three are exact).

    python bench/dense.py                      # 10k, 100k, 1M (builds missing packs first)
    python bench/dense.py --sizes 10000 100000 --repeat 5 --json
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kbpack.pack.read import PackReader  # noqa: E402
from kbpack.search.searcher import CANDIDATES, Searcher  # noqa: E402

OUT = ROOT / "out" / "bench"
QUESTIONS = ROOT / "fixtures" / "eval" / "questions.jsonl"
SYNTH_PACK = (sys.executable, str(ROOT / "bench" / "synth.py"), "pack", "--chunks")


class ReplayedQueries:
    """Query vectors the real model computed earlier, handed back by text (no model call)."""

    def __init__(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        self._by_text = dict(zip(texts, vectors, strict=True))
        self.dims = vectors.shape[1]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self._by_text[t] for t in texts])


def questions(n: int) -> list[str]:
    lines = QUESTIONS.read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["query"] for line in lines if line.strip()][:n]


def embed_queries(texts: list[str]) -> np.ndarray:
    from kbpack.model.embedder import Embedder

    return Embedder().embed(texts)


def synthetic_pack(n: int) -> Path:
    """out/bench/synth-N.kbpack, built by bench/synth.py when missing."""
    path = OUT / f"synth-{n}.kbpack"
    if not path.exists():
        print(f"building {path.name} (bench/synth.py)...", file=sys.stderr)
        figures = subprocess.run(
            [*SYNTH_PACK, str(n), "-o", str(path), "--json"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        path.with_suffix(".json").write_text(figures)
    return path


def numpy_top(v: np.ndarray, q: np.ndarray, k: int) -> np.ndarray:
    sims = v @ q
    top = np.argpartition(-sims, k - 1)[:k]
    return top[np.argsort(-sims[top])]


def measure(
    size: int, texts: list[str], qv: np.ndarray, repeat: int, threads: Sequence[int]
) -> list[dict[str, Any]]:
    from threadpoolctl import threadpool_limits

    rows = []
    for n in threads:
        with threadpool_limits(limits=n):
            rows.append(measure_one(size, texts, qv, repeat) | {"threads": n})
    return rows


def measure_one(size: int, texts: list[str], qv: np.ndarray, repeat: int) -> dict[str, Any]:
    import faiss

    with PackReader(synthetic_pack(size)) as reader:
        t = time.perf_counter()
        vectors = reader.vectors()
        load_s = time.perf_counter() - t
        searcher = Searcher(reader, ReplayedQueries(texts, qv))
        t = time.perf_counter()
        index = faiss.IndexFlatIP(vectors.shape[1])
        index.add(vectors)
        faiss_add_s = time.perf_counter() - t
        k = min(CANDIDATES, size)
        engines: dict[str, Callable[[int], np.ndarray]] = {
            "kbpack": lambda i: searcher._dense(texts[i], None)[0],
            "numpy": lambda i: numpy_top(vectors, qv[i], k),
            "faiss": lambda i: index.search(qv[i : i + 1], k)[1][0],
        }
        times: dict[str, list[float]] = {name: [] for name in engines}
        agree: dict[str, list[float]] = {"numpy": [], "faiss": []}
        # Every order in turn, so no engine always runs right after the same one (faiss's
        # OpenMP threads keep spinning for a while after a search and slow whatever follows).
        orders = list(itertools.permutations(engines))
        for rep in range(repeat):
            for i in range(len(texts)):
                order = orders[(i + rep * len(texts)) % len(orders)]
                got: dict[str, np.ndarray] = {}
                for name in order:
                    t = time.perf_counter()
                    got[name] = engines[name](i)
                    times[name].append(time.perf_counter() - t)
                if rep == 0:
                    ours = set(got["kbpack"].tolist())
                    for peer in agree:
                        agree[peer].append(len(ours & set(got[peer].tolist())) / k)
    med = {name: statistics.median(v) * 1000 for name, v in times.items()}
    return {
        "vectors": size,
        "load_f16_to_f32_ms": round(load_s * 1000, 1),
        "faiss_add_ms": round(faiss_add_s * 1000, 1),
        "median_ms": {k: round(v, 3) for k, v in med.items()},
        "p95_ms": {
            k: round(sorted(v)[int(0.95 * (len(v) - 1))] * 1000, 3) for k, v in times.items()
        },
        "ratio_vs_numpy": round(med["kbpack"] / med["numpy"], 3),
        "ratio_vs_faiss": round(med["kbpack"] / med["faiss"], 3),
        "top100_agreement": {k: round(statistics.mean(v), 4) for k, v in agree.items()},
        "samples": len(times["kbpack"]),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--queries", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    import faiss

    texts = questions(args.queries)
    qv = embed_queries(texts)
    rows = [row for n in args.sizes for row in measure(n, texts, qv, args.repeat, args.threads)]
    report = {
        "faiss_version": faiss.__version__,
        "numpy_version": np.__version__,
        "dims": int(qv.shape[1]),
        "k": CANDIDATES,
        "rows": rows,
    }
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    print(
        f"dense top-{CANDIDATES} scan, {qv.shape[1]} dims, median of {rows[0]['samples']} queries"
    )
    print(
        f"{'vectors':>9} {'threads':>7} {'kbpack ms':>10} {'numpy ms':>9} {'faiss ms':>9} "
        f"{'x numpy':>8} {'x faiss':>8} {'agree':>6} {'load f32 ms':>12}"
    )
    for r in rows:
        m = r["median_ms"]
        print(
            f"{r['vectors']:>9} {r['threads']:>7} {m['kbpack']:>10.2f} {m['numpy']:>9.2f} {m['faiss']:>9.2f} "
            f"{r['ratio_vs_numpy']:>8.2f} {r['ratio_vs_faiss']:>8.2f} "
            f"{min(r['top100_agreement'].values()):>6.2f} {r['load_f16_to_f32_ms']:>12.0f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
