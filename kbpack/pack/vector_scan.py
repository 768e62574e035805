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
from collections.abc import Callable, Iterator
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
        n = self.shape[0]
        parts = np.empty((n, kernel.parts), np.float32) if out is None else out  # type: ignore[attr-defined]
        for first, rows in self.blocks():
            kernel(rows, parts[first : first + rows.shape[0]])
        return parts

    def blocks(self) -> Iterator[tuple[int, np.ndarray]]:
        """(first row, float16 rows) of every block, in order: the mapped chunks where mapped
        (each valid until the next is taken), else blocks read through HDF5."""
        n, dims = self.shape
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
                yield first, view
        else:
            step = max(1, BLOCK_BYTES // max(1, dims * 2))
            for at in range(0, n, step):
                yield at, np.asarray(self.checked[at : at + step], dtype=FLOAT16)

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


BF16_ROWS = 32768  # rows converted (and scored) at a time: 24 MiB of bfloat16 at 384 dims


def to_bf16(values: np.ndarray) -> np.ndarray:
    """bfloat16 bits (uint16) of float32 ``values``, rounded to nearest, ties to even (the
    upper half of the float32 bits, rounded). Finite values only (callers check)."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounding = np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    return ((bits + rounding) >> np.uint32(16)).astype(np.uint16)


def from_bf16(bits: np.ndarray) -> np.ndarray:
    """float32 values of bfloat16 bits (exact: bfloat16 is float32's upper half)."""
    return (np.asarray(bits, dtype=np.uint32) << np.uint32(16)).view(np.float32)


def _norms(values: np.ndarray) -> np.ndarray:
    return np.sqrt(np.einsum("ij,ij->i", values, values))


class Bf16Rows:
    """A bfloat16 copy of a vector dataset held in memory (2 bytes a number), that a batch of
    queries is scored against: what a server's batches scan (``kbpack.serve.library``) when its
    ``--vector-memory`` allows.

    Why bfloat16: simsimd's bfloat16 dot product (AVX-512 BF16 where the CPU has it) scores a
    (row, query) pair ~3x faster than its float16 one, which converts every number first (404k
    rows: 8.6 vs 25 ms a query, bench/RESULTS.md "Serve in batches"), for the same bytes; a
    float32 copy is multiplied with a whole batch at once by BLAS but reads 4 bytes a number
    for every batch (~90 ms for any batch of up to 8 here). The estimates are only a filter:
    ``bound`` bounds their distance from the exact float32 re-score, and
    ``DenseScores.top`` re-scores every row within twice that bound of the n-th best
    (``kbpack/search/dense.py``), so what a search returns is ``kbpack query``'s, bit for bit.
    simsimd scores each pair on its own, so a query's estimates are also the same bits alone
    or in any batch (tests/pack/test_vector_scan.py).

    ``residual``: the largest ``|x - bf16(x)|`` over the rows, and ``norm`` the largest
    ``|bf16(x)|`` (each rounded up), measured when the copy is made: the bound uses them."""

    def __init__(self, bits: np.ndarray, residual: float, norm: float) -> None:
        self.bits = bits
        self.residual = residual
        self.norm = norm
        self.shape: tuple[int, int] = (int(bits.shape[0]), int(bits.shape[1]))

    @classmethod
    def of(cls, rows: np.ndarray | StoredRows) -> Bf16Rows | None:
        """The copy of ``rows`` (a pack's stored rows or a matrix), or None when a row is not
        finite: the stored-row scan then meets it and says which (``PackVectors._finite``)."""
        n, dims = rows.shape
        bits = np.empty((n, dims), np.uint16)
        residual = norm = 0.0
        if isinstance(rows, StoredRows):
            blocks: Iterator[tuple[int, np.ndarray]] = rows.blocks()
        else:
            blocks = ((at, rows[at : at + BF16_ROWS]) for at in range(0, n, BF16_ROWS))
        for first, block in blocks:
            x = np.asarray(block, dtype=np.float32)
            if not np.isfinite(x).all():
                return None
            b = to_bf16(x)
            bits[first : first + len(b)] = b
            rounded = from_bf16(b).astype(np.float64)
            if len(b):
                residual = max(residual, float(_norms(x.astype(np.float64) - rounded).max()))
                norm = max(norm, float(_norms(rounded).max()))
        up = 1.0 + 1e-9  # the float64 sums' own rounding, upward
        return cls(bits, residual * up, norm * up)

    @staticmethod
    def nbytes(rows: np.ndarray | StoredRows) -> int:
        n, dims = rows.shape
        return int(n) * int(dims) * 2

    def __len__(self) -> int:
        return self.shape[0]

    def bound(self, q: np.ndarray, q16: np.ndarray) -> float:
        """A bound on ``|s - r|`` for every row ``x`` of the copy: ``s`` the estimate of
        ``x . q`` (``xb . qb``, bfloat16 rows and query, float32 sums in any order) and ``r``
        the exact re-score (``row_dots``, float32). With ``xb``, ``qb`` the rounded vectors:
        ``x . q - xb . qb = (x - xb) . q + xb . (q - qb)``, at most ``residual |q| + norm
        |q - qb|`` (Cauchy-Schwarz); each float32 sum of ``dims`` products errs by at most
        ``gamma(dims)`` times the product of the norms (Higham; bfloat16 products are exact in
        float32), the stored row's norm at most 1 + tolerance (verify checks it); and a few
        units in the last place for the piece blend's own rounding."""
        q64 = np.asarray(q, dtype=np.float64)
        qn = float(np.linalg.norm(q64))
        dq = float(np.linalg.norm(q64 - from_bf16(q16).astype(np.float64)))
        nu = 2.0 * q64.size * 2.0**-24  # (doubled: kernels that sum pairs before accumulating)
        gamma = nu / (1.0 - nu)
        sums = gamma * (self.norm * (qn + dq) + (1.0 + NORM_TOLERANCE) * qn)
        return (self.residual * qn + self.norm * dq + sums) * (1.0 + 1e-6) + 16 * 2.0**-24

    def scan_many(self, queries: np.ndarray) -> tuple[np.ndarray, list[float]]:
        """``(rows, B)`` float32 estimates of ``row . q`` for each row of ``queries`` (B, dims),
        and each query's ``bound``."""
        queries = np.asarray(queries, dtype=np.float32)
        q16 = to_bf16(queries)
        out = np.empty((self.shape[0], len(queries)), np.float32)
        simsimd = simsimd_module()
        q32 = from_bf16(q16).T
        for at in range(0, self.shape[0], BF16_ROWS):
            block = self.bits[at : at + BF16_ROWS]
            if simsimd is not None:
                # (not out=: see simsimd_kernel)
                got = simsimd.cdist(block, q16, metric="dot", dtype="bf16", out_dtype="float32")
                out[at : at + len(block)] = np.asarray(got)
            else:
                out[at : at + len(block)] = from_bf16(block) @ q32
        return out, [self.bound(q, b) for q, b in zip(queries, q16, strict=True)]


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
