"""Approximate (IVF) dense search against the exact scan: recall@10, CPU per query, memory.

Vectors: synthetic, with the statistics of text embeddings rather than uniform noise (on which
no index can work: every point is as far from every other). A hierarchical Gaussian mixture
in ``--dims`` dimensions: a common direction shared by every vector (real sentence embeddings
have one: random pairs of chunks have a cosine around 0.1-0.2, not 0), an anisotropic spectrum
(per-dimension scale ~ 1/sqrt(d): a few directions carry most of the variance), topics of
Zipf-distributed sizes, documents around their topic, chunks around their document; queries
are fresh points around a document, near its chunks but none of them. The report prints the
cosine statistics (random pairs, a query's best and 10th best) so they can be compared with a
real pack's.

Exact: the product's exact path (``rounded_chunk_scores(...).top(k)``: one float16 pass over
every row, the rows near the top re-scored in float32). IVF: ``kbpack.search.ivf.top_k`` over
an index from ``kbpack.pack.ivf.build_index`` (the writer's), at each ``--probe``. CPU is
``time.process_time`` (every thread), per query, median over the queries; both paths run in
the same process on the same in-memory float16 matrix.

    nice python bench/ivf.py --chunks 1000000 --json out/bench/ivf-1m.json
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kbpack.pack.ivf import build_index, default_lists, default_probe  # noqa: E402
from kbpack.search.dense import rounded_chunk_scores  # noqa: E402
from kbpack.search.ivf import top_k  # noqa: E402

BLOCK = 262144


def _unit(a: np.ndarray) -> np.ndarray:
    return a / np.linalg.norm(a, axis=1, keepdims=True)


class Mixture:
    """Topics -> documents -> chunks (see the module docstring), seeded."""

    def __init__(self, n: int, dims: int, seed: int = 1) -> None:
        self.rng = np.random.default_rng(seed)
        self.dims = dims
        self.scale = (1.0 / np.sqrt(np.arange(1, dims + 1))).astype(np.float32)
        self.scale *= np.sqrt(dims / float((self.scale**2).sum()))  # unit variance on average
        common = _unit(self.rng.standard_normal((1, dims)).astype(np.float32))[0]
        topics = max(16, n // 5000)
        self.docs = max(topics, n // 40)
        weights = 1.0 / np.arange(1, topics + 1) ** 0.8
        doc_topic = self.rng.choice(topics, size=self.docs, p=weights / weights.sum())
        centres = 0.9 * common + 0.7 * self._noise(topics) / np.sqrt(dims)
        self.doc_centres = centres[doc_topic] + 0.45 * self._noise(self.docs) / np.sqrt(dims)

    def _noise(self, rows: int) -> np.ndarray:
        return self.rng.standard_normal((rows, self.dims), dtype=np.float32) * self.scale

    def around(self, docs: np.ndarray, spread: float) -> np.ndarray:
        x = self.doc_centres[docs] + spread * self._noise(docs.size) / np.sqrt(self.dims)
        return _unit(x)

    def chunks(self, n: int) -> np.ndarray:
        out = np.empty((n, self.dims), np.float16)
        for at in range(0, n, BLOCK):
            m = min(BLOCK, n - at)
            out[at : at + m] = self.around(self.rng.integers(0, self.docs, m), 0.4)
        return out

    def queries(self, m: int) -> np.ndarray:
        return self.around(self.rng.integers(0, self.docs, m), 0.5)


def cpu_ms(fn: Any) -> tuple[Any, float]:
    t = time.process_time()
    out = fn()
    return out, (time.process_time() - t) * 1000


def run(n: int, dims: int, queries: int, k: int, probes: list[int], lists: int | None) -> dict:
    t0 = time.perf_counter()
    mix = Mixture(n, dims)
    vectors = mix.chunks(n)
    qs = mix.queries(queries)
    gen_s = time.perf_counter() - t0
    rng = np.random.default_rng(2)
    a, b = rng.integers(0, n, 2000), rng.integers(0, n, 2000)
    pair_cos = np.einsum("ij,ij->i", vectors[a].astype(np.float32), vectors[b].astype(np.float32))

    exact_ids, exact_cpu, best, tenth = [], [], [], []
    for q in qs:
        d, ms = cpu_ms(lambda q=q: rounded_chunk_scores(vectors, q, None))
        ids, ms2 = cpu_ms(lambda d=d: d.top(k))
        exact_ids.append(ids)
        exact_cpu.append(ms + ms2)
        best.append(float(d.score[ids[0]]))
        tenth.append(float(d.score[ids[-1]]))

    n_lists = default_lists(n) if lists is None else lists
    t = time.perf_counter()
    c = time.process_time()
    index = build_index(vectors, n_lists)
    build = {
        "wall_s": round(time.perf_counter() - t, 1),
        "cpu_s": round(time.process_time() - c, 1),
    }
    centroids = index.centroids.astype(np.float32)
    sizes = np.diff(index.list_offsets)
    index_bytes = index.centroids.nbytes + index.list_offsets.nbytes + index.list_chunks.nbytes

    rows = []
    for p in sorted(set([*probes, default_probe(n_lists)])):
        hits, cpu = [], []
        scanned = 0
        for q, want in zip(qs, exact_ids, strict=True):
            (ids, _), ms = cpu_ms(lambda q=q, p=p: top_k(vectors, index, centroids, q, k, p))
            hits.append(len(set(ids.tolist()) & set(want.tolist())) / len(want))
            cpu.append(ms)
            scanned += int(sizes[np.argsort(-(centroids @ q))[:p]].sum())
        rows.append(
            {
                "probe": p,
                "default": p == default_probe(n_lists),
                "recall_at_k": round(float(np.mean(hits)), 4),
                "recall_min": round(float(np.min(hits)), 2),
                "cpu_ms_median": round(float(np.median(cpu)), 2),
                "cpu_ratio_vs_exact": round(float(np.median(cpu) / np.median(exact_cpu)), 4),
                "chunks_scored_share": round(scanned / queries / n, 4),
            }
        )
    return {
        "chunks": n,
        "dims": dims,
        "queries": queries,
        "k": k,
        "generate_s": round(gen_s, 1),
        "stats": {
            "random_pair_cos_mean": round(float(pair_cos.mean()), 3),
            "query_best_cos_mean": round(float(np.mean(best)), 3),
            "query_10th_cos_mean": round(float(np.mean(tenth)), 3),
        },
        "exact_cpu_ms_median": round(float(np.median(exact_cpu)), 2),
        "lists": n_lists,
        "list_size_max": int(sizes.max()),
        "list_size_median": int(np.median(sizes)),
        "empty_lists": int((sizes == 0).sum()),
        "build": build,
        "vectors_mib": round(vectors.nbytes / 2**20, 1),
        "index_mib": round(index_bytes / 2**20, 1),
        "max_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "probes": rows,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=1_000_000)
    ap.add_argument("--dims", type=int, default=384)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--probe", type=int, nargs="*", default=[8, 16, 32])
    ap.add_argument("--lists", type=int, default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    report = run(args.chunks, args.dims, args.queries, args.k, args.probe, args.lists)
    text = json.dumps(report, indent=1)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
