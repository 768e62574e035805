"""BM25 benchmark: kbpack.lexical vs bm25s and rank_bm25 on the same chunks and tokens.

Chunks: the development corpus (fixtures/eval) chunked by kbpack, then grown to ``--chunks``
synthetic chunks that each mix 3-12 random paragraphs-pieces of it (seeded), so the vocabulary
and lengths stay realistic at scale. Every engine gets the same tokens (kbpack's tokenizer, query
terms deduplicated, since kbpack counts a repeated query term once) and k1 = 1.2, b = 0.75.
bm25s's "lucene" method uses the same idf as kbpack; rank_bm25's BM25Okapi uses
ln((N - df + 0.5) / (df + 0.5)) with a floor, so its top 10 can differ for that reason alone.

Reported: index time, single-query latency p50/p95 (top 10), top-10 agreement with kbpack,
and the ratio kbpack / bm25s (target <= 1.0).

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

from kbpack.lexical import (  # noqa: E402
    PostingsBuilder,
    TermLookup,
    bm25_scores,
    length_norms,
    tokenize,
    top_k,
)

K1, B, K = 1.2, 0.75, 10


def corpus_pieces(corpus: Path) -> list[str]:
    """Paragraph-sized pieces of the extracted development corpus."""
    from chunking import extract_corpus

    pieces = []
    for doc in extract_corpus(corpus):
        pieces += [p.strip() for p in doc.text.split("\n\n") if len(p.strip()) > 20]
    return pieces


def make_chunks(pieces: list[str], n: int, seed: int = 7) -> list[str]:
    if n <= len(pieces):
        return pieces[:n]
    rng = random.Random(seed)
    out = list(pieces)
    while len(out) < n:
        out.append("\n\n".join(rng.sample(pieces, rng.randint(1, 4))))
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


def agreement(a: list[list[int]], b: list[list[int]]) -> float:
    shared = [len(set(x) & set(y)) / max(1, min(K, len(x))) for x, y in zip(a, b, strict=True) if x]
    return statistics.mean(shared) if shared else 1.0


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
    query_tokens = [list(dict.fromkeys(tokenize(q))) for q in queries]
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

    kb_results, kb_times = timed(kb_query, queries)
    report["kbpack"] = {
        "index_s_incl_tokenize": round(kb_index, 2),
        "terms": len(p.terms),
        "postings": len(p.chunk),
        "p50_ms": round(1e3 * percentile(kb_times, 0.5), 3),
        "p95_ms": round(1e3 * percentile(kb_times, 0.95), 3),
    }

    import bm25s

    t = time.perf_counter()
    retriever = bm25s.BM25(k1=K1, b=B, method="lucene")
    retriever.index(tokens, show_progress=False)
    s_index = time.perf_counter() - t
    vocab = retriever.vocab_dict

    def s_query(q: list[str]) -> list[int]:
        known = [w for w in q if w in vocab]
        if not known:
            return []
        docs, scores = retriever.retrieve([known], k=K, show_progress=False, n_threads=0)
        return [int(d) for d, s in zip(docs[0], scores[0], strict=True) if s > 0]

    s_results, s_times = timed(s_query, query_tokens)
    report["bm25s"] = {
        "index_s_plus_tokenize": round(s_index + report["tokenize_s"], 2),
        "p50_ms": round(1e3 * percentile(s_times, 0.5), 3),
        "p95_ms": round(1e3 * percentile(s_times, 0.95), 3),
        "top10_agreement": round(agreement(kb_results, s_results), 3),
    }
    report["ratio_p50_kbpack_over_bm25s"] = round(
        report["kbpack"]["p50_ms"] / report["bm25s"]["p50_ms"], 2
    )

    if len(texts) <= args.rank_bm25_max:
        from rank_bm25 import BM25Okapi

        t = time.perf_counter()
        okapi = BM25Okapi(tokens, k1=K1, b=B)
        r_index = time.perf_counter() - t

        def r_query(q: list[str]) -> list[int]:
            scores = okapi.get_scores(q)
            hit = np.flatnonzero(scores > 0)
            return top_k(hit, scores[hit], K)[0].tolist()

        r_results, r_times = timed(r_query, query_tokens)
        report["rank_bm25"] = {
            "index_s_plus_tokenize": round(r_index + report["tokenize_s"], 2),
            "p50_ms": round(1e3 * percentile(r_times, 0.5), 3),
            "p95_ms": round(1e3 * percentile(r_times, 0.95), 3),
            "top10_agreement": round(agreement(kb_results, r_results), 3),
        }
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


def render(r: dict[str, Any]) -> str:
    out = [
        f"{r['chunks']:,} chunks, {r['queries']} queries, k1={r['k1']} b={r['b']}; "
        f"tokenizing all chunks {r['tokenize_s']} s"
    ]
    for name in ("kbpack", "bm25s", "rank_bm25"):
        if name not in r:
            continue
        s = r[name]
        index = s.get("index_s_incl_tokenize", s.get("index_s_plus_tokenize"))
        line = f"{name:9} index {index:7.2f} s   query p50 {s['p50_ms']:8.3f} ms  p95 {s['p95_ms']:8.3f} ms"
        if "top10_agreement" in s:
            line += f"  top-10 agreement with kbpack {s['top10_agreement']:.3f}"
        out.append(line)
    out.append(f"ratio kbpack/bm25s (p50 query latency): {r['ratio_p50_kbpack_over_bm25s']}")
    return "\n".join(out)


if __name__ == "__main__":
    raise SystemExit(main())
