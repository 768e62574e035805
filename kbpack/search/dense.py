"""Dense scoring of every chunk: an exact scan over the chunk vectors and, in packs that have
them, the piece vectors (``kbpack/index/pieces.py``).

A chunk's dense score is ``(cos(chunk) + w * best) / (1 + w)`` with ``w = PIECE_WEIGHT`` and
``best`` the highest cosine among the chunk's pieces, or the chunk's own cosine when it has
none (a chunk of one piece *is* its piece). Dividing by ``1 + w`` keeps the score a cosine's
scale, so packs with and without pieces score alike. The refusal threshold is still applied
to the chunk's own cosine distance: the threshold was calibrated on it, and a single matching
sentence must not make an off-topic chunk look closer than it is.

Vectors are scanned as stored, float16, block by block (``kbpack/pack/vector_scan.py``): a query
never holds the chunk vectors or the pieces (~4x as many) as a float32 matrix. A server's
batches scan a bfloat16 copy instead where it has one (``Bf16Rows``, within ``kbpack serve
--vector-memory``): other rounded scores and a wider bound, the same top and the same exact
scores, since every score a search returns is re-scored by ``row_dots``, whose result for a
row does not depend on the rows re-scored with it.

A query scans every row once, against the query rounded to float16 (``scan_rounded``): each
score is then within a bound ``error`` of the float32 reference's (``rounding_error``, ~3e-4 for
384 dims). ``DenseScores.top`` re-scores in float32 every row whose rounded score is within
``2 * error`` of the n-th best, which holds every row of the exact top n (proof in ``top``), so
the top n it returns, their order and their scores are the float32 scan's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from kbpack.pack.format import PIECE_WEIGHT as PIECE_WEIGHT
from kbpack.pack.vector_scan import (
    Bf16Rows,
    StoredRows,
    rows_of,
    scan,
    scan_rounded,
    scan_rounded_many,
    sorted_unique,
)


@dataclass(frozen=True)
class PieceIndex:
    """Piece vectors grouped by chunk: ``vectors`` rows are ordered by chunk, and the pieces of
    ``owners[i]`` are rows ``starts[i]:starts[i+1]`` (``starts[-1]`` is the row count)."""

    vectors: np.ndarray | StoredRows  # (n_pieces, dims): a pack's stored rows, or in memory
    owners: np.ndarray  # int64: chunk rows that have pieces, ascending
    starts: np.ndarray  # int64: first piece row of each owner

    @classmethod
    def from_columns(cls, vectors: np.ndarray | StoredRows, chunk: np.ndarray) -> PieceIndex:
        """From ``/pieces/data`` and ``/pieces/chunk`` (ascending chunk rows)."""
        chunk = np.asarray(chunk, dtype=np.int64)
        if chunk.size == 0:
            return cls(vectors, np.zeros(0, np.int64), np.zeros(0, np.int64))
        first = np.flatnonzero(np.r_[True, chunk[1:] != chunk[:-1]])
        return cls(vectors, chunk[first], first)


def chunk_scores(
    chunk_vectors: np.ndarray | StoredRows, q: np.ndarray, pieces: PieceIndex | None
) -> tuple[np.ndarray, np.ndarray]:
    """``(score, cos)`` of every chunk for the unit query vector ``q``: the ranking score and
    the chunk's own cosine (whose ``1 - cos`` is the distance the refusal gate reads)."""
    cos = scan(chunk_vectors, q)
    if pieces is None or pieces.owners.size == 0:
        return cos, cos
    best = cos.copy()
    # reduceat takes the max over each owner's run of consecutive piece rows: one pass
    best[pieces.owners] = np.maximum.reduceat(scan(pieces.vectors, q), pieces.starts)
    return (cos + PIECE_WEIGHT * best) / (1.0 + PIECE_WEIGHT), cos


def rounded_chunk_scores(
    chunk_vectors: np.ndarray | StoredRows, q: np.ndarray, pieces: PieceIndex | None
) -> DenseScores:
    """``chunk_scores`` in one float16 pass over the rows, each score within ``error`` of the
    exact one, with what ``DenseScores`` needs to re-score any chunk exactly."""
    cos, error = scan_rounded(chunk_vectors, q)
    score = cos
    if pieces is not None and pieces.owners.size:
        piece_cos, piece_error = scan_rounded(pieces.vectors, q)
        error = max(error, piece_error)
        best = cos.copy()
        best[pieces.owners] = np.maximum.reduceat(piece_cos, pieces.starts)
        # |blend - exact| <= (e + w e) / (1 + w) = e: the blend keeps the bound
        score = (cos + PIECE_WEIGHT * best) / (1.0 + PIECE_WEIGHT)
    else:
        cos = cos.copy()  # score and cos are patched apart (the same array without pieces)
    return DenseScores(score, cos, error, _rescorer(chunk_vectors, q, pieces))


def rounded_chunk_scores_many(
    chunk_vectors: np.ndarray | StoredRows,
    queries: np.ndarray,
    pieces: PieceIndex | None,
    copies: tuple[Bf16Rows, Bf16Rows | None] | None = None,
) -> list[DenseScores]:
    """``rounded_chunk_scores`` of each row of ``queries`` (B, dims), the same bits, from one
    pass over the rows for the whole batch (``scan_rounded_many``); what a server's batch of
    concurrent queries scans. ``copies``: in-memory bfloat16 copies of the chunk and piece
    vectors (``Bf16Rows``), scanned instead: other bits in the rounded scores (within
    ``Bf16Rows.bound``), the same top and the same exact scores."""
    queries = np.asarray(queries, dtype=np.float32)
    with_pieces = pieces is not None and pieces.owners.size > 0
    if copies is not None:
        cos_all, errors = copies[0].scan_many(queries)
    else:
        cos_all, errors = scan_rounded_many(chunk_vectors, queries)
    if with_pieces:
        assert pieces is not None
        if copies is not None and copies[1] is not None:
            piece_all, piece_errors = copies[1].scan_many(queries)
        else:
            piece_all, piece_errors = scan_rounded_many(pieces.vectors, queries)
    # the blend on the whole (rows, B) matrix at once: the same element-wise operations on the
    # same numbers as one query's (max is exact), so the same bits, without a pass per query
    score_all = cos_all
    if with_pieces:
        assert pieces is not None
        best_all = cos_all.copy()
        best_all[pieces.owners] = np.maximum.reduceat(piece_all, pieces.starts, axis=0)
        score_all = (cos_all + PIECE_WEIGHT * best_all) / (1.0 + PIECE_WEIGHT)
        errors = [max(e, p) for e, p in zip(errors, piece_errors, strict=True)]
    cos_rows = np.ascontiguousarray(cos_all.T)  # (B, rows): each query's scores contiguous
    score_rows = np.ascontiguousarray(score_all.T) if with_pieces else cos_rows.copy()
    return [
        DenseScores(score_rows[j], cos_rows[j], errors[j], _rescorer(chunk_vectors, q, pieces))
        for j, q in enumerate(queries)
    ]


def _rescorer(
    chunk_vectors: np.ndarray | StoredRows, q: np.ndarray, pieces: PieceIndex | None
) -> Rescore:
    def rescore(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return exact_scores(chunk_vectors, q, pieces, ids, rows_of)

    return rescore


Rescore = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]


@dataclass
class DenseScores:
    """(score, cos) of every chunk for one query: exact (float32, as ``chunk_scores``) on the
    rows ``exact`` marks, within ``error`` of it on the others. ``rescore(ids)`` gives the
    exact (score, cos) of chunks ``ids``; ``top`` and ``make_exact`` patch them in."""

    score: np.ndarray
    cos: np.ndarray
    error: float
    rescore: Rescore
    # the rows this pass scored (bool), None: every row. An approximate (IVF) pass scores only
    # the probed chunks and gives the others -inf: not candidates (kbpack/search/ivf.py)
    scored: np.ndarray | None = None
    exact: np.ndarray = field(init=False)
    _unfiltered: dict[int, np.ndarray] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.exact = np.full(self.score.size, self.error == 0.0)

    @classmethod
    def concatenate(cls, parts: list[DenseScores], base: np.ndarray) -> DenseScores:
        """One list of several packs' (a set's): chunk ``i`` of ``parts[j]`` is ``base[j] + i``."""

        def rescore(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            score = np.empty(ids.size, np.float32)
            cos = np.empty(ids.size, np.float32)
            which = np.searchsorted(base, ids, side="right") - 1
            for j, part in enumerate(parts):
                at = np.flatnonzero(which == j)
                if at.size:
                    score[at], cos[at] = part.rescore(ids[at] - base[j])
            return score, cos

        scored = None
        if any(p.scored is not None for p in parts):
            scored = np.concatenate(
                [np.ones(p.score.size, bool) if p.scored is None else p.scored for p in parts]
            )
        out = cls(
            np.concatenate([p.score for p in parts]),
            np.concatenate([p.cos for p in parts]),
            max((p.error for p in parts), default=0.0),
            rescore,
            scored,
        )
        out.exact = np.concatenate([p.exact for p in parts])
        return out

    def make_exact(self, ids: np.ndarray) -> None:
        """Replace the scores of chunks ``ids`` with the exact ones (once per chunk)."""
        ids = sorted_unique(ids)
        todo = ids[~self.exact[ids]]
        if todo.size:
            self.score[todo], self.cos[todo] = self.rescore(todo)
            self.exact[todo] = True

    def top(self, n: int, mask: np.ndarray | None = None) -> np.ndarray:
        """Ids of the ``n`` best chunks (within ``mask``), best first, ties by id: the exact
        scan's, with their exact scores patched in.

        Why it is exact: let ``t`` be the n-th best rounded score. At least n rows have a
        rounded score >= t, so an exact score >= t - error; so the n-th best exact score ``E``
        is >= t - error. A row whose exact score is >= E has a rounded score >= E - error >=
        t - 2 error: it is re-scored. A row left unscored has a rounded score < t - 2 error,
        so an exact score < t - error <= E, and its rounded score < E as well: it cannot enter
        the top n, nor tie with its last row.
        """
        if mask is None and n in self._unfiltered:  # a search asks again: one pass over 1M saved
            return self._unfiltered[n]
        sims = self.score if mask is None else np.where(mask, self.score, -np.inf)
        m = min(n, int(np.isfinite(sims).sum()))
        if m == 0:
            return np.zeros(0, np.int64)
        if m < sims.size:
            nth = -np.partition(-sims, m - 1)[m - 1]
            rows = np.flatnonzero(sims >= nth - 2.0 * self.error)
        else:
            rows = np.flatnonzero(np.isfinite(sims))
        self.make_exact(rows)
        # every row of the top n is among ``rows``, and every row left out scores below it
        order = np.lexsort((rows, -self.score[rows]))[:m]
        if mask is None:
            self._unfiltered[n] = rows[order]
        return rows[order]


def checked_scores(
    chunk_vectors: np.ndarray | StoredRows,
    q: np.ndarray,
    pieces: PieceIndex | None,
    ids: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """``chunk_scores`` of the chunks ``ids`` alone, from vectors read through HDF5's checksum
    (float32, numpy): what a search re-scores its results with (``kbpack/pack/vector_scan.py``)."""
    return exact_scores(chunk_vectors, q, pieces, ids, _checked_rows)


def exact_scores(
    chunk_vectors: np.ndarray | StoredRows,
    q: np.ndarray,
    pieces: PieceIndex | None,
    ids: np.ndarray,
    read: Callable[[np.ndarray | StoredRows, np.ndarray], np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """``chunk_scores`` of the chunks ``ids`` alone (float32, numpy), their rows read by
    ``read(vectors, rows)``."""
    ids = np.asarray(ids, dtype=np.int64)
    q = np.asarray(q, dtype=np.float32)
    cos = row_dots(read(chunk_vectors, ids), q)
    if pieces is None or pieces.owners.size == 0:
        return cos, cos.copy()
    best = cos.copy()
    n_pieces = len(pieces.vectors)
    at = np.searchsorted(pieces.owners, ids)
    has = at < pieces.owners.size
    has[has] = pieces.owners[at[has]] == ids[has]
    if has.any():
        which = at[has]
        starts = pieces.starts[which]
        ends = np.append(pieces.starts, n_pieces)[which + 1]
        # every owner's piece rows, end to end, and the max over each owner's run
        runs = np.repeat(starts - np.r_[0, np.cumsum(ends - starts)[:-1]], ends - starts)
        rows = np.arange(runs.size) + runs
        piece_cos = row_dots(read(pieces.vectors, rows), q)
        best[has] = np.maximum.reduceat(piece_cos, np.r_[0, np.cumsum(ends - starts)[:-1]])
    return (cos + PIECE_WEIGHT * best) / (1.0 + PIECE_WEIGHT), cos


def row_dots(rows: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Float32 ``rows @ q``, each row's dot product the same bits whichever rows are read with
    it: a product and numpy's pairwise sum along the row. (BLAS's ``rows @ q`` is not: its
    kernel takes rows four at a time and the rest another way, so a row re-scored among 7
    others and among 100 could differ in the last place, and two scans of a query that picked
    different rows to re-score would show different scores for one chunk.)"""
    return np.multiply(rows, q).sum(axis=1, dtype=np.float32)


def _checked_rows(vectors: np.ndarray | StoredRows, ids: np.ndarray) -> np.ndarray:
    if isinstance(vectors, StoredRows):
        return vectors.checked_rows(ids)
    return np.asarray(vectors[ids], dtype=np.float32)
