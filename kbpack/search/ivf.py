"""Approximate dense search through a pack's IVF index (``/ivf``, spec/FORMAT.md §3.13).

A query scores the index's centroids, takes the ``probe`` lists of highest cosine (ties to the
lower list), and scores the chunks of those lists from the stored float16 vectors exactly as
the exact path scores every chunk: one float16 pass (simsimd) over the gathered rows, then the
rows near the top re-scored in float32 (``DenseScores.top``), so the top k of the probed chunks
is exact, scores included. Chunks outside the probed lists get no score (-inf): they are not
candidates. With pieces, the probed chunks' scores blend in
their pieces' as on the exact path; the lists are chosen by the chunk vectors alone.

Probing every list scores every chunk: the top k is then the exact one (tests/search/test_ivf.py).

The functions here are pure (arrays in, arrays out); ``kbpack.search.searcher`` calls
``ivf_dense_scores`` from one marked hook where the dense stage picks its candidates.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kbpack.pack.format import PIECE_WEIGHT
from kbpack.pack.ivf import IvfIndex, default_probe
from kbpack.pack.vector_scan import StoredRows, rows_of, scan_matrix, scan_matrix_bounded
from kbpack.search.dense import DenseScores, PieceIndex, exact_scores

SCORE_ROWS = 16384  # candidates scored per block: 16k float32 rows (24 MiB at 384 dims)


@dataclass(frozen=True)
class Probed:
    """One query's candidates: the probed lists and their chunk rows (ascending)."""

    lists: np.ndarray
    chunks: np.ndarray


def nearest_lists(centroids: np.ndarray, q: np.ndarray, probe: int) -> np.ndarray:
    """The ``probe`` lists whose centroids have the highest ``centroid . q``, best first, ties
    to the lower list. ``centroids`` (lists, dims) as stored, float16: scanned by the exact
    scan's kernel (a numpy matrix-vector product here woke OpenBLAS's threads, whose spinning
    cost more CPU than the whole probe at 1,000+ lists)."""
    scores = scan_matrix(centroids, q)
    m = max(1, min(int(probe), scores.size))
    if m < scores.size:
        part = np.argpartition(-scores, m - 1)[:m]
        nth = scores[part].min()
        part = np.flatnonzero(scores >= nth)  # every list tied with the last one, then cut
    else:
        part = np.arange(scores.size)
    order = np.lexsort((part, -scores[part]))[:m]
    return part[order]


def probe(index: IvfIndex, centroids: np.ndarray, q: np.ndarray, probe: int | None) -> Probed:
    """The candidates of the unit query ``q``: the chunks of the ``probe`` nearest lists
    (None: ``default_probe``). ``centroids``: ``index.centroids`` (in memory)."""
    lists = nearest_lists(centroids, q, default_probe(index.lists) if probe is None else probe)
    return Probed(lists, np.sort(index.probe_chunks(lists)))


def _rows16(vectors: np.ndarray | StoredRows, ids: np.ndarray) -> np.ndarray:
    """The stored rows of ``ids`` (float16 where stored so), as the scan reads them."""
    if isinstance(vectors, StoredRows):
        return vectors.rows16(ids)
    return np.take(vectors, ids, axis=0)  # (take: ~20% less than fancy indexing)


def rounded_scores(
    vectors: np.ndarray | StoredRows,
    q: np.ndarray,
    pieces: PieceIndex | None,
    ids: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, float]:
    """(score, cos, error) of chunks ``ids`` (ascending): the exact path's one float16 pass
    (``rounded_chunk_scores``) over the gathered rows alone, each within ``error`` of the
    float32 reference; in blocks of ``SCORE_ROWS`` rows (a 10M-chunk pack's probed rows
    would be ~140 MB at once)."""
    cos = np.empty(ids.size, np.float32)
    error = 0.0
    for at in range(0, ids.size, SCORE_ROWS):
        part = ids[at : at + SCORE_ROWS]
        cos[at : at + part.size], err = scan_matrix_bounded(_rows16(vectors, part), q, rounded=True)
        error = max(error, err)
    if pieces is None or pieces.owners.size == 0 or ids.size == 0:
        return cos, cos.copy(), error
    where = np.searchsorted(pieces.owners, ids)
    has = where < pieces.owners.size
    has[has] = pieces.owners[where[has]] == ids[has]
    best = cos.copy()
    if has.any():
        which = where[has]
        starts = pieces.starts[which]
        ends = np.append(pieces.starts, len(pieces.vectors))[which + 1]
        firsts = np.r_[0, np.cumsum(ends - starts)[:-1]]
        runs = np.repeat(starts - firsts, ends - starts)
        rows = np.arange(runs.size) + runs
        piece_cos = np.empty(rows.size, np.float32)
        for lo in range(0, rows.size, SCORE_ROWS):
            part = rows[lo : lo + SCORE_ROWS]
            piece_cos[lo : lo + part.size], err = scan_matrix_bounded(
                _rows16(pieces.vectors, part), q, rounded=True
            )
            error = max(error, err)
        best[has] = np.maximum.reduceat(piece_cos, firsts)
    # |blend - exact| <= (e + w e) / (1 + w) = e, as on the exact path
    return (cos + PIECE_WEIGHT * best) / (1.0 + PIECE_WEIGHT), cos, error


def top_k(
    vectors: np.ndarray | StoredRows,
    index: IvfIndex,
    centroids: np.ndarray,
    q: np.ndarray,
    k: int,
    probe_lists: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(chunk ids, cosines) of the ``k`` best probed chunks, best first, ties by id, scores
    exact (float32): the pure function behind the approximate search (bench/ivf.py)."""
    ids = probe(index, centroids, q, probe_lists).chunks
    _, cos, error = rounded_scores(vectors, q, None, ids)

    def rescore(local: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return exact_scores(vectors, q, None, ids[local], rows_of)

    d = DenseScores(cos, cos.copy(), error, rescore)
    local = d.top(k)  # ids ascend, so ties by local row are ties by chunk id
    return ids[local], d.cos[local]


def ivf_dense_scores(
    vectors: np.ndarray | StoredRows,
    index: IvfIndex,
    centroids: np.ndarray,
    q: np.ndarray,
    pieces: PieceIndex | None,
    probe_lists: int | None = None,
) -> DenseScores:
    """``DenseScores`` for the searcher: the probed chunks scored as the exact path scores
    every chunk (within ``error``; ``top`` re-scores the near ones exactly), -inf (not a
    candidate) elsewhere; ``rescore`` still scores any chunk exactly (a BM25 candidate of a
    hybrid query outside the probed lists gets its true dense score)."""
    n = len(vectors)
    ids = probe(index, centroids, q, probe_lists).chunks
    score = np.full(n, -np.inf, np.float32)
    cos = np.full(n, -np.inf, np.float32)
    score[ids], cos[ids], error = rounded_scores(vectors, q, pieces, ids)

    def rescore(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return exact_scores(vectors, q, pieces, rows, rows_of)

    scored_rows = np.zeros(n, bool)
    scored_rows[ids] = True
    return DenseScores(score, cos, error, rescore, scored_rows)
