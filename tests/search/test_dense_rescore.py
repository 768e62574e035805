"""The exact re-score of a search's candidates (``kbpack.search.dense.row_dots``): a chunk's
score is the same bits whichever other chunks are re-scored with it, which is what lets a scan
of another kernel (a server's float32 batches) return the very scores of ``kbpack query``."""

from __future__ import annotations

import numpy as np

from kbpack.search.dense import row_dots


def test_a_row_s_dot_product_does_not_depend_on_the_rows_read_with_it() -> None:
    rng = np.random.default_rng(0)
    rows = rng.standard_normal((5000, 384)).astype(np.float16).astype(np.float32)
    q = rng.standard_normal(384).astype(np.float32)
    full = row_dots(rows, q)
    for m in (1, 2, 3, 5, 7, 13, 100, 257, 1001):
        ids = rng.choice(rows.shape[0], m, replace=False)
        assert row_dots(rows[ids], q).tobytes() == full[ids].tobytes(), m
    # (what it replaced, BLAS's ``rows @ q``, gave 12 of these rows other bits with OpenBLAS
    # 0.3.31 on the development machine: its kernel takes rows four at a time)
    np.testing.assert_allclose(full, rows @ q, rtol=0, atol=1e-4)
