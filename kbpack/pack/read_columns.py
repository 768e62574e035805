"""Checked reads of a pack's numeric columns, single rows, datasets and attributes.

Each is checked against the manifest's digests (whole reads) or the filter masks (part reads),
and a column of row numbers against the rows it points at.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kbpack.pack import format as F
from kbpack.pack.digest import attrs_digest, numeric_digest, plain
from kbpack.pack.read_checked import CheckedDataset, DamagedDataError, hdf5_errors, read_whole
from kbpack.pack.read_heap import HeapRowCheck
from kbpack.pack.read_part import OpenFile, ReadPart

# Columns of row numbers: the count whose rows they point at, and the lowest value allowed
# (-1: a section's parent, for a document's root section).
ROW_REFERENCES: dict[str, tuple[str, int]] = {
    F.SEC_DOCUMENT: ("documents", 0),
    F.SEC_PARENT: ("sections", -1),
    F.PAGE_DOCUMENT: ("documents", 0),
    F.CHUNK_DOCUMENT: ("documents", 0),
    F.CHUNK_SECTION: ("sections", 0),
    F.PIECE_CHUNK: ("chunks", 0),
    F.BM25_CHUNK: ("chunks", 0),
    F.BM25_DENSE_TERMS: ("terms", 0),
    F.LINK_DOCUMENT: ("documents", 0),
    F.LINK_TARGET: ("documents", 0),
}


class ColumnReader(ReadPart):
    """Reads numeric columns (whole or one row), datasets for part reads, and attributes."""

    def __init__(self, file: OpenFile, heap_check: HeapRowCheck) -> None:
        super().__init__(file)
        self.heap_check = heap_check

    def attrs(self, path: str) -> dict[str, Any]:
        """An object's attributes, checked against the manifest's digest (a flipped bit in
        ``/search@max_distance`` would otherwise move the refusal threshold silently)."""
        key = f"attrs:{path}"
        if key not in self._cache:
            with hdf5_errors(self.where):
                if path not in self.h5:
                    return {}
                raw = dict(self.h5[path].attrs.items())
            want = self.manifest.elements.get("/@attrs" if path == "/" else path + "@attrs")
            try:
                actual = attrs_digest(raw)
            # a damaged UTF-8 string attribute decodes to surrogates; a damaged name comes
            # back as bytes, which cannot be sorted beside the str names
            except (UnicodeError, TypeError):
                actual = ""
            if want is not None and actual != want:
                raise DamagedDataError(
                    self.where, path, "its attributes differ from the manifest's digest"
                )
            self._cache[key] = {k: plain(v) for k, v in raw.items()}
        return dict(self._cache[key])

    def column(self, path: str) -> np.ndarray:
        """A whole numeric dataset, read once, checked against the manifest's digest, cached.

        Fletcher-32 catches damaged data; the digest also catches damage to HDF5's own
        bookkeeping, such as a flipped bit in a chunk's filter mask that makes HDF5 skip
        decompression and return the compressed bytes as values.
        """
        if path not in self._cache:
            el = F.ELEMENT_BY_PATH.get(path)
            if el is not None and el.dtype == "str":  # h5py follows its rows' heap references
                self.heap_check.check(path)
            with hdf5_errors(self.where, path):
                read = read_whole(self.h5, path)
            want = self.manifest.elements.get(path)
            if want is not None and numeric_digest(read) != want:
                raise DamagedDataError(self.where, path, "differs from the manifest's digest")
            self._check_references(path, read)
            self._cache[path] = read
        arr: np.ndarray = self._cache[path]
        return arr

    def value(self, path: str, row: int) -> int:
        """One row of an integer column: from the column when it was read whole (digest-checked),
        else by a part read (filter mask + Fletcher-32, spec §1.2). A citation at 1M chunks so
        reads the HDF5 chunks of its own rows, not 8 MB of offsets inflated and hashed."""
        whole = self._cache.get(path)
        if whole is not None:
            return int(whole[row])
        key = f"{path}#{row}"
        if key not in self._cache:
            ds = self.dataset(path)
            if not 0 <= row < len(ds):
                raise DamagedDataError(self.where, path, f"row {row} is outside the column")
            value = np.asarray(ds[row : row + 1])
            self._check_references(path, value, first_row=row)
            self._cache[key] = int(value[0])
        out: int = self._cache[key]
        return out

    def _check_references(self, path: str, arr: np.ndarray, first_row: int = 0) -> None:
        """A column of row numbers must point at rows that exist: a pack whose digests were
        rewritten to match its damage (only verify's invariants would say so) must stop a
        command in one line, not in an IndexError where the row is used."""
        ref = ROW_REFERENCES.get(path)
        if ref is None or arr.size == 0 or arr.dtype.kind not in "iu":
            return
        count, lowest = ref
        n = int(self.manifest.counts.get(count, 0))
        bad = np.flatnonzero((arr < lowest) | (arr >= n))
        if bad.size:
            row = int(bad[0])
            raise DamagedDataError(
                self.where,
                path,
                f"row {first_row + row} points at {count} row {int(arr[row])}, "
                f"outside {lowest}..{n - 1}",
            )

    def dataset(self, path: str) -> Any:
        """The dataset (a ``CheckedDataset``: sliced like h5py's, and a damaged read names the
        element), for reading parts without reading it all."""
        # one per path: a citation's part reads (``value``) and a restore's row reads come back
        # to the same dataset, and each HDF5 chunk's filter mask is then checked once
        key = f"dataset:{path}"
        if key not in self._cache:
            with hdf5_errors(self.where):
                ds = self.h5[path]
                check = None
                if ds.dtype.kind == "O" and self.heap_check.enabled:
                    check = lambda first, last: self.heap_check.check(path, first, last)  # noqa: E731
                self._cache[key] = CheckedDataset(
                    ds, self.where, path, self.manifest.elements.get(path), rows_check=check
                )
        return self._cache[key]
