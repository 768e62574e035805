"""One pack's dense side as a search reads it: its chunk vectors (and piece vectors) scanned for
one query vector or for a batch of them, and the re-score through HDF5's checksum.

``PackVectors.scores`` is the dense stage of a single pack: every chunk's ``DenseScores`` for
one unit query vector. ``scores_many`` gives, for a batch of query vectors, the very
``DenseScores`` that ``scores`` gives for each (one pass over the rows for all of them).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from kbpack.pack import format as F
from kbpack.pack.read import DamagedDataError, PackReader
from kbpack.search.dense import (
    DenseScores,
    PieceIndex,
    checked_scores,
    rounded_chunk_scores,
    rounded_chunk_scores_many,
)


class PackVectors:
    """The chunk and piece vectors of one open pack."""

    def __init__(self, reader: PackReader) -> None:
        self.r = reader
        self._piece_index: PieceIndex | None = None
        self._lock = threading.Lock()

    def pieces(self) -> PieceIndex | None:
        """The pack's piece vectors grouped by chunk, loaded once; None in a pack without
        (bench/pieces.py overrides this for its paired comparison)."""
        if self._piece_index is None and self.r.has_pieces:
            with self._lock:
                if self._piece_index is None:
                    self._piece_index = PieceIndex.from_columns(
                        self.r.stored_rows(F.PIECE_DATA), self.r.column(F.PIECE_CHUNK)
                    )
        return self._piece_index

    def stored(self, dims: int) -> Any:
        """``/vectors/data`` as stored, its rows ``dims`` wide (the query vector's), and the
        pieces' as wide as the chunks'. The width is in the dataset's dataspace, in the object
        header, where no checksum reaches: one flipped bit made it 385 and the scan raised
        "Vector dimensions don't match" (a header bit-flip sweep of the golden pack)."""
        stored = self.r.stored_rows(F.VEC_DATA)
        width = stored.shape[1] if len(stored.shape) == 2 else -1
        if width != dims:
            raise DamagedDataError(
                self.r.where, F.VEC_DATA, f"rows of {width} numbers, the query model embeds {dims}"
            )
        if self.r.has_pieces and self.pieces() is not None:
            pieces = self.r.stored_rows(F.PIECE_DATA)
            if len(pieces.shape) != 2 or pieces.shape[1] != width:
                raise DamagedDataError(
                    self.r.where, F.PIECE_DATA, f"rows not {width} numbers wide, as the chunks' are"
                )
        return stored

    def scores(self, q: np.ndarray) -> DenseScores:
        """(dense score, cosine) of the unit query vector ``q`` for every chunk, from one
        float16 pass over the vectors (exact where ``DenseScores`` says)."""
        return self._finite(rounded_chunk_scores(self.stored(q.shape[-1]), q, self.pieces()))

    def scores_many(self, queries: np.ndarray) -> list[DenseScores]:
        """``scores`` of each row of ``queries`` (B, dims), the same bits, one pass for all."""
        stored = self.stored(queries.shape[-1])
        parts = rounded_chunk_scores_many(stored, queries, self.pieces())
        return [self._finite(d) for d in parts]

    def checked(self, q: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``scores`` of the chunks ``ids`` from vectors read through HDF5's checksum."""
        return checked_scores(self.stored(q.shape[-1]), q, self.pieces(), ids)

    def _finite(self, d: DenseScores) -> DenseScores:
        """A NaN or infinite component (a pack whose digests were rewritten to match: only
        verify's invariants would say so) must be one line, not a fusion ValueError."""
        for element, values in ((F.VEC_DATA, d.cos), (F.PIECE_DATA, d.score)):
            if np.isfinite(values).all():  # (no index array to build: the usual case)
                continue
            bad = np.flatnonzero(~np.isfinite(values))
            raise DamagedDataError(
                self.r.where,
                element,
                f"the vectors of chunk {int(bad[0])} are not finite (NaN or infinity)",
            )
        return d
