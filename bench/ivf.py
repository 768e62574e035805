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
every row, the rows near the top re-scored in float32). IVF: the searcher's dense stage
(``kbpack.search.ivf.ivf_dense_scores(...).top(k)``) over the writer's index
(``kbpack.pack.ivf.build_index``: k-means lists, then the int8 codes in list order), at each
``--probe``: "codes" scores the probed lists' codes and re-scores exactly every chunk within
the codes' error bound of the top; "float16" is the same index without its codes (what packs
written before the codes do: the probed chunks' float16 rows gathered and scanned). Both
return the exact top k of the probed chunks, so their recall is the same by construction (the
bench reports both). CPU is ``time.process_time`` (every thread), per query, median over the
queries; all paths run in the same process on the same float16 matrix (memory-mapped from
``--cache`` when given: 10M x 384 float16 is 7.7 GB), after a warm-up pass.

    nice python bench/ivf.py --real out/bench/eval.kbpack --fit
    nice python bench/ivf.py --real out/bench/eval.kbpack --chunks 1000000 --cache out/bench/ivf-cache \
        --probe 50 100 200 --json out/bench/ivf-1m.json
    nice python bench/ivf.py ... --chunks 10000000 --queries 60 --build-only   # then without
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

    def generate(
        self, queries: int, out: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(chunks float16, queries float32, each chunk's document); the chunks written into
        ``out`` when given (a memory-mapped file)."""
        if out is None:
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


def _rss_mib() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def vectors_of(
    n: int, queries: int, real: Path | None, dims: int, cache: Path | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float, bool]:
    """(vectors, queries, chunk documents, seconds to generate, from the cache): the mixture's
    vectors written straight into a memory-mapped file under ``cache`` (10M x 384 float16 is
    7.7 GB: never in memory at once), kept there for the next run."""
    if cache is None:
        t0 = time.perf_counter()
        mean, basis = real_statistics(real, dims)
        v, qs, doc = Mixture(n, mean, basis).generate(queries)
        return v, qs, doc, time.perf_counter() - t0, False
    cache.mkdir(parents=True, exist_ok=True)
    stem = cache / f"mixture-{n}-{dims}-{queries}"
    vec = stem.with_suffix(".f16")
    if not (vec.exists() and stem.with_suffix(".npz").exists()):
        t0 = time.perf_counter()
        mean, basis = real_statistics(real, dims)
        out = np.lib.format.open_memmap(str(vec) + ".tmp.npy", "w+", np.float16, (n, dims))
        _, qs, doc = Mixture(n, mean, basis).generate(queries, out)
        out.flush()
        del out
        Path(str(vec) + ".tmp.npy").replace(vec)
        np.savez(stem.with_suffix(".npz"), queries=qs, doc=doc, seconds=time.perf_counter() - t0)
        cached = False
    else:
        cached = True
    meta = np.load(stem.with_suffix(".npz"))
    v = np.asarray(np.load(vec, mmap_mode="r"))  # (a plain array over the mapped file)
    return v, meta["queries"], meta["doc"], float(meta["seconds"]), cached


def index_of(vectors: np.ndarray, lists: int, cache: Path | None) -> tuple[Any, dict[str, float]]:
    """The writer's index (``build_index``: k-means, then the int8 codes), timed in its two
    parts, kept under ``cache`` (codes written there a block at a time, as a pack writer
    streams them, and memory-mapped from there) for the next run."""
    from dataclasses import replace

    from kbpack.pack.ivf import IvfIndex, with_codes

    stem = None if cache is None else cache / f"index-{len(vectors)}-{lists}"
    if stem is not None and stem.with_suffix(".npz").exists():
        z = np.load(stem.with_suffix(".npz"))
        # a plain array over the mapped file, as a reader's CodeRows gives its views
        codes = np.asarray(np.load(stem.with_suffix(".codes.npy"), mmap_mode="r"))
        index = IvfIndex(z["centroids"], z["offsets"], z["chunks"], codes, z["scale"])
        return index, {
            k: float(z[k]) for k in ("kmeans_wall_s", "kmeans_cpu_s", "codes_wall_s", "codes_cpu_s")
        }
    t, c = time.perf_counter(), time.process_time()
    index = build_index(vectors, lists, codes=False)
    timing = {"kmeans_wall_s": time.perf_counter() - t, "kmeans_cpu_s": time.process_time() - c}
    t, c = time.perf_counter(), time.process_time()
    if stem is None:
        index = with_codes(index, vectors)
    else:  # as a writer streams them (never held whole: 3.6 GB at 10M), into the cache's file
        index = with_codes(index, vectors, stream=True)
        out = np.lib.format.open_memmap(
            stem.with_suffix(".codes.npy"), mode="w+", dtype=np.int8, shape=index.codes.shape
        )
        at = 0
        for block in index.codes.blocks():
            out[at : at + len(block)] = block
            at += len(block)
        out.flush()
        del out
    timing |= {"codes_wall_s": time.perf_counter() - t, "codes_cpu_s": time.process_time() - c}
    if stem is not None:
        arrays: dict[str, Any] = {
            "centroids": index.centroids,
            "offsets": index.list_offsets,
            "chunks": index.list_chunks,
            "scale": index.code_scale,
            **timing,
        }
        np.savez(stem.with_suffix(".npz"), **arrays)
        codes = np.asarray(np.load(stem.with_suffix(".codes.npy"), mmap_mode="r"))
        index = replace(index, codes=codes)
    return index, timing


def run(
    n: int,
    queries: int,
    k: int,
    probes: list[int],
    lists: int | None,
    real: Path | None,
    dims: int = 384,
    cache: Path | None = None,
    float16_path: bool = True,
    build_only: bool = False,
) -> dict:
    from dataclasses import replace

    from kbpack.search.ivf import ivf_dense_scores

    vectors, qs, doc, gen_s, cached = vectors_of(n, queries, real, dims, cache)
    rss_after_generate = _rss_mib()
    n_lists = default_lists(n) if lists is None else lists
    index, build = index_of(vectors, n_lists, cache)
    rss_after_build = _rss_mib()
    if build_only:
        return {"chunks": n, "generate_s": gen_s, "build": build, "rss_mib": rss_after_build}
    stats = statistics(vectors, qs, doc, sample=200)
    centroids = np.ascontiguousarray(index.centroids)
    sizes = np.diff(index.list_offsets)
    index_bytes = {
        "lists": index.centroids.nbytes + index.list_offsets.nbytes + index.list_chunks.nbytes,
        "codes": int(np.prod(index.codes.shape)) + index.code_scale.nbytes,
    }
    no_codes = replace(index, codes=None, code_scale=None)

    for q in qs[:3]:  # warm the page cache (vectors and codes mapped from the cache)
        rounded_chunk_scores(vectors, q, None)
        top_k(vectors, index, centroids, q, k, len(centroids))
    exact_ids, exact_cpu = [], []
    for q in qs:
        d, ms = cpu_ms(lambda q=q: rounded_chunk_scores(vectors, q, None))
        ids, ms2 = cpu_ms(lambda d=d: d.top(k))
        exact_ids.append(ids)
        exact_cpu.append(ms + ms2)

    def with_codes_path(q: np.ndarray, p: int) -> tuple[np.ndarray, int]:
        d = ivf_dense_scores(vectors, index, centroids, q, None, p)
        return d.top(k), int(d.exact[d.probed].sum())

    def float16_path_(q: np.ndarray, p: int) -> tuple[np.ndarray, int]:
        d = ivf_dense_scores(vectors, no_codes, centroids, q, None, p)
        return d.top(k), int(d.exact[d.probed].sum())

    searches: dict[str, Any] = {"codes": with_codes_path}
    if float16_path:
        searches["float16"] = float16_path_
    rows = []
    default = default_probe(n_lists)
    for p in sorted(set([*probes, default])):
        p = min(p, n_lists)
        row: dict[str, Any] = {"probe": p, "default": p == default}
        row["lists_share"] = round(p / n_lists, 4)
        scanned = 0
        for q in qs:
            scanned += int(sizes[np.argsort(-(centroids.astype(np.float32) @ q))[:p]].sum())
        row["chunks_scored_share"] = round(scanned / queries / n, 4)
        for name, search in searches.items():
            hits, cpu, shortlist = [], [], []
            for q, want in zip(qs, exact_ids, strict=True):
                (ids, rescored), ms = cpu_ms(lambda q=q, p=p, search=search: search(q, p))
                hits.append(len(set(ids.tolist()) & set(want.tolist())) / len(want))
                cpu.append(ms)
                shortlist.append(rescored)
            row[f"{name}_recall_at_k"] = round(float(np.mean(hits)), 4)
            row[f"{name}_recall_min"] = round(float(np.min(hits)), 2)
            row[f"{name}_cpu_ms_median"] = round(float(np.median(cpu)), 2)
            row[f"{name}_cpu_ratio_vs_exact"] = round(
                float(np.median(cpu) / np.median(exact_cpu)), 4
            )
            row[f"{name}_rescored_median"] = int(np.median(shortlist))
            row[f"{name}_rescored_max"] = int(np.max(shortlist))
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    return {
        "chunks": n,
        "dims": vectors.shape[1],
        "queries": queries,
        "k": k,
        "generate_s": round(gen_s, 1),
        "generated_before": cached,
        "vectors_from": str(real) if real else "assumed spectrum",
        "stats": stats,
        "exact_cpu_ms_median": round(float(np.median(exact_cpu)), 2),
        "lists": n_lists,
        "list_size_max": int(sizes.max()),
        "list_size_median": int(np.median(sizes)),
        "empty_lists": int((sizes == 0).sum()),
        "build": {key: round(v, 1) for key, v in build.items()},
        "vectors_mib": round(vectors.nbytes / 2**20, 1),
        "index_mib": {key: round(v / 2**20, 1) for key, v in index_bytes.items()},
        "max_rss_mib": {
            "after_generate": rss_after_generate,
            "after_build": rss_after_build,
            "end": _rss_mib(),
        },
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
        "--cache",
        type=Path,
        default=None,
        help="keep the vectors (memory-mapped) and the index here, and reuse them next time",
    )
    ap.add_argument(
        "--build-only",
        action="store_true",
        help="generate the vectors and build the index into --cache, and stop",
    )
    ap.add_argument(
        "--no-float16",
        action="store_true",
        help="do not also time the index without codes (probed float16 rows gathered)",
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
            args.cache,
            not args.no_float16,
            args.build_only,
        )
    text = json.dumps(report, indent=1)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
