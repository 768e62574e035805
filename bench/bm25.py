"""BM25 benchmark: kbpack.search.bm25 vs bm25s and rank_bm25 on the same chunks and tokens.

Chunks: the development corpus (fixtures/eval) chunked by kbpack, then grown to ``--chunks``
synthetic chunks that each mix 3-12 random paragraphs-pieces of it (seeded), so the vocabulary
and lengths stay realistic at scale. Every engine gets the same tokens (kbpack's tokenizer, query
terms deduplicated, since kbpack counts a repeated query term once; query timings include
tokenizing the query text for every engine) and k1 = 1.2, b = 0.75.
bm25s's "lucene" method uses the same idf as kbpack; rank_bm25's BM25Okapi uses
ln((N - df + 0.5) / (df + 0.5)) with a floor, so its top 10 can differ for that reason alone.

Reported: index time, single-query latency p50/p95 (top 10; kbpack and bm25s timed
interleaved, query by query), top-10 agreement with kbpack, and the ratio kbpack / bm25s
(target <= 1.0), for ``bm25_scores`` + ``top_k`` (the reference path: every matching chunk
scored, then sorted) and ``BM25Index.top`` (all contributions computed at load, as bm25s does
at index time; ``kbpack.search.bm25_top``). bench/bm25_pack.py measures the same on a pack's own
query paths.

    python bench/bm25.py --chunks 100000
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from kbpack.index.postings import PostingsBuilder  # noqa: E402
from kbpack.pack.bm25_store import TermLookup  # noqa: E402
from kbpack.search.bm25 import BM25Index, bm25_scores, length_norms, top_k  # noqa: E402
from kbpack.text.analyze import tokenize  # noqa: E402

K1, B, K = 1.2, 0.75, 10


def corpus_pieces(corpus: Path) -> list[str]:
    """Paragraph-sized pieces of the extracted development corpus."""
    from chunking import extract_corpus

    pieces = []
    for doc in extract_corpus(corpus):
        pieces += [p.strip() for p in doc.text.split("\n\n") if len(p.strip()) > 20]
    return pieces


def make_chunks(pieces: list[str], n: int, seed: int = 7) -> list[str]:
    """The pieces themselves, then distinct random mixes of 2-4 of them."""
    if n <= len(pieces):
        return pieces[:n]
    rng = random.Random(seed)
    out, seen = list(pieces), set()
    while len(out) < n:
        pick = tuple(rng.sample(range(len(pieces)), rng.randint(2, 4)))
        if pick not in seen:
            seen.add(pick)
            out.append("\n\n".join(pieces[i] for i in pick))
    return out


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def timed(fn: Any, queries: list[Any]) -> tuple[list[Any], list[float]]:
    results, times = [], []
    for q in queries:
        t = time.perf_counter()
        results.append(fn(q))
        times.append(time.perf_counter() - t)
    return results, times


def agreement(ours: list[tuple[np.ndarray, np.ndarray]], theirs: list[list[int]]) -> float:
    """Share of the other engine's top 10 that kbpack ranks in its top 10 *or ties with its
    10th score*: ties (common with duplicated text) may be ordered differently by each engine."""
    shares = []
    for (ids, scores), other in zip(ours, theirs, strict=True):
        if len(ids) == 0:
            continue
        score = dict(zip(ids.tolist(), scores.tolist(), strict=True))
        top = top_k(ids, scores, K)[1]
        floor = float(top[-1]) * (1 - 1e-6)
        shares.append(sum(score.get(c, 0.0) >= floor for c in other) / min(K, len(ids)))
    return statistics.mean(shares) if shares else 1.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, default=ROOT / "fixtures/eval/corpus")
    ap.add_argument("--questions", type=Path, default=ROOT / "fixtures/eval/questions.jsonl")
    ap.add_argument("--chunks", type=int, default=100_000)
    ap.add_argument("--rank-bm25-max", type=int, default=20_000, help="skip rank_bm25 above this")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    texts = make_chunks(corpus_pieces(args.corpus), args.chunks)
    lines = args.questions.read_text(encoding="utf-8").splitlines()
    queries = [json.loads(line)["query"] for line in lines if line.strip()]
    report: dict[str, Any] = {"chunks": len(texts), "queries": len(queries), "k1": K1, "b": B}

    t = time.perf_counter()
    tokens = [tokenize(x) for x in texts]
    report["tokenize_s"] = round(time.perf_counter() - t, 2)

    # kbpack: the builder tokenizes itself, so its time includes tokenizing.
    t = time.perf_counter()
    builder = PostingsBuilder()
    for i, x in enumerate(texts):
        builder.add(i, x)
    p = builder.finish(len(texts))
    lookup = TermLookup.from_terms(p.terms)
    norms = length_norms(p.doc_len, K1, B)
    kb_index = time.perf_counter() - t

    def kb_query(q: str) -> list[int]:
        ids, scores = bm25_scores(q, lookup, p.indptr, p.chunk, p.tf, p.doc_len, norms=norms)
        return top_k(ids, scores, K)[0].tolist()

    t = time.perf_counter()
    index = BM25Index(lookup, p.indptr, p.chunk, p.tf, p.doc_len, K1, B)
    index_load = time.perf_counter() - t
    kb_full = [bm25_scores(q, lookup, p.indptr, p.chunk, p.tf, p.doc_len) for q in queries]

    import bm25s

    t = time.perf_counter()
    retriever = bm25s.BM25(k1=K1, b=B, method="lucene")
    retriever.index(tokens, show_progress=False)
    s_index = time.perf_counter() - t
    vocab = retriever.vocab_dict

    def s_query(q: str) -> list[int]:
        # Tokenizing is timed here too: both engines start from the user's text.
        known = [w for w in dict.fromkeys(tokenize(q)) if w in vocab]
        if not known:
            return []
        docs, scores = retriever.retrieve([known], k=K, show_progress=False, n_threads=0)
        return [int(d) for d, s in zip(docs[0], scores[0], strict=True) if s > 0]

    # The three engines timed interleaved, query by query, the order rotating: on a shared
    # machine no engine gets a quieter stretch than another.
    engines: dict[str, Any] = {
        "kbpack": kb_query,
        "kbpack_BM25Index": lambda q: index.top(q, K),
        "bm25s": s_query,
    }
    times: dict[str, list[float]] = {name: [] for name in engines}
    s_results: list[Any] = []
    names = list(engines)
    for i, q in enumerate(queries):
        for name in names[i % 3 :] + names[: i % 3]:
            t = time.perf_counter()
            got = engines[name](q)
            times[name].append(time.perf_counter() - t)
            if name == "bm25s":
                s_results.append(got)
    kb_times, index_times, s_times = times["kbpack"], times["kbpack_BM25Index"], times["bm25s"]
    report["kbpack"] = {
        "index_s_incl_tokenize": round(kb_index, 2),
        "terms": len(p.terms),
        "postings": len(p.chunk),
        "p50_ms": round(1e3 * percentile(kb_times, 0.5), 3),
        "p95_ms": round(1e3 * percentile(kb_times, 0.95), 3),
    }
    report["kbpack_BM25Index"] = {
        "load_s": round(index_load, 3),
        "p50_ms": round(1e3 * percentile(index_times, 0.5), 3),
        "p95_ms": round(1e3 * percentile(index_times, 0.95), 3),
    }
    report["bm25s"] = {
        "index_s_plus_tokenize": round(s_index + report["tokenize_s"], 2),
        "p50_ms": round(1e3 * percentile(s_times, 0.5), 3),
        "p95_ms": round(1e3 * percentile(s_times, 0.95), 3),
        "top10_agreement": round(agreement(kb_full, s_results), 3),
    }
    bm25s_p50 = report["bm25s"]["p50_ms"]
    report["ratio_p50_kbpack_over_bm25s"] = round(report["kbpack"]["p50_ms"] / bm25s_p50, 2)
    report["ratio_p50_BM25Index_over_bm25s"] = round(
        report["kbpack_BM25Index"]["p50_ms"] / bm25s_p50, 2
    )

    if len(texts) <= args.rank_bm25_max:
        from rank_bm25 import BM25Okapi

        t = time.perf_counter()
        okapi = BM25Okapi(tokens, k1=K1, b=B)
        r_index = time.perf_counter() - t

        def r_query(q: str) -> list[int]:
            scores = okapi.get_scores(list(dict.fromkeys(tokenize(q))))
            hit = np.flatnonzero(scores > 0)
            return top_k(hit, scores[hit], K)[0].tolist()

        r_results, r_times = timed(r_query, queries)
        report["rank_bm25"] = {
            "index_s_plus_tokenize": round(r_index + report["tokenize_s"], 2),
            "p50_ms": round(1e3 * percentile(r_times, 0.5), 3),
            "p95_ms": round(1e3 * percentile(r_times, 0.95), 3),
            "top10_agreement": round(agreement(kb_full, r_results), 3),
        }
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


def render(r: dict[str, Any]) -> str:
    out = [
        f"{r['chunks']:,} chunks, {r['queries']} queries, k1={r['k1']} b={r['b']}; "
        f"tokenizing all chunks {r['tokenize_s']} s"
    ]
    for name in (
        "kbpack",
        "kbpack_BM25Index",
        "bm25s",
        "rank_bm25",
    ):
        if name not in r:
            continue
        s = r[name]
        index = s.get("index_s_incl_tokenize", s.get("index_s_plus_tokenize"))
        built = f"index {index:7.2f} s" if index is not None else f"load  {s['load_s']:7.2f} s"
        line = f"{name:29} {built}   query p50 {s['p50_ms']:8.3f} ms  p95 {s['p95_ms']:8.3f} ms"
        if "top10_agreement" in s:
            line += f"  top-10 agreement with kbpack {s['top10_agreement']:.3f}"
        out.append(line)
    out.append(
        f"ratio kbpack/bm25s (p50 query latency): bm25_scores {r['ratio_p50_kbpack_over_bm25s']}"
        f", BM25Index {r['ratio_p50_BM25Index_over_bm25s']}"
    )
    return "\n".join(out)


if __name__ == "__main__":
    raise SystemExit(main())
