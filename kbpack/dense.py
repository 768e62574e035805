"""Dense scoring of every chunk: an exact scan over the chunk vectors and, in packs that have
them, the piece vectors (``kbpack/pieces.py``).

A chunk's dense score is ``(cos(chunk) + w * best) / (1 + w)`` with ``w = PIECE_WEIGHT`` and
``best`` the highest cosine among the chunk's pieces, or the chunk's own cosine when it has
none (a chunk of one piece *is* its piece). Dividing by ``1 + w`` keeps the score a cosine's
scale, so packs with and without pieces score alike. The refusal threshold is still applied
to the chunk's own cosine distance: the threshold was calibrated on it, and a single matching
sentence must not make an off-topic chunk look closer than it is.

Vectors are scanned as stored, float16, block by block (``kbpack/vector_scan.py``): neither the
chunk vectors nor the pieces (~4x as many) are ever held as a float32 matrix.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kbpack.vector_scan import StoredRows, scan

PIECE_WEIGHT = 0.5  # score = (cos(chunk) + PIECE_WEIGHT * max cos(pieces)) / (1 + PIECE_WEIGHT)


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


def checked_scores(
    chunk_vectors: np.ndarray | StoredRows,
    q: np.ndarray,
    pieces: PieceIndex | None,
    ids: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """``chunk_scores`` of the chunks ``ids`` alone, from vectors read through HDF5's checksum
    (float32, numpy): what a search re-scores its results with (``kbpack/vector_scan.py``)."""
    ids = np.asarray(ids, dtype=np.int64)
    q = np.asarray(q, dtype=np.float32)
    cos = _rows(chunk_vectors, ids) @ q
    if pieces is None or pieces.owners.size == 0:
        return cos, cos
    best = cos.copy()
    n_pieces = len(pieces.vectors)
    at = np.searchsorted(pieces.owners, ids)
    for i, (c, j) in enumerate(zip(ids, at, strict=True)):
        if j < pieces.owners.size and pieces.owners[j] == c:
            end = pieces.starts[j + 1] if j + 1 < pieces.starts.size else n_pieces
            rows = np.arange(pieces.starts[j], end)
            best[i] = float(np.max(_rows(pieces.vectors, rows) @ q))
    return (cos + PIECE_WEIGHT * best) / (1.0 + PIECE_WEIGHT), cos


def _rows(vectors: np.ndarray | StoredRows, ids: np.ndarray) -> np.ndarray:
    if isinstance(vectors, StoredRows):
        return vectors.checked_rows(ids)
    return np.asarray(vectors[ids], dtype=np.float32)
