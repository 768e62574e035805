"""Approximate (IVF) dense search against the exact scan: recall@10, CPU per query, memory.

Vectors: synthetic, with the statistics of real chunk embeddings rather than uniform noise (on
which no index can work: every point is as far from every other). A hierarchical Gaussian
mixture -- topics, documents of ``PER_DOC`` chunks, sections of ``PER_SECTION`` chunks, chunks
-- around the real vectors' mean, each level's spread drawn with the real vectors' covariance
(its eigenvectors and eigenvalues: a few directions carry most of the variance, as in real
embeddings), from a real pack given with ``--real`` (all-MiniLM-L6-v2 over fixtures/eval/corpus:
``kbpack build fixtures/eval/corpus -o out/bench/eval.kbpack --no-pieces``). Queries are fresh
points around a section, farther from it than its chunks. The level weights were fitted so that
a mixture of the real pack's size reproduces its statistics (chunk pairs of different
documents, of the same document, a chunk's nearest neighbour, and the real questions of
fixtures/eval/questions.jsonl against the chunks: best, 10th and 100th cosine); ``--fit``
prints both side by side. Without ``--real``: an assumed spectrum (scale ~ 1/sqrt(d)).

Exact: the product's exact path (``rounded_chunk_scores(...).top(k)``: one float16 pass over
every row, the rows near the top re-scored in float32). IVF: ``kbpack.search.ivf.top_k`` over
an index from ``kbpack.pack.ivf.build_index`` (the writer's), at each ``--probe``. CPU is
``time.process_time`` (every thread), per query, median over the queries; both paths run in
the same process on the same in-memory float16 matrix.

    nice python bench/ivf.py --real out/bench/eval.kbpack --fit
    nice python bench/ivf.py --real out/bench/eval.kbpack --chunks 1000000 --json out/bench/ivf-1m.json
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

PER_DOC = 35  # chunks per document (fixtures/eval/corpus: 1,252 chunks of 36 documents)
PER_SECTION = 5
# variance of each level (of the vectors' total, before normalising) and the mean's weight:
# fitted to the real pack (``--fit``)
TOPIC, DOC, SECTION, CHUNK, QUERY, MEAN = 0.05, 0.3, 0.3, 0.28, 1.4, 0.85
SECTIONS_PER_BLOCK = 50_000


def _unit(a: np.ndarray) -> np.ndarray:
    return a / np.linalg.norm(a, axis=1, keepdims=True)


def real_statistics(pack: Path | None, dims: int) -> tuple[np.ndarray, np.ndarray]:
    """(mean, basis): the real vectors' mean and a (dims, dims) matrix B such that
    ``z @ B`` (z standard normal) has their covariance, scaled to total variance 1."""
    if pack is None:
        scale = 1.0 / np.sqrt(np.arange(1, dims + 1))
        rng = np.random.default_rng(3)
        mean = 0.34 * _unit(rng.standard_normal((1, dims)))[0]
        return mean.astype(np.float32), np.diag(scale / np.linalg.norm(scale)).astype(np.float32)
    from kbpack.pack import format as F
    from kbpack.pack.read import PackReader

    with PackReader(pack) as r:
        v = np.asarray(r.dataset(F.VEC_DATA)[:], dtype=np.float64)
    lam, vecs = np.linalg.eigh(np.cov(v.T))
    lam = np.clip(lam, 0.0, None)
    basis = (vecs * np.sqrt(lam / lam.sum())).T
    return v.mean(axis=0).astype(np.float32), basis.astype(np.float32)


class Mixture:
    """Topics -> documents -> sections -> chunks (see the module docstring), seeded."""

    def __init__(self, n: int, mean: np.ndarray, basis: np.ndarray, seed: int = 1) -> None:
        self.rng = np.random.default_rng(seed)
        self.n, self.mean, self.basis = n, MEAN * mean, basis
        self.sections = max(1, n // PER_SECTION)
        docs = max(1, n // PER_DOC)
        topics = max(4, docs // 3)
        weights = 1.0 / np.arange(1, topics + 1) ** 0.8
        doc_topic = self.rng.choice(topics, size=docs, p=weights / weights.sum())
        t = self._noise(topics, TOPIC)
        self.doc_centres = t[doc_topic] + self._noise(docs, DOC)
        self.section_doc = self.rng.integers(0, docs, self.sections)

    def _noise(self, rows: int, variance: float) -> np.ndarray:
        z = self.rng.standard_normal((rows, self.basis.shape[0]), dtype=np.float32)
        return np.sqrt(variance, dtype=np.float32) * (z @ self.basis)

    def generate(self, queries: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(chunks float16, queries float32, each chunk's document)."""
        out = np.empty((self.n, self.basis.shape[0]), np.float16)
        chunk_doc = np.empty(self.n, np.int64)
        asked = np.sort(self.rng.choice(self.sections, size=queries, replace=False))
        qs = np.empty((queries, self.basis.shape[0]), np.float32)
        at, done = 0, 0
        for first in range(0, self.sections, SECTIONS_PER_BLOCK):
            last = min(self.sections, first + SECTIONS_PER_BLOCK)
            docs = self.section_doc[first:last]
            centres = self.doc_centres[docs] + self._noise(last - first, SECTION)
            # the last section takes the rows left over
            per = np.full(last - first, PER_SECTION)
            if last == self.sections:
                per[-1] += self.n - self.sections * PER_SECTION
            rows = np.repeat(np.arange(last - first), per)
            x = self.mean + centres[rows] + self._noise(rows.size, CHUNK)
            out[at : at + rows.size] = _unit(x)
            chunk_doc[at : at + rows.size] = docs[rows]
            at += rows.size
            mine = asked[(asked >= first) & (asked < last)] - first
            if mine.size:
                q = self.mean + centres[mine] + self._noise(mine.size, QUERY)
                qs[done : done + mine.size] = _unit(q)
                done += mine.size
        return out, qs, chunk_doc


def _top_cosines(rows: np.ndarray, vectors: np.ndarray, keep: int) -> np.ndarray:
    """The ``keep`` highest cosines of each of ``rows`` (float32) against ``vectors``, best
    first, a block of vectors at a time (no float32 copy of them all)."""
    best = np.full((len(rows), keep), -np.inf, np.float32)
    for at in range(0, len(vectors), 262144):
        s = rows @ vectors[at : at + 262144].astype(np.float32).T
        both = np.concatenate([best, s], axis=1)
        best = (
            -np.sort(-both, axis=1)[:, :keep]
            if both.shape[1] <= 4 * keep
            else -np.sort(-np.partition(both, both.shape[1] - keep, axis=1)[:, -keep:], axis=1)
        )
    return best


def statistics(
    vectors: np.ndarray, queries: np.ndarray, doc: np.ndarray, sample: int = 2000
) -> dict[str, float | None]:
    """The cosines the mixture was fitted on: pairs of chunks, a chunk's nearest other chunk
    (over a sample of chunks), the queries' best, 10th and 100th."""
    rng = np.random.default_rng(2)
    a, b = rng.integers(0, len(vectors), 20000), rng.integers(0, len(vectors), 20000)
    pair = np.einsum("ij,ij->i", vectors[a].astype(np.float32), vectors[b].astype(np.float32))
    other = doc[a] != doc[b]
    picked = rng.choice(len(vectors), size=min(sample, len(vectors)), replace=False)
    near = _top_cosines(vectors[picked].astype(np.float32), vectors, 2)[:, 1]  # [0]: itself
    keep = min(100, len(vectors))
    ranked = _top_cosines(np.asarray(queries, np.float32), vectors, keep)
    return {
        "pair_other_doc": round(float(pair[other].mean()), 3),
        "pair_same_doc": round(float(pair[~other].mean()), 3) if (~other).any() else None,
        "nearest_chunk": round(float(near.mean()), 3),
        "query_best": round(float(ranked[:, 0].mean()), 3),
        "query_10th": round(float(ranked[:, 9].mean()), 3),
        "query_100th": round(float(ranked[:, keep - 1].mean()), 3),
    }


def fit_report(pack: Path, questions: Path) -> dict[str, Any]:
    """The real pack's statistics (its questions embedded with its model) beside the mixture's
    at the same size."""
    import kbpack
    from kbpack.pack import format as F
    from kbpack.pack.read import PackReader

    with PackReader(pack) as r:
        real = np.asarray(r.dataset(F.VEC_DATA)[:])
        doc = r.column(F.CHUNK_DOCUMENT).astype(np.int64)
    texts = [json.loads(line)["query"] for line in questions.read_text().splitlines() if line]
    with kbpack.open(pack) as p:
        s = p.searcher
        q = np.stack([s.query_vector(t) for t in texts])
    mean, basis = real_statistics(pack, real.shape[1])
    synth, sq, sdoc = Mixture(len(real), mean, basis).generate(min(300, len(real) // PER_SECTION))
    return {
        "chunks": len(real),
        "real": statistics(real, q, doc),
        "mixture": statistics(synth, sq, sdoc),
    }


def cpu_ms(fn: Any) -> tuple[Any, float]:
    t = time.process_time()
    out = fn()
    return out, (time.process_time() - t) * 1000


def _codes(rows: np.ndarray, scale: float) -> np.ndarray:
    """int8 codes of float16 rows: round(x * 127 / scale), clipped (one scale for all)."""
    out = np.empty(rows.shape, np.int8)
    for at in range(0, len(rows), 262144):
        block = rows[at : at + 262144].astype(np.float32) * (127.0 / scale)
        out[at : at + len(block)] = np.clip(np.rint(block), -127, 127)
    return out


def _segments(index: Any, lists: np.ndarray) -> list[tuple[int, int]]:
    return [(int(index.list_offsets[i]), int(index.list_offsets[i + 1])) for i in lists]


def _ordered_top_k(
    vectors: np.ndarray,
    ordered: np.ndarray,
    index: Any,
    centroids: np.ndarray,
    q: np.ndarray,
    k: int,
    p: int,
) -> tuple[np.ndarray, np.ndarray]:
    """IVF-Flat over list-ordered float16 rows: each probed list scanned where it lies."""
    from kbpack.pack.vector_scan import rows_of, scan_matrix_bounded
    from kbpack.search.dense import DenseScores, exact_scores
    from kbpack.search.ivf import nearest_lists

    segs = _segments(index, nearest_lists(centroids, q, p))
    parts = [scan_matrix_bounded(ordered[a:b], q, rounded=True) for a, b in segs]
    cos = np.concatenate([x for x, _ in parts]) if parts else np.zeros(0, np.float32)
    error = max((e for _, e in parts), default=0.0)
    ids = np.concatenate([index.list_chunks[a:b] for a, b in segs]).astype(np.int64)

    def rescore(local: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return exact_scores(vectors, q, None, ids[local], rows_of)

    d = DenseScores(cos, cos.copy(), error, rescore)
    local = d.top(k)
    return ids[local], d.cos[local]


def _codes_top_k(
    vectors: np.ndarray,
    codes: np.ndarray,
    scale: float,
    index: Any,
    centroids: np.ndarray,
    q: np.ndarray,
    k: int,
    p: int,
    rerank: int = 200,
) -> tuple[np.ndarray, np.ndarray]:
    """IVF over list-ordered int8 codes (simsimd's int8 dot), the best ``rerank`` re-scored
    exactly from the float16 vectors."""
    import simsimd

    from kbpack.pack.vector_scan import rows_of
    from kbpack.search.dense import exact_scores
    from kbpack.search.ivf import nearest_lists

    segs = _segments(index, nearest_lists(centroids, q, p))
    q8 = np.clip(np.rint(q * (127.0 / float(np.abs(q).max()))), -127, 127).astype(np.int8)[None]
    approx = np.concatenate(
        [np.asarray(simsimd.cdist(codes[a:b], q8, metric="dot"))[:, 0] for a, b in segs]
    )
    ids = np.concatenate([index.list_chunks[a:b] for a, b in segs]).astype(np.int64)
    m = min(rerank, ids.size)
    keep = np.argpartition(-approx, m - 1)[:m] if m < ids.size else np.arange(ids.size)
    _, cos = exact_scores(vectors, q, None, ids[keep], rows_of)
    order = np.lexsort((ids[keep], -cos))[:k]
    return ids[keep][order], cos[order]


def run(
    n: int,
    queries: int,
    k: int,
    probes: list[int],
    lists: int | None,
    real: Path | None,
    dims: int = 384,
    layouts: bool = False,
) -> dict:
    t0 = time.perf_counter()
    mean, basis = real_statistics(real, dims)
    vectors, qs, doc = Mixture(n, mean, basis).generate(queries)
    gen_s = time.perf_counter() - t0
    stats = statistics(vectors, qs, doc, sample=200)

    exact_ids, exact_cpu = [], []
    for q in qs:
        d, ms = cpu_ms(lambda q=q: rounded_chunk_scores(vectors, q, None))
        ids, ms2 = cpu_ms(lambda d=d: d.top(k))
        exact_ids.append(ids)
        exact_cpu.append(ms + ms2)

    n_lists = default_lists(n) if lists is None else lists
    t = time.perf_counter()
    c = time.process_time()
    index = build_index(vectors, n_lists)
    build = {
        "wall_s": round(time.perf_counter() - t, 1),
        "cpu_s": round(time.process_time() - c, 1),
    }
    centroids = np.ascontiguousarray(index.centroids)
    sizes = np.diff(index.list_offsets)
    index_bytes = index.centroids.nbytes + index.list_offsets.nbytes + index.list_chunks.nbytes

    # the layouts kbpack does not store (yet), for comparison: the vectors copied in list
    # order (a list is then one contiguous run, as in faiss's IVF-Flat), and int8 codes of them
    ordered = np.take(vectors, index.list_chunks, axis=0) if layouts else None
    scale = float(np.abs(vectors[:: max(1, n // 100000)]).max()) if layouts else 1.0
    codes = _codes(ordered, scale) if ordered is not None else None
    searches: dict[str, Any] = {"kbpack": lambda q, p: top_k(vectors, index, centroids, q, k, p)}
    if ordered is not None and codes is not None:
        searches["list_ordered_f16"] = lambda q, p: _ordered_top_k(
            vectors, ordered, index, centroids, q, k, p
        )
        searches["list_ordered_i8"] = lambda q, p: _codes_top_k(
            vectors, codes, scale, index, centroids, q, k, p
        )
    rows = []
    for p in sorted(set([*probes, default_probe(n_lists)])):
        row: dict[str, Any] = {"probe": p, "default": p == default_probe(n_lists)}
        scanned = 0
        for q in qs:
            scanned += int(sizes[np.argsort(-(centroids.astype(np.float32) @ q))[:p]].sum())
        row["chunks_scored_share"] = round(scanned / queries / n, 4)
        for name, search in searches.items():
            hits, cpu = [], []
            for q, want in zip(qs, exact_ids, strict=True):
                (ids, _), ms = cpu_ms(lambda q=q, p=p, search=search: search(q, p))
                hits.append(len(set(ids.tolist()) & set(want.tolist())) / len(want))
                cpu.append(ms)
            tag = "" if name == "kbpack" else f"{name}_"
            row[f"{tag}recall_at_k"] = round(float(np.mean(hits)), 4)
            if name == "kbpack":
                row["recall_min"] = round(float(np.min(hits)), 2)
            row[f"{tag}cpu_ms_median"] = round(float(np.median(cpu)), 2)
            ratio = float(np.median(cpu) / np.median(exact_cpu))
            row[f"{tag}cpu_ratio_vs_exact"] = round(ratio, 4)
        rows.append(row)
    return {
        "chunks": n,
        "dims": vectors.shape[1],
        "queries": queries,
        "k": k,
        "generate_s": round(gen_s, 1),
        "vectors_from": str(real) if real else "assumed spectrum",
        "stats": stats,
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
    ap.add_argument("--real", type=Path, default=None, help="a real pack: its vectors' statistics")
    ap.add_argument(
        "--layouts",
        action="store_true",
        help="also time two layouts kbpack does not store: vectors and int8 codes in list order",
    )
    ap.add_argument(
        "--fit",
        action="store_true",
        help="print the real pack's statistics beside the mixture's at its size, and stop",
    )
    ap.add_argument(
        "--questions", type=Path, default=ROOT / "fixtures" / "eval" / "questions.jsonl"
    )
    args = ap.parse_args()
    if args.fit:
        if args.real is None:
            ap.error("--fit needs --real PACK")
        report = fit_report(args.real, args.questions)
    else:
        report = run(
            args.chunks,
            args.queries,
            args.k,
            args.probe,
            args.lists,
            args.real,
            args.dims,
            args.layouts,
        )
    text = json.dumps(report, indent=1)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
