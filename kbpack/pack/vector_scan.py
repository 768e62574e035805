"""The exact dense scan over float16 vectors where they are stored: no float32 copy of the matrix.

Why: converting every stored float16 vector to float32 before the first dense query cost 1-2.6 s
at 1M chunks (1.5 GB of float32), and every CLI query is a first query; with sentence pieces
(~4x the vectors) it cost four times that in time and memory (bench/RESULTS.md, "Dense scan").

How:

* **Where the rows are read.** ``/vectors/data`` and ``/pieces/data`` are stored uncompressed
  (spec/FORMAT.md §1.1): each HDF5 chunk on disk is its rows, as little-endian float16, followed
  by the 4-byte Fletcher-32 checksum. ``StoredRows`` maps the file read-only and scans every
  chunk's rows in place, in the page cache: nothing is copied or converted. A dataset stored any
  other way (another filter, big-endian, a chunk missing, a file that cannot be mapped) is read
  through HDF5 in blocks of a few MiB instead: checked, slower, the same scores.
* **The kernel.** simsimd's float16 dot product converts with F16C and accumulates in float32
  (its AVX-512 FP16 kernel, which accumulates in float16 and errs by ~2e-4, is switched off: a
  cosine that much off reorders near ties against the float32 reference). A query scans every
  row once against the query rounded to float16 (``rounded``): one conversion of each row, ~45
  ns a row here, each score within ``rounding_error(q)`` (~3e-4 at 384 dims) of the float32
  matmul; ``kbpack/search/dense.py`` re-scores the rows near the top exactly, so the top it returns
  is the exact one. The exact scan (``rounded=False``, the reference path) splits the query
  into a float16 ``hi`` and the float16 ``lo`` of what ``hi`` missed, and a row's score is
  ``row . hi + row . lo``, within ~1e-7 of the float32 matmul, at two conversions a row.
  Without simsimd, numpy converts one block at a time and multiplies (exact, a few times
  slower, never the whole matrix).
* **Checksums.** Reading mapped bytes skips the Fletcher-32 check that HDF5 applies on every
  read. ``checked_rows`` re-reads rows through HDF5 (checked); the searcher re-scores every
  chunk it returns that way and refuses a pack whose mapped and checked rows disagree
  (``kbpack.search.searcher``), so no score a query shows comes from unchecked bytes. Damage in a row that
  no query returns can change a ranking unnoticed until ``kbpack verify`` (spec §1.2).
"""

from __future__ import annotations

import contextlib
import mmap
from collections.abc import Callable
from typing import Any

import numpy as np

from kbpack.pack.mapped import map_chunks

FLOAT16 = np.dtype("<f2")
BLOCK_BYTES = 4 << 20  # the HDF5 path reads this much per call: big enough to amortise the call,
#   small enough to stay in cache while it is scanned
# how far from 1 a stored vector's norm may be: verify's NORM_TOLERANCE (kbpack/verify/digests.py,
# not imported here: a query does not load verify; tests/pack/test_vector_scan.py checks they agree)
NORM_TOLERANCE = 1e-2


def _load_simsimd() -> Any | None:
    try:
        import simsimd
    except ImportError:  # a platform without its wheel: numpy scans the same rows
        return None
    # the FP16 kernel accumulates in float16 (errors ~2e-4); the F16C one in float32
    simsimd.disable_capability("sapphire")
    return simsimd


_SIMSIMD: Any | None = None
_SIMSIMD_LOADED = False


def simsimd_module() -> Any | None:
    """simsimd, imported on the first scan (it is not needed to open a pack), or None."""
    global _SIMSIMD, _SIMSIMD_LOADED
    if not _SIMSIMD_LOADED:
        _SIMSIMD, _SIMSIMD_LOADED = _load_simsimd(), True
    return _SIMSIMD


Kernel = Callable[[np.ndarray, np.ndarray], np.ndarray]


def split_query(q: np.ndarray) -> np.ndarray:
    """``(2, dims)`` float16: ``hi`` (the query rounded) and ``lo`` (the rounding error)."""
    q = np.asarray(q, dtype=np.float32)
    hi = q.astype(np.float16)
    lo = (q - hi.astype(np.float32)).astype(np.float16)
    return np.stack([hi, lo])


def rounding_error(q: np.ndarray) -> float:
    """A bound on ``|row . q - row . hi|`` as computed, for every row of norm <= 1 + tolerance,
    where ``hi`` is ``q`` rounded to float16 (the one-pass scan).

    Cauchy-Schwarz bounds the rounding of the query: ``|row . (q - hi)| <= |row| |q - hi|``;
    each float32 dot product of ``dims`` terms, the scan's and the reference's, errs by at most
    ``gamma(dims) |row| |q|`` (Higham's bound, ``gamma(n) = n u / (1 - n u)``, u = 2^-24).
    Rows are unit vectors to within ``NORM_TOLERANCE`` (spec §3.5; verify checks it).
    """
    q = np.asarray(q, dtype=np.float64)
    hi = q.astype(np.float16).astype(np.float64)
    nu = q.size * 2.0**-24
    gamma = nu / (1.0 - nu)
    row = 1.0 + NORM_TOLERANCE
    return float(row * (np.linalg.norm(q - hi) + gamma * (np.linalg.norm(hi) + np.linalg.norm(q))))


def simsimd_kernel(q: np.ndarray, *, rounded: bool = False) -> Kernel | None:
    """A function ``rows (m, dims) float16 -> (m, p) float32``: the dot products of each row with
    the query's ``p`` float16 parts: ``hi`` and ``lo`` (``split_query``), or with ``rounded``
    the query rounded to float16 alone (one conversion of each row: ``rounding_error``)."""
    simsimd = simsimd_module()
    if simsimd is None:
        return None
    parts = np.asarray(q, dtype=np.float32).astype(np.float16)[None] if rounded else split_query(q)

    def kernel(rows: np.ndarray, out: np.ndarray) -> np.ndarray:
        # not cdist(..., out=out): simsimd 6.5 then returns None without a reference to it,
        # and each call takes one from None's count until the interpreter aborts
        # ("none_dealloc"); tests/pack/test_vector_scan.py counts None's references around scans
        out[:] = np.asarray(simsimd.cdist(rows, parts, metric="dot", out_dtype="float32"))
        return out

    kernel.parts = parts.shape[0]  # type: ignore[attr-defined]
    return kernel


def numpy_kernel(q: np.ndarray) -> Kernel:
    """The same contract in numpy: one block converted to float32, then a matrix-vector product
    (exact to float32 rounding: one part)."""
    q32 = np.asarray(q, dtype=np.float32)

    def kernel(rows: np.ndarray, out: np.ndarray) -> np.ndarray:
        out[:, 0] = rows.astype(np.float32) @ q32
        return out

    kernel.parts = 1  # type: ignore[attr-defined]
    return kernel


def pick_kernel(q: np.ndarray, use_simsimd: bool, rounded: bool) -> tuple[Kernel, float]:
    """(kernel, the bound on how far its scores may be from the float32 reference's)."""
    kernel = simsimd_kernel(q, rounded=rounded) if use_simsimd else None
    if kernel is None:
        return numpy_kernel(q), 0.0
    return kernel, rounding_error(q) if rounded else 0.0


def _total(parts: np.ndarray) -> np.ndarray:
    if parts.shape[1] == 1:
        return parts[:, 0]
    return np.add(parts[:, 0], parts[:, 1])  # (sum(axis=1) is 3x slower on 2 columns)


def scan_matrix(
    rows: np.ndarray, q: np.ndarray, *, use_simsimd: bool = True, rounded: bool = False
) -> np.ndarray:
    """Float32 scores ``rows @ q`` of an in-memory matrix (float16 or float32), by blocks; with
    ``rounded``, float16 rows are scanned once against the rounded query (``rounding_error``)."""
    return scan_matrix_bounded(rows, q, use_simsimd=use_simsimd, rounded=rounded)[0]


def scan_matrix_bounded(
    rows: np.ndarray, q: np.ndarray, *, use_simsimd: bool = True, rounded: bool = False
) -> tuple[np.ndarray, float]:
    """``scan_matrix`` and the bound on its distance from the float32 reference."""
    rows = np.asarray(rows)
    if rows.dtype != FLOAT16:
        return np.asarray(rows.astype(np.float32, copy=False) @ np.asarray(q, np.float32)), 0.0
    kernel, error = pick_kernel(q, use_simsimd, rounded)
    n = rows.shape[0]
    parts = np.empty((n, kernel.parts), np.float32)  # type: ignore[attr-defined]
    step = max(1, BLOCK_BYTES // max(1, rows.shape[1] * 2))
    for at in range(0, n, step):
        kernel(np.ascontiguousarray(rows[at : at + step]), parts[at : at + step])
    return _total(parts), error


class StoredRows:
    """A float16 vector dataset of an open pack, scanned in place (see the module docstring).

    ``checked`` is the element's ``CheckedDataset`` (reads through HDF5, Fletcher-32 checked);
    ``h5ds`` the raw h5py dataset whose chunk layout says where the rows lie in ``path``.
    """

    def __init__(self, checked: Any, h5ds: Any, path: str) -> None:
        self.checked = checked
        self.shape: tuple[int, int] = tuple(h5ds.shape)  # type: ignore[assignment]
        self._blocks: list[tuple[int, np.ndarray]] | None = None
        self._map: mmap.mmap | None = None
        self._view: tuple[np.ndarray, np.ndarray, int] | bool | None = None  # _rows_view
        self.mapped = False
        with contextlib.suppress(OSError, ValueError, RuntimeError, TypeError, KeyError):
            self._blocks = self._map_chunks(h5ds, path)
            self.mapped = self._blocks is not None

    def __len__(self) -> int:
        return self.shape[0]

    def _map_chunks(self, ds: Any, path: str) -> list[tuple[int, np.ndarray]] | None:
        """(first row, float16 rows view) of every chunk, or None where the layout does not
        allow reading the stored bytes as the values (``mapped.map_chunks``)."""
        found = map_chunks(ds, path, FLOAT16, self.shape)
        if found is None:
            return None
        self._map, blocks = found
        return blocks

    def scan(self, q: np.ndarray, *, use_simsimd: bool = True, rounded: bool = False) -> np.ndarray:
        """Float32 ``row . q`` of every row, exact to float32 rounding; with ``rounded``, within
        ``rounding_error(q)`` of it (``scan_bounded``)."""
        return self.scan_bounded(q, use_simsimd=use_simsimd, rounded=rounded)[0]

    def scan_bounded(
        self, q: np.ndarray, *, use_simsimd: bool = True, rounded: bool = False
    ) -> tuple[np.ndarray, float]:
        """``scan`` and the bound on its distance from the float32 reference (0 when exact)."""
        kernel, error = pick_kernel(q, use_simsimd, rounded)
        return _total(self.scan_parts(kernel)), error

    def scan_parts(self, kernel: Kernel, out: np.ndarray | None = None) -> np.ndarray:
        """``(rows, kernel.parts)`` float32: ``kernel`` applied to every row, block by block
        (into ``out`` where given)."""
        n, dims = self.shape
        parts = np.empty((n, kernel.parts), np.float32) if out is None else out  # type: ignore[attr-defined]
        if self._blocks is not None:
            aligned = None
            for first, view in self._blocks:
                if not view.flags.aligned:
                    # HDF5 places chunks at any byte: an odd offset gives float16 rows that
                    # simsimd refuses (buffer format '=e'); one chunk is copied to an aligned
                    # buffer that stays in cache (~5% of a scan)
                    if aligned is None:
                        aligned = np.empty(view.shape, FLOAT16)
                    block = aligned[: view.shape[0]]
                    np.copyto(block, view)
                    view = block
                kernel(view, parts[first : first + view.shape[0]])
        else:
            step = max(1, BLOCK_BYTES // max(1, dims * 2))
            for at in range(0, n, step):
                rows = np.asarray(self.checked[at : at + step], dtype=FLOAT16)
                kernel(rows, parts[at : at + rows.shape[0]])
        return parts

    def rows(self, ids: np.ndarray) -> np.ndarray:
        """Float32 vectors of ``ids`` as the scan reads them: from the mapped bytes (no checksum,
        like the scan) where mapped, else through HDF5."""
        return self._gather(ids, np.float32)

    def rows16(self, ids: np.ndarray) -> np.ndarray:
        """``rows`` as stored, float16: what the IVF search (``kbpack/search/ivf.py``) scans,
        without numpy's slow float16 -> float32 conversion of every gathered row."""
        return self._gather(ids, FLOAT16)

    def _gather(self, ids: np.ndarray, dtype: Any) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        if self._blocks is None:
            return self.checked_rows(ids).astype(dtype, copy=False)
        strided = self._rows_view() if ids.size else None
        if strided is not None:
            # one vectorised take over the whole mapping (below): no Python loop per chunk
            view, starts, per = strided
            # (indexing, not np.take: take copies a non-contiguous array whole first, and this
            # view spans the file)
            got = view[starts[ids // per] + (ids % per) * self.shape[1]]
            return got.astype(dtype, copy=False)
        if ids.size == 0:
            return np.zeros((0, self.shape[1]), dtype)
        out = np.empty((ids.size, self.shape[1]), dtype)
        per = self._blocks[0][1].shape[0]  # every chunk but the last holds this many rows
        block = ids // per
        order = np.argsort(block, kind="stable")
        bounds = np.flatnonzero(np.r_[True, np.diff(block[order]) != 0, True])
        for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            at = order[lo:hi]
            first, view = self._blocks[int(block[at[0]])]
            out[at] = view[ids[at] - first]
        return out

    def _rows_view(self) -> tuple[np.ndarray, np.ndarray, int] | None:
        """(view, starts, per): row ``i`` of chunk ``b`` (``per`` rows a chunk) is row
        ``starts[b] + i * dims`` of ``view``, the mapped file
        as overlapping float16 rows (a strided view: no copy). None when the chunks do not all
        start at even offsets (HDF5 may place them at any byte; the loop in ``_gather`` serves).
        """
        if self._view is None and self._blocks is not None and self._map is not None:
            flat = np.frombuffer(self._map, dtype=np.uint8)
            offsets = (
                np.array(
                    [v.__array_interface__["data"][0] for _, v in self._blocks], dtype=np.int64
                )
                - flat.__array_interface__["data"][0]
            )
            dims = self.shape[1]
            if (offsets % 2).any() or flat.size < 2 * dims:
                self._view = False
            else:
                whole = flat[: flat.size - flat.size % 2].view(FLOAT16)
                view = np.lib.stride_tricks.as_strided(
                    whole, shape=(whole.size - dims + 1, dims), strides=(2, 2), writeable=False
                )
                self._view = (view, offsets // 2, self._blocks[0][1].shape[0])
        return self._view if isinstance(self._view, tuple) else None

    def checked_rows(self, rows: np.ndarray) -> np.ndarray:
        """Float32 vectors of ``rows`` (ascending or not) read through HDF5's checksum."""
        rows = np.asarray(rows, dtype=np.int64)
        order = sorted_unique(rows)
        if order.size == 0:
            return np.zeros((0, self.shape[1]), np.float32)
        got = np.asarray(self.checked[order], dtype=np.float32)
        return got[np.searchsorted(order, rows)]

    def close(self) -> None:
        self._blocks = None
        self._view = None
        if self._map is not None:
            with contextlib.suppress(BufferError):  # a caller still holds a view: let GC close
                self._map.close()
            self._map = None


def scan(rows: np.ndarray | StoredRows, q: np.ndarray) -> np.ndarray:
    """Float32 ``rows @ q`` whether the rows are in memory (tests, benches) or in a pack."""
    if isinstance(rows, StoredRows):
        return rows.scan(q)
    return scan_matrix(rows, q)


def scan_rounded(rows: np.ndarray | StoredRows, q: np.ndarray) -> tuple[np.ndarray, float]:
    """One float16 pass: scores within the returned bound of ``scan``'s (``rounding_error``)."""
    if isinstance(rows, StoredRows):
        return rows.scan_bounded(q, rounded=True)
    return scan_matrix_bounded(rows, q, rounded=True)


def scan_rounded_many(
    rows: np.ndarray | StoredRows, queries: np.ndarray
) -> tuple[np.ndarray, list[float]]:
    """``scan_rounded`` for each row of ``queries`` (B, dims) in one pass over ``rows``: column
    ``j`` of the ``(rows, B)`` result is ``scan_rounded(rows, queries[j])``'s scores, bit for
    bit (simsimd scores each (row, query) pair on its own, with the same kernel), and the bound
    of each. Without simsimd, or for rows not stored as float16, one scan per query."""
    queries = np.asarray(queries, dtype=np.float32)
    simsimd = simsimd_module()
    in_memory = not isinstance(rows, StoredRows)
    if simsimd is None or (in_memory and np.asarray(rows).dtype != FLOAT16):
        each = [scan_rounded(rows, q) for q in queries]
        return np.stack([s for s, _ in each], axis=1), [e for _, e in each]
    parts = queries.astype(np.float16)

    def kernel(block: np.ndarray, out: np.ndarray) -> np.ndarray:
        # (not out=: see simsimd_kernel)
        out[:] = np.asarray(simsimd.cdist(block, parts, metric="dot", out_dtype="float32"))
        return out

    kernel.parts = parts.shape[0]  # type: ignore[attr-defined]
    errors = [rounding_error(q) for q in queries]
    if isinstance(rows, StoredRows):
        return rows.scan_parts(kernel), errors
    matrix = np.asarray(rows)
    out = np.empty((matrix.shape[0], parts.shape[0]), np.float32)
    step = max(1, BLOCK_BYTES // max(1, matrix.shape[1] * 2))
    for at in range(0, matrix.shape[0], step):
        kernel(np.ascontiguousarray(matrix[at : at + step]), out[at : at + step])
    return out, errors


BATCH_WIDTH = 8  # queries a float32 batch pass multiplies at once, padded with zero columns
# rows per matrix product: a block (192 KiB at 384 dims) stays in a core's cache, and a product
# this small runs on the calling thread. OpenBLAS's threads lose on a busy machine: 404k rows x
# 8 queries took 0.19-0.24 s in blocks of 128 rows, 0.26-0.33 s in 256, 1.6-9.7 s in 512 and
# 0.5-0.6 s as one product (2 cores, load 10; bench/RESULTS.md "Serve in batches")
BLOCK_ROWS = 128


def float32_error(q: np.ndarray) -> float:
    """A bound on ``|s - x|``, ``s`` a float32 ``row . q`` as ``Float32Rows`` computes it (BLAS,
    any order) and ``x`` the exact re-score's (``kbpack/search/dense.py``, another order), for
    every row of norm <= 1 + tolerance: each errs by at most ``gamma(dims) |row| |q|``
    (Higham), plus a few units in the last place for the piece blend's own rounding."""
    q = np.asarray(q, dtype=np.float64)
    nu = q.size * 2.0**-24
    gamma = nu / (1.0 - nu)
    return float(2.0 * gamma * (1.0 + NORM_TOLERANCE) * np.linalg.norm(q) + 16 * 2.0**-24)


class Float32Rows:
    """A float32 copy of a vector dataset, held in memory (4 bytes per number: 1.5 KiB a
    384-dimension vector), that a batch of queries is multiplied with in one BLAS matrix
    product: what a server's batches scan (``kbpack.serve.library``) when its memory budget
    allows. numpy's float16 -> float32 conversion (~2-6 ns a number) is paid once, here,
    instead of once per (row, query) pair as simsimd's kernel does.

    The queries go in ``BATCH_WIDTH`` columns at a time, the unused ones zero, against
    ``BLOCK_ROWS`` rows at a time: the products have the same shapes whatever the batch, so
    OpenBLAS splits and orders them the same way whatever the other columns hold, and a
    query's scores are the same bits alone or in any batch
    (tests/pack/test_vector_scan.py). They are not simsimd's bits: the scores differ from the
    one-query scan's in the last places, within ``float32_error``; a search re-scores its top
    exactly, from the stored rows, so what it returns does not depend on which scan ran."""

    def __init__(self, rows: np.ndarray | StoredRows) -> None:
        n, dims = rows.shape if isinstance(rows, StoredRows) else np.asarray(rows).shape
        self.shape: tuple[int, int] = (int(n), int(dims))
        self.matrix = np.empty(self.shape, np.float32)
        if isinstance(rows, StoredRows):

            def convert(block: np.ndarray, out: np.ndarray) -> np.ndarray:
                out[:] = block
                return out

            convert.parts = dims  # type: ignore[attr-defined]
            rows.scan_parts(convert, self.matrix)
        else:
            self.matrix[:] = np.asarray(rows)

    @staticmethod
    def nbytes(rows: np.ndarray | StoredRows) -> int:
        n, dims = rows.shape if isinstance(rows, StoredRows) else np.asarray(rows).shape
        return int(n) * int(dims) * 4

    def __len__(self) -> int:
        return self.shape[0]

    def scan_many(self, queries: np.ndarray) -> tuple[np.ndarray, list[float]]:
        """``(rows, B)`` float32 ``row . q`` for each row of ``queries`` (B, dims), and each
        query's ``float32_error``."""
        queries = np.asarray(queries, dtype=np.float32)
        n, dims = self.shape
        b = len(queries)
        width = -(-b // BATCH_WIDTH) * BATCH_WIDTH
        padded = np.zeros((dims, width), np.float32)
        padded[:, :b] = queries.T
        columns = [
            np.ascontiguousarray(padded[:, at : at + BATCH_WIDTH])
            for at in range(0, width, BATCH_WIDTH)
        ]
        out = np.empty((n, width), np.float32)
        block = np.empty((BLOCK_ROWS, BATCH_WIDTH), np.float32)  # contiguous: BLAS writes it
        # each block of rows is read from memory once for the whole batch, then stays in cache
        # for each further BATCH_WIDTH queries
        for first in range(0, n, BLOCK_ROWS):
            rows = self.matrix[first : first + BLOCK_ROWS]
            m = rows.shape[0]
            for at, cols in zip(range(0, width, BATCH_WIDTH), columns, strict=True):
                out[first : first + m, at : at + BATCH_WIDTH] = np.matmul(rows, cols, out=block[:m])
        return out[:, :b], [float32_error(q) for q in queries]


def rows_of(rows: np.ndarray | StoredRows, ids: np.ndarray) -> np.ndarray:
    """Float32 vectors of ``ids`` as the scan read them."""
    if isinstance(rows, StoredRows):
        return rows.rows(ids)
    return np.asarray(rows[np.asarray(ids, dtype=np.int64)], dtype=np.float32)


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """``np.unique`` of a 1-d integer array. numpy's own imports ``numpy.ma`` on first use
    (~15 ms of a cold query, for two lists of 100 ids)."""
    out = np.sort(np.asarray(values, dtype=np.int64))
    return out[np.r_[True, out[1:] != out[:-1]]] if out.size else out
