"""BM25 top-k over a query's postings: one scatter-add per term, one partition, exact ties.

A query's terms are given as ``TermList``s: the chunk ids holding the term (ascending) and the
term's contribution to each of them. Each chunk's score is its contributions added one by one
in the query's term order, from 0.0 (the *canonical* score): ``np.add.at`` and ``np.bincount``
both add in input order, so ``top_k_exact``, ``scores_at`` and ``kbpack.search.bm25.accumulate``
agree to the last bit, and equal scores are ties in all of them.

Why not skip postings (MaxScore, WAND) on the baked index? Measured at 100k chunks on the
development questions (bench/bm25.py; 15-20 terms per question), an exact MaxScore in numpy
summed only 15-30% of the postings but spent more on its per-term binary searches and
threshold estimates (dozens of small numpy calls per query) than the scatter-add it saved:
3.7x slower than this loop, which is 0.9x bm25s's query. The notes of issue 19 keep the figures.

A process's first query is different: there the cost is *reading* the common terms' postings
(inflating ~8 bytes per posting). A pack may hold those terms as dense tf rows
(``/bm25/dense_tf``, spec §3.7.1), read as ``DenseTerm``s; ``top_k_exact`` then skips
computing the contributions of the common terms whose bounds together cannot lift a chunk
into the top k (one MaxScore cut, no per-term searches), and scores only the candidates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

# Relative slack on the pruning bounds: the bounds are summed in another order than the
# canonical scores, so they may differ from them in the last bits (~1e-16 relative).
_SLACK = 1e-9


@dataclass(frozen=True)
class TermList:
    """One query term's postings: chunk ids (ascending, unique) and each chunk's BM25
    contribution (> 0)."""

    ids: np.ndarray
    contrib: np.ndarray
    # The same contributions spread over every chunk (0.0 where the term is absent), when the
    # holder keeps one (``BM25Index``, for terms in half the chunks or more): one dense add
    # costs less than a scatter-add of that many postings, and adds the same bits.
    row: np.ndarray | None = None

    def at(self, ids: np.ndarray) -> np.ndarray:
        """The contribution to each of ``ids`` (0.0 where the term is absent)."""
        if not len(self.ids):
            return np.zeros(len(ids), dtype=np.float64)
        # keys in the postings' dtype: with mixed dtypes searchsorted copies the whole list
        pos = np.searchsorted(self.ids, ids.astype(self.ids.dtype, copy=False))
        pos = np.minimum(pos, len(self.ids) - 1)
        return np.where(self.ids[pos] == ids, self.contrib[pos], 0.0)


class DenseTerm:
    """One common term read as a dense row: its tf in every chunk (uint8, 0 where absent).

    ``weight`` is ``idf_weights`` of the term's document frequency, ``norms`` the chunks'
    length norms. Contributions are computed with the same float operations as
    ``kbpack.search.bm25.term_scores`` (``weight * tf / (norm + tf)``, in that order), so a term
    read this way gives the same bits as from its postings; 0.0 where the term is absent, which
    changes no sum. ``ids`` and ``contrib`` (the ``TermList`` view) are made on demand."""

    def __init__(self, tf: np.ndarray, weight: float, norms: np.ndarray) -> None:
        self.tf = tf
        self.weight = float(weight)
        self.norms = norms

    @property
    def bound(self) -> float:
        """No chunk gets more than this from the term: tf / (tf + norm) < 1."""
        return self.weight

    def _contrib(self, tf: np.ndarray, norms: np.ndarray) -> np.ndarray:
        f = tf.astype(np.float64)
        den = norms + f
        f *= self.weight
        # where tf is 0, f stays 0.0 (an empty chunk's norm is 0 when b = 1: no 0 / 0)
        np.divide(f, den, out=f, where=tf != 0)
        return f

    @cached_property
    def ids(self) -> np.ndarray:
        return np.flatnonzero(self.tf)

    @cached_property
    def contrib(self) -> np.ndarray:
        ids = self.ids
        return self._contrib(self.tf[ids], self.norms[ids])

    def dense(self) -> np.ndarray:
        """The contribution to every chunk (0.0 where the term is absent)."""
        return self._contrib(self.tf, self.norms)

    def at(self, ids: np.ndarray) -> np.ndarray:
        """The contribution to each of ``ids`` (0.0 where the term is absent)."""
        return self._contrib(self.tf[ids], self.norms[ids])


Term = TermList | DenseTerm


def scores_at(terms: Sequence[Term], ids: np.ndarray) -> np.ndarray:
    """Canonical BM25 scores of ``ids`` (any order): contributions added in the order of
    ``terms`` (the query's), from 0.0. A term a chunk lacks adds 0.0, which changes no sum."""
    ids = np.asarray(ids)
    out = np.zeros(len(ids), dtype=np.float64)
    for term in terms:
        out += term.at(ids)
    return out


def summed(terms: Sequence[Term], n: int) -> np.ndarray:
    """Every chunk's canonical score (0.0 for chunks holding no term), one per chunk."""
    acc = np.zeros(n, dtype=np.float64)
    for term in terms:
        if isinstance(term, DenseTerm):
            acc += term.dense()  # adds 0.0 where the term is absent: the same sums
            continue
        if term.row is not None:
            acc += term.row
            continue
        # numpy's unbuffered scatter-add, in input order; ~0.9 ms for 400k postings here, where
        # concatenating the terms and one bincount took 1.3-25 ms (fresh multi-MB buffers)
        np.add.at(acc, term.ids, term.contrib)
    return acc


def top_k_exact(
    terms: Sequence[Term], n: int, k: int, mask: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best chunks of ``0..n-1`` (those ``mask`` keeps, when given): (ids, canonical
    scores), best first, equal scores by ascending id, only chunks holding a term -- what
    ``top_k`` returns over ``accumulate``'s scores. ``terms`` in the query's order."""
    if k <= 0 or n == 0 or not any(len(t.ids) for t in terms):
        return _empty()
    if any(isinstance(t, DenseTerm) for t in terms):
        found = _top_k_pruned(terms, n, k, mask)
        if found is not None:
            return found
    acc = summed(terms, n)
    if mask is not None:
        acc *= mask  # x * 1.0 == x: kept scores are unchanged, the others become 0
    # the k-th best value by one partition over every chunk (no list of the chunks held first)
    kth = float(np.partition(acc, n - k)[n - k]) if k < n else 0.0
    ids = np.flatnonzero(acc >= kth) if kth > 0 else np.flatnonzero(acc)
    return top_k(ids, acc[ids], k)


def _top_k_pruned(
    terms: Sequence[Term], n: int, k: int, mask: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray] | None:
    """``top_k_exact`` without computing every common term's contribution, or None when no
    common term can be left out (the caller then sums everything).

    The postings terms' sums give a floor: the k-th best of them, ``theta``, since every
    contribution is >= 0 and k chunks score at least that. Common terms (ascending bound) are
    left out while their bounds add up to less than ``theta``; the others are added densely. A
    chunk whose sum plus the left-out bounds stays under ``theta`` scores below the k-th best
    and cannot be in the top k, nor tie with it; the rest, the candidates (a few hundred for a
    question with content words), get their canonical scores from ``scores_at``."""
    partial = np.zeros(n, dtype=np.float64)
    for term in terms:
        if isinstance(term, TermList):
            if term.row is not None:
                partial += term.row
            else:
                np.add.at(partial, term.ids, term.contrib)
    if mask is not None:
        partial *= mask
    held = partial[partial > 0]
    if len(held) < k:
        return None
    theta = float(np.partition(held, len(held) - k)[len(held) - k]) * (1 - _SLACK)
    dense = sorted((t for t in terms if isinstance(t, DenseTerm)), key=lambda t: t.bound)
    left_out = 0.0
    cut = 0
    for term in dense:
        if (left_out + term.bound) * (1 + _SLACK) >= theta:
            break
        left_out += term.bound
        cut += 1
    if cut == 0:
        return None
    if cut < len(dense):
        for term in dense[cut:]:
            partial += term.dense()
        if mask is not None:
            partial *= mask
        # these sums are floors too, and higher: a higher floor leaves fewer candidates
        held = partial[partial > 0]
        theta = max(theta, float(np.partition(held, len(held) - k)[len(held) - k]) * (1 - _SLACK))
    if mask is not None:
        partial *= mask
    ids = np.flatnonzero(partial + left_out * (1 + _SLACK) >= theta)
    # Narrow the candidates term by term (largest bound first): a left-out term's actual
    # contribution replaces its bound in each candidate's ceiling, and a candidate whose ceiling
    # falls under theta is dropped. At 100k chunks ~4k candidates become a few hundred before the
    # canonical sums (``scores_at``, one binary search per postings term), which cost the most.
    floor = partial[ids]
    rest = dense[:cut]
    while rest and len(ids) > k:
        term = rest.pop()
        floor += term.at(ids)
        ceiling = floor + sum(t.bound for t in rest) * (1 + _SLACK)
        keep = ceiling * (1 + _SLACK) >= theta
        ids, floor = ids[keep], floor[keep]
    scores = scores_at(terms, ids)
    keep = scores > 0
    return top_k(ids[keep], scores[keep], k)


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
