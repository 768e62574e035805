"""Verify step 5, **BM25 dense rows** (spec §3.7.1): the common terms' rows of contributions a
query reads instead of their postings, against those postings. Part of the BM25 check
(``bm25.py``), which calls it once the postings themselves hold."""

from __future__ import annotations

import numpy as np

from kbpack.pack import format as F
from kbpack.pack.bm25_store import dense_rows
from kbpack.verify.exam_state import ExamState
from kbpack.verify.report import HEADER


class DenseRowInvariants(ExamState):
    """Step 5 on ``/bm25/dense_terms`` and ``/bm25/dense_tf``."""

    def _check_dense(
        self, indptr: np.ndarray, chunk: np.ndarray, tf: np.ndarray, n_chunks: int
    ) -> None:
        """Spec §3.7.1: ``/bm25/dense_terms`` holds exactly the terms of the rule and each row
        of ``/bm25/dense_tf`` equals that term's postings (a query reads them instead of the
        postings, so a wrong row would rank silently), counted in the manifest."""
        held = [p for p in (F.BM25_DENSE_TERMS, F.BM25_DENSE_TF) if p in self.readable]
        for path in (F.BM25_DENSE_TERMS, F.BM25_DENSE_TF):
            key = path.rsplit("/", 1)[1]
            if (path in held) != (key in self.counts):
                what = "is present, uncounted" if path in held else "is counted, absent"
                self.add("count-mismatch", f"{HEADER}/counts/{key}", f"{path} {what}")
        if len(held) == 1:
            self.add("bm25-dense", held[0], "dense_terms and dense_tf come together")
        rows, dense = self._col(F.BM25_DENSE_TERMS), self._col(F.BM25_DENSE_TF)
        if len(held) < 2 or rows is None or dense is None:
            return
        want_rows, want = dense_rows(indptr, chunk, tf, n_chunks)
        if rows.tolist() != want_rows.tolist():
            extra = sorted(set(rows.tolist()) ^ set(want_rows.tolist()))[:1]
            self.add(
                "bm25-dense",
                F.BM25_DENSE_TERMS,
                f"{len(rows)} terms, the rule picks {len(want_rows)}"
                + (f" (term row {extra[0]} differs)" if extra else " (order differs)"),
            )
            return
        if dense.shape != want.shape:
            self.add("bm25-dense", F.BM25_DENSE_TF, f"{dense.size} values, need {want.size}")
            return
        bad = np.flatnonzero(dense != want)
        if bad.size:
            j, c = divmod(int(bad[0]), max(1, n_chunks))
            self.add(
                "bm25-dense",
                F.BM25_DENSE_TF,
                f"term row {int(rows[j])}, chunk {c}: tf {int(dense[bad[0]])}, its postings say "
                f"{int(want[bad[0]])}" + (f" (and {bad.size - 1} more)" if bad.size > 1 else ""),
            )
        self.stats["bm25_dense_terms"] = len(rows)
