"""HDF5 global heap collections, checked before HDF5 reads one.

Variable-length strings (every string column and string attribute of a pack) live in global
heap collections ("GCOL"), outside any checksum. HDF5 2.0.0 walks a collection's objects
trusting their sizes: a free-space object of size 0 -- a zeroed sector in a collection's tail
is enough -- makes it loop forever on the first string read (found by bench/fuzz.py), and a
huge size moves its cursor past the buffer. This module walks every collection of the file the
way HDF5 does (HDF5 file format spec, "Global Heap"), but refuses what would stall or overrun
it, so that the caller can say "damaged" in one line instead of hanging.

Three ways in, each checking every collection before HDF5 walks it:

* ``malformed_collections``: every collection of the file, found by ``GCOL`` and version 1
  (HDF5 checks no more: ``hdf5_would_walk``) in one pass over the file (``verify``'s child: ~0.5 ms
  per MB, 0.9 s at 1M chunks). A collection whose signature is damaged is not found here, and
  HDF5 refuses it itself ("bad global heap collection signature").
* ``GuardedFile``: the file as HDF5 reads it through h5py's file-object driver, every
  collection that passes through a read checked before HDF5 sees the bytes (the first open's
  sandboxed child, which reads attributes but no string rows: the collections it meets are the
  attributes', a few).
* ``HeapReferences``: string rows' own references (16 bytes each in the contiguous column:
  length, collection address, object index), read without HDF5 and checked before HDF5
  follows them -- the collection they name is walked (once per reader) and must hold the named
  object with exactly the referenced length, or HDF5 would copy a different number of bytes
  than it allocated. A reader checks the rows a command reads, when it reads them.
"""

from __future__ import annotations

import io
import mmap
import os
import struct
from pathlib import Path
from typing import Any

import numpy as np

from kbpack.pack import format as F

SIGNATURE = b"GCOL\x01\x00\x00\x00"  # as written: "GCOL", version 1, three reserved zeros
MAGIC = SIGNATURE[:5]  # what HDF5 checks of a collection's header: "GCOL" and version 1
HEADER = 16  # signature, version, reserved, collection size (8 bytes)
OBJECT_HEADER = 16  # index (2), reference count (2), reserved (4), object size (8)


def collection_problem(view: memoryview | bytes, at: int) -> str | None:
    """What would make HDF5 stall or overrun walking the collection at file offset ``at``."""
    return walk_collection(view, at)[0]


def walk_collection(
    view: memoryview | bytes, at: int, origin: int = 0
) -> tuple[str | None, dict[int, int]]:
    """Walk the collection at ``view[at:]`` as HDF5 does: what would make HDF5 stall or overrun
    (None: nothing), and the objects met, index -> size. ``origin``: the file offset of
    ``view[0]`` (byte positions in the answer are file offsets)."""
    objects: dict[int, int] = {}
    if at + HEADER > len(view):
        return "its header runs past the end of the file", objects
    (size,) = struct.unpack_from("<Q", view, at + 8)
    if size < HEADER or at + size > len(view):
        return f"its size {size} runs past the end of the file", objects
    end = at + size
    p = at + HEADER
    unpack = struct.Struct("<HHIQ").unpack_from
    while p < end:
        if p + OBJECT_HEADER > end:
            return None, objects  # HDF5 takes a tail too small for an object header as free space
        index, _refs, _reserved, obj_size = unpack(view, p)
        if index == 0:  # the free space: its size counts its own header, and it ends the walk
            if obj_size < OBJECT_HEADER or p + obj_size != end:
                return f"free-space object at byte {origin + p} has size {obj_size}", objects
            return None, objects
        if index in objects:
            return f"object {index} appears twice (byte {origin + p})", objects
        objects[index] = obj_size
        need = OBJECT_HEADER + (obj_size + 7) // 8 * 8
        if p + need > end:
            return (
                f"object {index} at byte {origin + p} (size {obj_size}) runs past the collection",
                objects,
            )
        p += need
    return None, objects


def read_collection(fd: int, at: int, file_size: int) -> tuple[str | None, dict[int, int]]:
    """``walk_collection`` of the collection at file offset ``at`` of the open file ``fd``,
    read with ``pread`` (no mapping of the whole file: a sandboxed child's address space is
    limited). Its signature must be there: HDF5 checks ``GCOL`` and the version, not the three
    reserved bytes."""
    head = os.pread(fd, HEADER, at) if 0 <= at < file_size else b""
    if len(head) < HEADER:
        return "its header runs past the end of the file", {}
    if head[:5] != MAGIC:
        return "there is no collection there", {}
    (size,) = struct.unpack_from("<Q", head, 8)
    if size < HEADER or at + size > file_size:
        return f"its size {size} runs past the end of the file", {}
    data = os.pread(fd, size, at)
    if len(data) < size:
        return f"its size {size} runs past the end of the file", {}
    # (a walk in numpy, or over 8-byte words, measured slower than this one: 2-5 ms against
    # ~1-2 ms for a titles' collection of ~1,500 objects under load)
    return walk_collection(data, 0, origin=at)


def hdf5_would_walk(head: bytes | memoryview, at: int, file_size: int) -> bool:
    """Whether the bytes ``head`` (16 or more, from a match of ``MAGIC`` at file offset
    ``at``) start a collection HDF5 would walk if led there. HDF5 does not check the three
    reserved bytes after the version (a crafted collection with them set stalled HDF5 2.0.0
    as well); a writer writes them zero. A match with them set whose size runs past the end of
    the file is not one: HDF5 refuses that read itself, and such matches are what text or
    numbers holding the five bytes look like (their next bytes, read as a size, are huge)."""
    if bytes(head[5:8]) == b"\0\0\0" or len(head) < HEADER:
        return True
    (size,) = struct.unpack_from("<Q", head, 8)
    return at + size <= file_size


def malformed_collections(path: Path) -> list[str]:
    """One line per global heap collection of ``path`` that HDF5 must not walk."""
    problems = []
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size <= F.USERBLOCK_SIZE:
            return []
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            view = memoryview(m)
            try:
                at = m.find(MAGIC, F.USERBLOCK_SIZE)
                while at >= 0:
                    if hdf5_would_walk(view[at : at + HEADER], at, size):
                        why = collection_problem(view, at)
                        if why is not None:
                            problems.append(f"HDF5 global heap collection at byte {at}: {why}")
                    at = m.find(MAGIC, at + 1)
            finally:
                view.release()
    return problems


class GuardedFile(io.FileIO):
    """A pack opened for h5py's file-object driver (``h5py.File(GuardedFile(path))``): every
    global heap collection whose signature passes through a read HDF5 makes is walked
    (``walk_collection``) before HDF5 gets the bytes, and a malformed one is refused there
    (the read fails, and ``problems`` says why) instead of stalling or overrunning HDF5.

    HDF5 cannot walk a collection without reading its first bytes through the driver, so no
    collection HDF5 loads escapes the check; a signature split over two reads is seen at the
    second. Bytes inside a collection already found intact are its objects' data, not
    collections (an attribute's text may hold the signature's bytes)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__(path, "rb")
        self.size = os.fstat(self.fileno()).st_size
        self.problems: list[str] = []
        self.checked: dict[int, int] = {}  # intact collections met: offset -> size
        self.reads = 0

    def readinto(self, buffer: Any) -> int:
        at = self.tell()
        n = super().readinto(buffer) or 0
        self.reads += 1
        view = memoryview(buffer).cast("B")[:n]
        sig = MAGIC  # what HDF5 checks (the reserved bytes after it are not)
        # a signature that began in the bytes just before this read
        lead = os.pread(self.fileno(), len(sig) - 1, at - len(sig) + 1) if at >= len(sig) else b""
        joined = lead + bytes(view[: len(sig) - 1])
        found = [at - len(lead) + i for i in _find_all(joined, sig)]
        found += [at + i for i in _find_all(view, sig)]
        for where in found:
            self._check(where)
        if self.problems:
            raise OSError(f"HDF5 global heap collection at byte {self.problems[0]}")
        return n

    def read(self, size: int | None = -1, /) -> bytes:
        """h5py's driver reads with ``readinto``; a ``read`` goes through the same check."""
        if size is None or size < 0:
            size = max(0, self.size - self.tell())
        buffer = bytearray(size)
        return bytes(buffer[: self.readinto(buffer)])

    def _check(self, at: int) -> None:
        if at in self.checked or any(c < at < c + n for c, n in self.checked.items()):
            return
        if not hdf5_would_walk(os.pread(self.fileno(), HEADER, at), at, self.size):
            return
        why, _ = read_collection(self.fileno(), at, self.size)
        if why is None:
            (self.checked[at],) = struct.unpack("<Q", os.pread(self.fileno(), 8, at + 8))
        else:
            self.problems.append(f"{at}: {why}")


def _find_all(data: Any, needle: bytes) -> list[int]:
    out = []
    raw = bytes(data) if not isinstance(data, bytes) else data
    i = raw.find(needle)
    while i >= 0:
        out.append(i)
        i = raw.find(needle, i + 1)
    return out


# A string row as stored in its contiguous column: the sequence length, the collection's
# address (relative to the HDF5 base address: after the 64 KiB user block) and the object's index.
REFERENCE = np.dtype(
    {
        "names": ["length", "address", "index"],
        "formats": ["<u4", "<u8", "<u4"],
        "offsets": [0, 4, 12],
        "itemsize": 16,
    }
)


class HeapReferences:
    """String rows' global heap references, checked before HDF5 follows them.

    ``fd``: the open file HDF5 reads (the reader's held descriptor); ``base``: HDF5's base
    address (where the superblock is: the user block's size). A reference with address 0 is
    a null string, which HDF5 does not look up. Any other must name an intact collection
    (``walk_collection``) holding the named object with exactly the referenced length. Each
    collection is walked once per reader."""

    def __init__(self, fd: int, file_size: int, base: int) -> None:
        self.fd = fd
        self.file_size = file_size
        self.base = base
        # collection offset -> why it is malformed (or None), and its objects: index -> size
        self.walked: dict[int, tuple[str | None, dict[int, int]]] = {}
        self._tables: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def rows(self, offset: int, first: int, last: int) -> np.ndarray:
        """The references of rows ``first:last`` of a column whose data starts at ``offset``."""
        n = max(0, last - first)
        raw = os.pread(self.fd, 16 * n, offset + 16 * first) if n else b""
        if len(raw) != 16 * n:
            raise ValueError(f"rows {first}:{last} run past the end of the file")
        return np.frombuffer(raw, dtype=REFERENCE)

    def _walk(self, at: int) -> tuple[str | None, dict[int, int]]:
        if at not in self.walked:
            self.walked[at] = read_collection(self.fd, at, self.file_size)
        return self.walked[at]

    def _table(self, at: int) -> tuple[np.ndarray, np.ndarray]:
        """The collection's objects as arrays (indexes, sizes), for many references at once."""
        if at not in self._tables:
            objects = self._walk(at)[1]
            self._tables[at] = (
                np.fromiter(objects.keys(), dtype=np.int64, count=len(objects)),
                np.fromiter(objects.values(), dtype=np.uint64, count=len(objects)),
            )
        return self._tables[at]

    def _one(self, length: int, address: int, index: int) -> str | None:
        """Why HDF5 must not follow one reference (None: it may)."""
        if address == 0:
            return None
        at = address + self.base
        why, objects = self._walk(at)
        if why is not None:
            return f"HDF5 global heap collection at byte {at}: {why}"
        size = objects.get(index) if index else None
        if size is None:
            return f"names object {index}, which the collection at byte {at} lacks"
        if size != length:
            return f"says {length} bytes, object {index} at byte {at} holds {size}"
        return None

    def problem(self, refs: np.ndarray) -> tuple[int, str] | None:
        """``(position, why)`` of the first reference of ``refs`` HDF5 must not follow."""
        if len(refs) <= 16:  # a citation's rows: no arrays to build
            for i, (length, address, index) in enumerate(refs.tolist()):
                why = self._one(length, address, index)
                if why is not None:
                    return i, why
            return None
        address = refs["address"]
        live = np.flatnonzero(address != 0)
        if not len(live):
            return None
        collections, rank = np.unique(address[live], return_inverse=True)
        keys, sizes, broken = [], [], {}
        for r, a in enumerate(collections.tolist()):
            at = int(a) + self.base
            why = self._walk(at)[0]
            index, size = self._table(at)
            if why is not None:
                broken[r] = f"HDF5 global heap collection at byte {at}: {why}"
            keys.append(index + (r << 16))
            sizes.append(size)
        # one sorted table of (collection, object index) -> size for every reference at once
        table = np.concatenate(keys)
        order = np.argsort(table, kind="stable")
        table, table_size = table[order], np.concatenate(sizes)[order]
        index = refs["index"][live].astype(np.int64)
        valid = (index > 0) & (index < 1 << 16)
        want = np.where(valid, (rank.astype(np.int64) << 16) + index, -1)
        slot = np.minimum(np.searchsorted(table, want), max(0, len(table) - 1))
        found = valid & (table[slot] == want) if len(table) else np.zeros(len(live), bool)
        length = refs["length"][live].astype(np.uint64)
        fits = found & (table_size[slot] == length) if len(table) else found
        wrong = np.flatnonzero(~fits)
        if broken:
            wrong = np.union1d(wrong, np.flatnonzero(np.isin(rank, list(broken))))
        if not len(wrong):
            return None
        k = int(wrong[0])
        r = int(rank[k])
        where = int(collections[r]) + self.base
        if r in broken:
            return int(live[k]), broken[r]
        x, n = int(refs["index"][live[k]]), int(length[k])
        if not found[k]:
            return int(live[k]), f"names object {x}, which the collection at byte {where} lacks"
        held = int(table_size[slot[k]])
        return int(live[k]), f"says {n} bytes, object {x} at byte {where} holds {held}"


def string_column(dsid: Any, sizes: tuple[int, int], file_size: int) -> tuple[int, int] | str:
    """``(file offset of its data, rows)`` of a string column stored as kbpack writes it
    (contiguous, variable-length strings, 8-byte addresses: 16 bytes a row), whose references
    ``HeapReferences`` can read; else, in words, how it differs. ``sizes``: the file's
    ``(sizeof_addr, sizeof_size)`` (``get_sizes`` of its creation property list)."""
    from h5py import h5d, h5t

    tid = dsid.get_type()
    if tid.get_class() != h5t.STRING or not tid.is_variable_str():
        return "not variable-length strings"
    if tuple(sizes) != (8, 8):
        return f"HDF5 addresses of {sizes[0]} bytes"
    shape = dsid.shape
    if len(shape) != 1:
        return f"rank {len(shape)}"
    if dsid.get_create_plist().get_layout() != h5d.CONTIGUOUS:
        return "not contiguous"
    rows = int(shape[0])
    if not rows:
        return 0, 0
    offset = dsid.get_offset()
    if offset is None or int(dsid.get_storage_size()) != 16 * rows:
        return "its rows are not stored"
    if int(offset) + 16 * rows > file_size:
        return "its rows run past the end of the file"
    return int(offset), rows
