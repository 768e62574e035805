"""Dense scoring of every chunk: an exact scan over the chunk vectors and, in packs that have
them, the piece vectors (``kbpack/pieces.py``).

A chunk's dense score is ``(cos(chunk) + w * best) / (1 + w)`` with ``w = PIECE_WEIGHT`` and
``best`` the highest cosine among the chunk's pieces, or the chunk's own cosine when it has
none (a chunk of one piece *is* its piece). Dividing by ``1 + w`` keeps the score a cosine's
scale, so packs with and without pieces score alike. The refusal threshold is still applied
to the chunk's own cosine distance: the threshold was calibrated on it, and a single matching
sentence must not make an off-topic chunk look closer than it is.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kbpack.pieces import PIECE_WEIGHT


@dataclass(frozen=True)
class PieceIndex:
    """Piece vectors grouped by chunk: ``vectors`` rows are ordered by chunk, and the pieces of
    ``owners[i]`` are rows ``starts[i]:starts[i+1]`` (``starts[-1]`` is the row count)."""

    vectors: np.ndarray  # float32 (n_pieces, dims)
    owners: np.ndarray  # int64: chunk rows that have pieces, ascending
    starts: np.ndarray  # int64: first piece row of each owner

    @classmethod
    def from_columns(cls, vectors: np.ndarray, chunk: np.ndarray) -> PieceIndex:
        """From ``/pieces/data`` (as float32) and ``/pieces/chunk`` (ascending chunk rows)."""
        chunk = np.asarray(chunk, dtype=np.int64)
        if chunk.size == 0:
            return cls(vectors, np.zeros(0, np.int64), np.zeros(0, np.int64))
        first = np.flatnonzero(np.r_[True, chunk[1:] != chunk[:-1]])
        return cls(vectors, chunk[first], first)


def chunk_scores(
    chunk_vectors: np.ndarray, q: np.ndarray, pieces: PieceIndex | None
) -> tuple[np.ndarray, np.ndarray]:
    """``(score, cos)`` of every chunk for the unit query vector ``q``: the ranking score and
    the chunk's own cosine (whose ``1 - cos`` is the distance the refusal gate reads)."""
    cos = chunk_vectors @ q
    if pieces is None or pieces.owners.size == 0:
        return cos, cos
    best = cos.copy()
    # reduceat takes the max over each owner's run of consecutive piece rows: one pass
    best[pieces.owners] = np.maximum.reduceat(pieces.vectors @ q, pieces.starts)
    return (cos + PIECE_WEIGHT * best) / (1.0 + PIECE_WEIGHT), cos
