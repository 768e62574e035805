"""The check of string rows' global heap references before HDF5 follows them.

For a state whose rows nothing proved yet (``PackReader.rows_checked_as_read``).
"""

from __future__ import annotations

import contextlib
import os

from kbpack.errors import describe
from kbpack.pack.global_heap import HeapReferences, string_column
from kbpack.pack.read_checked import DamagedDataError, hdf5_errors
from kbpack.pack.read_part import OpenFile, ReadPart


class HeapRowCheck(ReadPart):
    """Walks the global heap collections a pack's string rows point into, each once per reader,
    and refuses a row whose reference HDF5 must not follow (``check``)."""

    def __init__(self, file: OpenFile, fd: int | None, enabled: bool) -> None:
        """``fd``: the descriptor HDF5 reads through (None: another driver, the file is opened
        by ``path`` when first needed); ``enabled``: the rows are to be checked as read."""
        super().__init__(file)
        self.fd = fd
        self.enabled = enabled
        self.heap: HeapReferences | None = None  # the collections walked so far
        self._own_fd: int | None = None

    def check(self, path: str, first: int = 0, last: int | None = None) -> None:
        """Refuse, in one line naming the element and the row, a string row of ``path`` in
        ``first:last`` (default: all) whose global heap reference HDF5 must not follow: a
        malformed collection (HDF5 would stall or overrun walking it), an object the collection
        lacks, or a length that is not the object's (HDF5 would copy more than it allocated).

        Only for a state whose rows nothing proved yet (``rows_checked_as_read``: the first
        open's child reads the attributes, not the rows); a pack written here, verified here, or
        once read whole by the child needs none. Every in-process read of string rows calls
        this first (``strings``, ``string_at``, ``text``, ``dataset``; migrations that read
        ``h5`` directly too). Rows are read from the file as HDF5 will read them (16 bytes
        each, contiguous), each collection walked once per reader: a citation checks its own
        rows, ~the HDF5 read's own cost."""
        if not self.enabled or self._cache.get(f"rows-checked:{path}"):
            return
        offset, rows = self._string_column(path)
        stop = rows if last is None else min(rows, last)
        start = max(0, first)
        if start >= stop:
            return
        heap = self._heap_references()
        try:
            found = heap.problem(heap.rows(offset, start, stop))
        except (OSError, ValueError) as e:
            raise DamagedDataError(self.where, path, describe(e)) from e
        if found is not None:
            at, why = found
            raise DamagedDataError(self.where, path, f"row {start + at}: {why}")
        if start == 0 and stop == rows:
            self._cache[f"rows-checked:{path}"] = True

    def _string_column(self, path: str) -> tuple[int, int]:
        key = f"string-column:{path}"
        if key not in self._cache:
            with hdf5_errors(self.where, path):
                sizes = self.h5.id.get_create_plist().get_sizes()
                got = string_column(self.h5[path].id, sizes, self.manifest.file_size)
            if isinstance(got, str):  # the child read such a column whole: not this state
                raise DamagedDataError(
                    self.where, path, f"its rows are not stored as kbpack writes them ({got})"
                )
            self._cache[key] = got
        out: tuple[int, int] = self._cache[key]
        return out

    def _heap_references(self) -> HeapReferences:
        if self.heap is None:
            fd = self.fd
            if fd is None:  # another HDF5 driver: read the file through a descriptor of ours
                fd = self._own_fd = os.open(self.path, os.O_RDONLY)
            with hdf5_errors(self.where):
                base = int(self.h5.id.get_create_plist().get_userblock())
            self.heap = HeapReferences(fd, self.manifest.file_size, base)
        return self.heap

    def close(self) -> None:
        """Close the descriptor opened for another HDF5 driver, if any."""
        own = self._own_fd
        if own is not None:
            with contextlib.suppress(OSError):
                os.close(own)
            self._own_fd = None
