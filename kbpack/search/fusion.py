"""Hybrid fusion by scores: a convex combination of the normalised cosine and BM25 scores.

The rule (docs/search.md, spec "Fusion"), over the candidates = dense top 100 union BM25 top 100::

    score(c) = 0.8 * minmax(cos)(c) + 0.2 * bm25(c) / max bm25

``minmax(cos)`` maps the candidates' cosine similarities onto [0, 1] (all equal -> 1);
``bm25(c) / max bm25`` divides by the query's best BM25 score among the candidates (0 when no
candidate shares a term with the query). Ties go to the smaller chunk id.

Why scores and not ranks: reciprocal rank fusion throws away how far apart two candidates are
(Bruch, Gai & Ingber, "An Analysis of Fusion Functions for Hybrid Retrieval", ACM TOIS 2023).
Dividing BM25 by the query's top score keeps its shape: a query whose rare term picks out one
chunk gives that chunk a clear lead, a query whose words are everywhere gives flat, small
differences, so lexical evidence weighs in where its terms are rare (IDF) without any guess
at which words "look like code". The previous rule (weighted RRF switched on by code-like
terms) lost to dense alone on user-worded questions outside the development set, because
``HTML``, ``TCP``, ``40`` in ordinary questions switched full RRF on. The weight 0.8 is a round
value: bench/fusion.py shows it against 0.7 and 0.9 on both phrasings. It stays the same for
every query: lexical weights that grow with the IDF of the query's terms (bench/quality_table.py
--idf, docs/quality.md) did not win on both phrasings of the development set.
"""

from __future__ import annotations

import numpy as np

DENSE_WEIGHT = 0.8
CANDIDATES = 100  # per list; the fused list is cut to k afterwards
RULE = "convex: 0.8*minmax(cos) + 0.2*bm25/max(bm25) over dense top 100 + bm25 top 100"


def convex(
    chunks: np.ndarray, cos: np.ndarray, bm25: np.ndarray, dense_weight: float = DENSE_WEIGHT
) -> tuple[np.ndarray, np.ndarray]:
    """Fuse aligned per-candidate scores; returns (chunk ids, fused scores), best first.

    ``chunks``, ``cos`` and ``bm25`` have one entry per candidate. ``bm25`` is 0 for a candidate
    that shares no term with the query; ``cos`` is its cosine similarity to the query (NaN or
    -inf is not allowed: every candidate has a vector).
    """
    chunks = np.asarray(chunks, dtype=np.int64)
    cos = np.asarray(cos, dtype=np.float64)
    bm25 = np.asarray(bm25, dtype=np.float64)
    if not (chunks.shape == cos.shape == bm25.shape) or chunks.ndim != 1:
        raise ValueError("chunks, cos and bm25 must be 1-d and aligned")
    if chunks.size == 0:
        return chunks, cos
    if not np.isfinite(cos).all():
        raise ValueError("every candidate needs a finite cosine similarity")
    if (bm25 < 0).any():
        raise ValueError("BM25 scores are never negative")
    lo, hi = float(cos.min()), float(cos.max())
    dense = (cos - lo) / (hi - lo) if hi > lo else np.ones_like(cos)
    top = float(bm25.max())
    lexical = bm25 / top if top > 0 else np.zeros_like(bm25)
    fused = dense_weight * dense + (1.0 - dense_weight) * lexical
    order = np.lexsort((chunks, -fused))
    return chunks[order], fused[order]
