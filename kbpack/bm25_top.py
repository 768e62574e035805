"""BM25 top-k over a query's postings: one scatter-add per term, one partition, exact ties.

A query's terms are given as ``TermList``s: the chunk ids holding the term (ascending) and the
term's contribution to each of them. Each chunk's score is its contributions added one by one
in the query's term order, from 0.0 (the *canonical* score): ``np.add.at`` and ``np.bincount``
both add in input order, so ``top_k_exact``, ``scores_at`` and ``kbpack.lexical.accumulate``
agree to the last bit, and equal scores are ties in all of them.

Why not skip postings (MaxScore, WAND)? Measured at 100k chunks on the development questions
(bench/bm25.py; 15-20 terms per question), an exact MaxScore in numpy summed only 15-30% of
the postings but spent more on its per-term binary searches and threshold estimates (dozens
of small numpy calls per query) than the scatter-add it saved: 3.7x slower than this loop,
which is 0.9x bm25s's query. The notes of issue 19 keep the figures.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TermList:
    """One query term's postings: chunk ids (ascending, unique) and each chunk's BM25
    contribution (> 0)."""

    ids: np.ndarray
    contrib: np.ndarray

    def at(self, ids: np.ndarray) -> np.ndarray:
        """The contribution to each of ``ids`` (0.0 where the term is absent)."""
        if not len(self.ids):
            return np.zeros(len(ids), dtype=np.float64)
        # keys in the postings' dtype: with mixed dtypes searchsorted copies the whole list
        pos = np.searchsorted(self.ids, ids.astype(self.ids.dtype, copy=False))
        pos = np.minimum(pos, len(self.ids) - 1)
        return np.where(self.ids[pos] == ids, self.contrib[pos], 0.0)


def scores_at(terms: Sequence[TermList], ids: np.ndarray) -> np.ndarray:
    """Canonical BM25 scores of ``ids`` (any order): contributions added in the order of
    ``terms`` (the query's), from 0.0. A term a chunk lacks adds 0.0, which changes no sum."""
    ids = np.asarray(ids)
    out = np.zeros(len(ids), dtype=np.float64)
    for term in terms:
        out += term.at(ids)
    return out


def summed(terms: Sequence[TermList], n: int) -> np.ndarray:
    """Every chunk's canonical score (0.0 for chunks holding no term), one per chunk."""
    acc = np.zeros(n, dtype=np.float64)
    for term in terms:
        # numpy's unbuffered scatter-add, in input order; ~0.9 ms for 400k postings here, where
        # concatenating the terms and one bincount took 1.3-25 ms (fresh multi-MB buffers)
        np.add.at(acc, term.ids, term.contrib)
    return acc


def top_k_exact(
    terms: Sequence[TermList], n: int, k: int, mask: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best chunks of ``0..n-1`` (those ``mask`` keeps, when given): (ids, canonical
    scores), best first, equal scores by ascending id, only chunks holding a term -- what
    ``top_k`` returns over ``accumulate``'s scores. ``terms`` in the query's order."""
    if k <= 0 or n == 0 or not any(len(t.ids) for t in terms):
        return _empty()
    acc = summed(terms, n)
    if mask is not None:
        acc *= mask  # x * 1.0 == x: kept scores are unchanged, the others become 0
    # the k-th best value by one partition over every chunk (no list of the chunks held first)
    kth = float(np.partition(acc, n - k)[n - k]) if k < n else 0.0
    ids = np.flatnonzero(acc >= kth) if kth > 0 else np.flatnonzero(acc)
    return top_k(ids, acc[ids], k)


def top_k(ids: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best ``(ids, scores)``, best first; equal scores ordered by ascending id."""
    if k <= 0 or len(ids) == 0:
        return ids[:0], scores[:0]
    if len(ids) > k:
        # Keep everything tied with the k-th score so the tie-break below sees all candidates.
        kth = np.partition(scores, len(scores) - k)[len(scores) - k]
        keep = np.flatnonzero(scores >= kth)
        ids, scores = ids[keep], scores[keep]
    order = np.lexsort((ids, -scores))[:k]
    return ids[order], scores[order]


def _empty() -> tuple[np.ndarray, np.ndarray]:
    return np.zeros(0, dtype=np.intp), np.zeros(0, dtype=np.float64)
