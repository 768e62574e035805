"""One pack's dense side as a search reads it: its chunk vectors (and piece vectors) scanned for
one query vector or for a batch of them, and the re-score through HDF5's checksum.

``PackVectors.scores`` is the dense stage of a single pack: every chunk's ``DenseScores`` for
one unit query vector. ``scores_many`` gives, for a batch of query vectors, the very
``DenseScores`` that ``scores`` gives for each (one pass over the rows for all of them).
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import numpy as np

from kbpack.errors import UsageError
from kbpack.pack import format as F
from kbpack.pack.read import DamagedDataError, PackReader
from kbpack.pack.vector_scan import Bf16Rows
from kbpack.search.dense import (
    DenseScores,
    PieceIndex,
    checked_scores,
    rounded_chunk_scores,
    rounded_chunk_scores_many,
)
from kbpack.search.ivf import ProbedScores, ivf_dense_scores


class CopyBudget:
    """How many bytes of in-memory vector copies (``Bf16Rows``) a server's packs may hold
    together: each pack takes its share on its first batch and gives it back when dropped."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._lock = threading.Lock()

    def take(self, n: int) -> bool:
        with self._lock:
            if self.used + n > self.limit:
                return False
            self.used += n
            return True

    def give(self, n: int) -> None:
        with self._lock:
            self.used -= n


class PackVectors:
    """The chunk and piece vectors of one open pack."""

    def __init__(self, reader: PackReader) -> None:
        self.r = reader
        self._piece_index: PieceIndex | None = None
        self._lock = threading.Lock()
        # True: every vector is scanned even where the pack has an approximate index
        # (``kbpack query --exact``); ``probe``: the index's lists a query reads (None: the
        # pack's default). A pack without ``/ivf`` is always scanned whole.
        self.exact = False
        self.probe: int | None = None
        self._centroids: np.ndarray | None = None
        # a server's budget for the bfloat16 copies its batches scan (None: never copy)
        self.copy_budget: CopyBudget | None = None
        self._copies: tuple[Bf16Rows, Bf16Rows | None] | bool | None = None
        self._copies_lock = threading.Lock()
        self.copies_wait = False

    def use_ivf(self, exact: bool, probe: int | None) -> None:
        if probe is not None and probe < 1:
            raise UsageError(f"--probe {probe}: give a number of lists of at least 1")
        self.exact, self.probe = exact, probe

    def prepare(self) -> None:
        """Read what every dense query reads: the vectors' chunk index, the pieces, the IVF
        index (read and checked once; None without)."""
        self.r.stored_rows(F.VEC_DATA)  # maps the file, reads the chunk index
        self.pieces()
        if not self.exact:
            self.r.ivf_index()

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
        stored = self.stored(q.shape[-1])
        # the dense stage picks its candidates here: a pack with an approximate index (/ivf,
        # issue 35 item 4) scores the probed lists' chunks only (-inf elsewhere: not candidates)
        # unless exact search was asked for; kbpack/search/ivf.py
        index = None if self.exact else self.r.ivf_index()
        if index is not None:
            if self._centroids is None:
                self._centroids = np.ascontiguousarray(index.centroids)
            probe = self.probe or int(self.r.attrs(F.IVF).get(F.IVF_PROBE_ATTR, 0)) or None
            return self._finite(
                ivf_dense_scores(stored, index, self._centroids, q, self.pieces(), probe)
            )
        copies = self.copies(stored)  # a server's (a batch of one query alone scans them too)
        if copies is not None:
            return self._finite(
                rounded_chunk_scores_many(stored, q[None], self.pieces(), copies)[0]
            )
        return self._finite(rounded_chunk_scores(stored, q, self.pieces()))

    def scores_many(self, queries: np.ndarray) -> list[DenseScores]:
        """``scores`` of each row of ``queries`` (B, dims), the same bits, one pass for all
        (through an approximate index: one probe per query)."""
        if not self.exact and self.r.ivf_index() is not None:
            return [self.scores(q) for q in queries]
        stored = self.stored(queries.shape[-1])
        parts = rounded_chunk_scores_many(stored, queries, self.pieces(), self.copies(stored))
        return [self._finite(d) for d in parts]

    def make_copies(self) -> bool:
        """Make the bfloat16 copies now, waiting for them (a bench, or a caller that would
        rather pay at start than on the first batch); whether they were made."""
        if self.copy_budget is None or not self.r.has_vectors:
            return False
        self.copies_wait = True
        stored = self.r.stored_rows(F.VEC_DATA)
        return self.copies(self.stored(stored.shape[1])) is not None

    def copies(self, stored: Any) -> tuple[Bf16Rows, Bf16Rows | None] | None:
        """Bfloat16 copies of the chunk and piece vectors when the budget has room for both (2
        bytes per number), else None: batches scan the stored float16 rows
        (``scan_rounded_many``). The first batch starts the copy in a thread (~1 s at 100k
        chunks with pieces) and batches scan float16 until it is done, so no request waits
        for it; ``copies_wait``: the first batch waits instead (tests). A pack with a vector
        that is not finite gets no copy (its float16 scan says which)."""
        if self.copy_budget is None:
            return None
        with self._copies_lock:
            start = self._copies is None
            if start:
                pieces = self.pieces()
                piece_rows = pieces.vectors if pieces is not None and pieces.owners.size else None
                need = Bf16Rows.nbytes(stored)
                if piece_rows is not None:
                    need += Bf16Rows.nbytes(piece_rows)
                budget = self.copy_budget
                self._copies = budget.take(need)  # True: being made; False: no room
                if self._copies:
                    give_back = weakref.finalize(self, budget.give, need)
        if start and self._copies:

            def make() -> None:
                chunks = Bf16Rows.of(stored)
                piece_copy = None if piece_rows is None else Bf16Rows.of(piece_rows)
                made = chunks is not None and (piece_rows is None or piece_copy is not None)
                if not made:
                    give_back()  # (once: a finalizer runs at most once)
                with self._copies_lock:
                    self._copies = (chunks, piece_copy) if made else False  # type: ignore[assignment]

            if self.copies_wait:
                make()
            else:
                threading.Thread(target=make, daemon=True, name="kbpack-copies").start()
        got = self._copies
        return got if isinstance(got, tuple) else None

    def checked(self, q: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``scores`` of the chunks ``ids`` from vectors read through HDF5's checksum."""
        return checked_scores(self.stored(q.shape[-1]), q, self.pieces(), ids)

    def _finite(self, d: DenseScores) -> DenseScores:
        """A NaN or infinite component (a pack whose digests were rewritten to match: only
        verify's invariants would say so) must be one line, not a fusion ValueError."""
        for element, values in ((F.VEC_DATA, d.cos), (F.PIECE_DATA, d.score)):
            rows = None
            if isinstance(d, ProbedScores):  # an approximate pass scored these rows only
                rows = d.probed
                values = values[rows]
            elif d.scored is not None:
                values = np.where(d.scored, values, 0.0)
            if np.isfinite(values).all():  # (no index array to build: the usual case)
                continue
            bad = np.flatnonzero(~np.isfinite(values))
            bad = bad if rows is None else rows[bad]
            raise DamagedDataError(
                self.r.where,
                element,
                f"the vectors of chunk {int(bad[0])} are not finite (NaN or infinity)",
            )
        return d
