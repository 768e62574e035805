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
  cosine that much off reorders near ties against the float32 reference). The query stays
  float32: it is split into a float16 ``hi`` and the float16 ``lo`` of what ``hi`` missed, and a
  row's score is ``row . hi + row . lo``, within ~1e-7 of the float32 matmul (one pass over the
  rows: the two dot products of a row read it once). Without simsimd, numpy converts one block
  at a time and multiplies (the same scores, a few times slower, never the whole matrix).
* **Checksums.** Reading mapped bytes skips the Fletcher-32 check that HDF5 applies on every
  read. ``checked_rows`` re-reads rows through HDF5 (checked); the searcher re-scores every
  chunk it returns that way and refuses a pack whose mapped and checked rows disagree
  (``kbpack.search``), so no score a query shows comes from unchecked bytes. Damage in a row that
  no query returns can change a ranking unnoticed until ``kbpack verify`` (spec §1.2).
"""

from __future__ import annotations

import contextlib
import mmap
from collections.abc import Callable
from typing import Any

import numpy as np

FLETCHER32 = 3  # HDF5's filter id (H5Z_FILTER_FLETCHER32)
FLOAT16 = np.dtype("<f2")
BLOCK_BYTES = 4 << 20  # the HDF5 path reads this much per call: big enough to amortise the call,
#   small enough to stay in cache while it is scanned


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


def simsimd_kernel(q: np.ndarray) -> Kernel | None:
    """A function ``rows (m, dims) float16 -> (m, 2) float32`` (hi and lo dot products)."""
    simsimd = simsimd_module()
    if simsimd is None:
        return None
    parts = split_query(q)

    def kernel(rows: np.ndarray, out: np.ndarray) -> np.ndarray:
        # not cdist(..., out=out): simsimd 6.5 then returns None without a reference to it,
        # and each call takes one from None's count until the interpreter aborts
        # ("none_dealloc"); tests/test_vector_scan.py counts None's references around scans
        out[:] = np.asarray(simsimd.cdist(rows, parts, metric="dot", out_dtype="float32"))
        return out

    return kernel


def numpy_kernel(q: np.ndarray) -> Kernel:
    """The same contract in numpy: one block converted to float32, then a matrix-vector product."""
    q32 = np.asarray(q, dtype=np.float32)

    def kernel(rows: np.ndarray, out: np.ndarray) -> np.ndarray:
        out[:, 0] = rows.astype(np.float32) @ q32
        out[:, 1] = 0.0
        return out

    return kernel


def scan_matrix(rows: np.ndarray, q: np.ndarray, *, use_simsimd: bool = True) -> np.ndarray:
    """Float32 scores ``rows @ q`` of an in-memory matrix (float16 or float32), by blocks."""
    rows = np.asarray(rows)
    if rows.dtype != FLOAT16:
        return np.asarray(rows.astype(np.float32, copy=False) @ np.asarray(q, np.float32))
    kernel = (simsimd_kernel(q) if use_simsimd else None) or numpy_kernel(q)
    n = rows.shape[0]
    parts = np.empty((n, 2), np.float32)
    step = max(1, BLOCK_BYTES // max(1, rows.shape[1] * 2))
    for at in range(0, n, step):
        kernel(np.ascontiguousarray(rows[at : at + step]), parts[at : at + step])
    return np.add(parts[:, 0], parts[:, 1])  # (sum(axis=1) is 3x slower on 2 columns)


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
        self.mapped = False
        with contextlib.suppress(OSError, ValueError, RuntimeError, TypeError, KeyError):
            self._blocks = self._map_chunks(h5ds, path)
            self.mapped = self._blocks is not None

    def __len__(self) -> int:
        return self.shape[0]

    def _map_chunks(self, ds: Any, path: str) -> list[tuple[int, np.ndarray]] | None:
        """(first row, float16 rows view) of every chunk, or None where the layout does not
        allow reading the stored bytes as the values."""
        n, dims = self.shape
        if n == 0 or ds.dtype != FLOAT16 or ds.chunks is None or ds.chunks[1:] != (dims,):
            return None
        dcpl = ds.id.get_create_plist()
        filters = [dcpl.get_filter(i)[0] for i in range(dcpl.get_nfilters())]
        if filters not in ([], [FLETCHER32]):
            return None
        extents: list[tuple[int, int]] = []
        ds.id.chunk_iter(lambda c: extents.append((int(c.chunk_offset[0]), int(c.byte_offset))))
        extents.sort()
        rows_per = int(ds.chunks[0])
        row_bytes = dims * 2
        if [r for r, _ in extents] != list(range(0, n, rows_per)):
            return None  # a chunk never written reads as the fill value: not in the file
        with open(path, "rb") as f:
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        flat = np.frombuffer(self._map, dtype=np.uint8)
        blocks = []
        for first, offset in extents:
            m = min(rows_per, n - first)
            if offset % 2 or offset + m * row_bytes > flat.size:
                return None
            view = flat[offset : offset + m * row_bytes].view(FLOAT16).reshape(m, dims)
            blocks.append((first, view))
        # the first and the last row as HDF5 reads them must be the bytes mapped
        for first, view in (blocks[0], blocks[-1]):
            m = view.shape[0]
            if not np.array_equal(
                np.asarray(ds[first : first + m]).view(np.uint16), view.view(np.uint16)
            ):
                return None
        return blocks

    def scan(self, q: np.ndarray, *, use_simsimd: bool = True) -> np.ndarray:
        """Float32 ``row . q`` of every row, exact to float32 rounding."""
        n, dims = self.shape
        kernel = (simsimd_kernel(q) if use_simsimd else None) or numpy_kernel(q)
        parts = np.empty((n, 2), np.float32)
        if self._blocks is not None:
            for first, view in self._blocks:
                kernel(view, parts[first : first + view.shape[0]])
        else:
            step = max(1, BLOCK_BYTES // max(1, dims * 2))
            for at in range(0, n, step):
                rows = np.asarray(self.checked[at : at + step], dtype=FLOAT16)
                kernel(rows, parts[at : at + rows.shape[0]])
        return np.add(parts[:, 0], parts[:, 1])  # (sum(axis=1) is 3x slower on 2 columns)

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
        if self._map is not None:
            with contextlib.suppress(BufferError):  # a caller still holds a view: let GC close
                self._map.close()
            self._map = None


def scan(rows: np.ndarray | StoredRows, q: np.ndarray) -> np.ndarray:
    """Float32 ``rows @ q`` whether the rows are in memory (tests, benches) or in a pack."""
    if isinstance(rows, StoredRows):
        return rows.scan(q)
    return scan_matrix(rows, q)


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """``np.unique`` of a 1-d integer array. numpy's own imports ``numpy.ma`` on first use
    (~15 ms of a cold query, for two lists of 100 ids)."""
    out = np.sort(np.asarray(values, dtype=np.int64))
    return out[np.r_[True, out[1:] != out[:-1]]] if out.size else out
