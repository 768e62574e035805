"""Checked HDF5 access: HDF5 errors as one-line PackErrors, and part reads that refuse damage.

``hdf5_errors`` names the file (and the element) in the line; ``CheckedDataset`` checks each
HDF5 chunk's filter mask before a part read and a whole read against the manifest's digest.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from kbpack.errors import KbpackError, PackError, describe
from kbpack.pack.digest import numeric_digest


@contextlib.contextmanager
def hdf5_errors(where: str, element: str | None = None) -> Iterator[None]:
    """Turn whatever HDF5/h5py raises on a damaged or hostile file into one PackError line.

    With ``element`` (a data read), the line names it: a Fletcher-32 mismatch or a deflate
    error means those bytes were damaged after writing, never that the data is what it says.
    """
    try:
        yield
    except KbpackError:
        raise
    except (
        OSError,
        RuntimeError,
        KeyError,
        TypeError,
        ValueError,
        IndexError,
        AttributeError,
        SystemError,  # h5py's lock can surface a crafted file's error this way (CVE-2024-32618)
    ) as e:
        if element is not None:
            raise DamagedDataError(where, element, describe(e)) from e
        if "checksum" in str(e):  # HDF5's own metadata (object headers, indexes, heaps)
            raise PackError(
                f"{where}: damaged: HDF5 metadata fails its checksum ({describe(e)}); "
                f"run kbpack verify {where}, then copy the pack again"
            ) from e
        raise PackError(f"{where}: HDF5 data cannot be read ({describe(e)})") from e


class DamagedDataError(PackError):
    """Data of one element failed its checksum, its decompression or its digest."""

    def __init__(self, where: str, element: str, why: str) -> None:
        super().__init__(
            f"{where}: {element} is damaged ({why}); run kbpack verify {where}, "
            "then copy the pack again"
        )
        self.element = element


class CheckedDataset:
    """An h5py dataset whose every read turns a damaged chunk into ``DamagedDataError``.

    Search slices postings and vectors lazily, long after the pack was opened; this keeps the
    pack and the element in the message wherever the read happens.
    """

    def __init__(
        self,
        ds: Any,
        where: str,
        element: str,
        digest: str | None = None,
        rows_check: Any = None,
    ) -> None:
        self._ds = ds
        # string rows: called with (first, last) before HDF5 follows their heap references
        self._rows_check = rows_check
        self._where = where
        self.element = element
        self.digest = digest if ds.dtype.kind != "O" else None  # numeric digests only
        self.shape: tuple[int, ...] = ds.shape
        self.dtype: np.dtype = ds.dtype
        # rows per HDF5 chunk of a filtered dataset (None: nothing to check, see _check_masks)
        self._rows: int | None = ds.chunks[0] if ds.chunks and self.shape[0] else None
        self._masks_ok: set[int] = set()  # chunks whose filter mask was checked

    def __len__(self) -> int:
        return int(self.shape[0])

    @property
    def where(self) -> str:
        """The pack, as its errors name it."""
        return self._where

    def __getitem__(self, key: Any) -> Any:
        # (isinstance first: a key may be a numpy index array, whose == is elementwise)
        whole = (isinstance(key, tuple) and key == ()) or key is Ellipsis
        whole = whole or (isinstance(key, slice) and key == slice(None))
        if not (whole and self.digest is not None):
            self._check_masks(key)
        if self._rows_check is not None:
            self._rows_check(*rows_of(key, int(self.shape[0])))
        with hdf5_errors(self._where, self.element):
            out = self._ds[key]
        if whole and self.digest is not None and numeric_digest(np.asarray(out)) != self.digest:
            # a whole read (BM25's baked index) is checked like PackReader.column
            raise DamagedDataError(self._where, self.element, "differs from the manifest's digest")
        return out

    def _check_masks(self, key: Any) -> None:
        """Refuse a part read from a chunk whose filter mask says a filter was skipped.

        HDF5 keeps, per chunk, a mask of the filters *not* applied, in the chunk index where no
        checksum reaches. A writer of packs never skips one, so a set bit is damage: one flipped
        bit there makes HDF5 skip the unshuffle or the inflate (and the Fletcher-32 check with
        it) and return stored bytes as values -- a query's postings slice answered wrong
        citations silently (found by tests/search/test_filter_mask.py). Whole reads are checked by
        the digest instead. A few microseconds per chunk, once per chunk.

        The mask comes from ``read_direct_chunk`` (a B-tree lookup: 2.5-5 us wherever the chunk
        is), not ``get_chunk_info_by_coord``, which HDF5 answers by walking the chunk index
        from its start: 2 us for the first chunk, 37 us for the last of 2,052 (100k chunks'
        postings), 102 us for the last of 5,126 (1M) -- up to ~40 of them per query.
        """
        rows = self._rows
        if rows is None:
            return
        first, last = rows_of(key, int(self.shape[0]))
        if first >= last:
            return
        tail = (0,) * (len(self.shape) - 1)
        for c in range(first // rows, (last - 1) // rows + 1):
            if c in self._masks_ok:
                continue
            with hdf5_errors(self._where, self.element):
                mask, _ = self._ds.id.read_direct_chunk((c * rows, *tail))
            if mask:
                raise DamagedDataError(
                    self._where,
                    self.element,
                    f"chunk at row {c * rows}: its filter mask {mask:#x} skips a filter",
                )
            self._masks_ok.add(c)

    def read_spans(self, spans: list[tuple[int, int]]) -> list[np.ndarray]:
        """Rows ``lo:hi`` of a 1-D dataset for each ``(lo, hi)`` of ``spans`` (disjoint), in one
        HDF5 read: a query's postings are ~20 slices, and each h5py read costs ~50-200 us of
        selection and call overhead before any chunk is decompressed."""
        import h5py

        order = sorted(range(len(spans)), key=lambda i: spans[i][0])
        sizes = [max(0, hi - lo) for lo, hi in spans]
        for lo, hi in spans:  # a part read: no digest covers it (see _check_masks)
            self._check_masks(slice(lo, hi))
            if self._rows_check is not None:
                self._rows_check(lo, hi)
        out = np.empty(sum(sizes), dtype=self.dtype)
        if len(out):
            with hdf5_errors(self._where, self.element):
                space = self._ds.id.get_space()
                space.select_none()
                for i in order:
                    if sizes[i]:
                        lo = spans[i][0]
                        space.select_hyperslab((lo,), (sizes[i],), op=h5py.h5s.SELECT_OR)
                self._ds.id.read(h5py.h5s.create_simple((len(out),)), space, out)
        # HDF5 fills a selection in file order: the spans come back sorted by start
        parts: list[np.ndarray] = [out[:0]] * len(spans)
        at = 0
        for i in order:
            parts[i] = out[at : at + sizes[i]]
            at += sizes[i]
        return parts

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        arr = np.asarray(self[()])
        return arr if dtype is None else arr.astype(dtype)


def rows_of(key: Any, n: int) -> tuple[int, int]:
    """``[first, last)`` rows of axis 0 that ``key`` reads (all rows when it cannot tell)."""
    k = key[0] if isinstance(key, tuple) and key else key
    if isinstance(k, slice):
        start, stop, step = k.indices(n)
        return (start, stop) if step > 0 else (0, n)
    if isinstance(k, (int, np.integer)):
        i = int(k) + (n if int(k) < 0 else 0)
        return i, i + 1
    if isinstance(k, np.ndarray) and k.dtype.kind in "iu" and k.size:
        return int(k.min()), int(k.max()) + 1
    return 0, n


def read_whole(h5: Any, path: str) -> np.ndarray:
    """A whole numeric dataset through h5py's low-level API: opening it as an ``h5py.Dataset``
    (a File and a Dataset object, weak references, property lists) costs ~75 us, the low-level
    open ~14 us; a BM25 query of a process reads five such columns."""
    from h5py import h5d, h5s

    ds = h5d.open(h5.id, path.encode("utf-8"))
    if ds.dtype.kind not in "biuf":  # strings and the like: h5py's conversions
        out: np.ndarray = h5[path][()]
        return out
    arr = np.empty(ds.shape, dtype=ds.dtype)
    if arr.size:
        ds.read(h5s.ALL, h5s.ALL, arr)
    return arr
