"""Verify step 5, **pieces** (spec/FORMAT.md §3.9): only in dense packs; the count in the
manifest exactly when the group is there; every piece inside its chunk, in (chunk, from) order,
not overlapping, trimmed; no chunk with a single piece; one finite unit vector per piece of the
model's dims (norms measured during the digest pass, as for ``/vectors``)."""

from __future__ import annotations

import numpy as np

from kbpack.pack import format as F
from kbpack.verify.digests import NORM_TOLERANCE
from kbpack.verify.exam_state import ExamState


class PieceInvariants(ExamState):
    """Step 5 on ``/pieces``."""

    def _check_pieces(self) -> None:
        if not self._optional_group(F.PIECES, "pieces", "pieces"):
            return
        if self.attrs.get("/", {}).get(F.R_VECTORS) != "dense":
            self.add("pieces-unexpected", F.PIECES, "pieces need vectors; the root says none")
        cols = self._same_length(F.PIECES, [F.PIECE_CHUNK, F.PIECE_FROM, F.PIECE_TO])
        if cols is None:
            return
        chunk, start, end = (c.astype(np.int64) for c in cols)
        n = len(chunk)
        self.stats["pieces"] = n
        rows, dims = self.stats.get("piece_rows", -1), self.stats.get("piece_dims", -1)
        if F.PIECE_DATA in self.readable and rows != n:
            self.add("piece-count", F.PIECE_DATA, f"{rows} vectors for {n} pieces")
        want_dims = self.attrs.get(F.MODEL, {}).get(F.M_DIMS)
        if F.PIECE_DATA in self.readable and isinstance(want_dims, int) and dims != want_dims:
            self.add(
                "dims-mismatch", F.PIECE_DATA, f"{dims} dims, the model stamp says {want_dims}"
            )
        for kind, what in (
            ("nonfinite", "NaN or infinite component"),
            ("norm", f"norm differs from 1 by more than {NORM_TOLERANCE}"),
        ):
            if self.piece_counts[kind]:
                count, shown = self.piece_counts[kind], self.piece_bad[kind]
                more = f" (and {count - len(shown)} more)" if count > len(shown) else ""
                rows_ = ", ".join(str(r) for r in shown)
                code = "vector-not-finite" if kind == "nonfinite" else "vector-norm"
                self.add(code, F.PIECE_DATA, f"{what}: rows {rows_}{more}")
        self._check_piece_offsets(chunk, start, end)

    def _check_piece_offsets(self, chunk: np.ndarray, start: np.ndarray, end: np.ndarray) -> None:
        c_cols = self._same_length(F.CHUNKS, [F.CHUNK_DOCUMENT, F.CHUNK_FROM, F.CHUNK_TO])
        if c_cols is None:
            return
        c_doc, c_from, c_to = (c.astype(np.int64) for c in c_cols)
        m = len(c_doc)
        out = (chunk < 0) | (chunk >= m)
        if self._rows("piece-chunk", F.PIECE_CHUNK, out, lambda i: f"chunk {chunk[i]} of {m}"):
            return
        inside = (c_from[chunk] <= start) & (start < end) & (end <= c_to[chunk])
        self._rows(
            "piece-outside-chunk",
            F.PIECE_FROM,
            ~inside,
            lambda i: (
                f"[{start[i]}, {end[i]}) is not inside chunk {chunk[i]} "
                f"[{c_from[chunk[i]]}, {c_to[chunk[i]]})"
            ),
        )
        if len(chunk) > 1:
            same = chunk[1:] == chunk[:-1]
            order = (chunk[1:] < chunk[:-1]) | (same & (start[1:] < end[:-1]))
            self._rows(
                "piece-order",
                F.PIECE_FROM,
                np.r_[False, order],
                lambda i: (
                    f"piece of chunk {chunk[i]} at {start[i]} is before or overlaps the row "
                    f"above (chunk {chunk[i - 1]}, ends {end[i - 1]})"
                ),
            )
        owners, per_chunk = np.unique(chunk, return_counts=True)
        single = np.isin(chunk, owners[per_chunk == 1])
        self._rows(
            "piece-single",
            F.PIECE_CHUNK,
            single,
            lambda i: f"chunk {chunk[i]} has one piece (a chunk has none or at least two)",
        )
        ok = np.flatnonzero(inside)
        if ok.size:

            def untrimmed(i: int) -> bool:
                text = self._text(int(c_doc[chunk[i]]))
                if text is None or end[i] > len(text):
                    return False
                piece = text[start[i] : end[i]]
                return piece != piece.strip()

            mask = np.zeros(len(chunk), dtype=bool)
            mask[ok] = [untrimmed(int(i)) for i in ok]
            self._rows(
                "piece-whitespace",
                F.PIECE_FROM,
                mask,
                lambda i: f"[{start[i]}, {end[i]}) starts or ends with whitespace",
            )
