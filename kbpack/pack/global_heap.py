"""HDF5 global heap collections, checked before HDF5 reads one.

Variable-length strings (every string column and string attribute of a pack) live in global
heap collections ("GCOL"), outside any checksum. HDF5 2.0.0 walks a collection's objects
trusting their sizes: a free-space object of size 0 -- a zeroed sector in a collection's tail
is enough -- makes it loop forever on the first string read (found by bench/fuzz.py), and a
huge size moves its cursor past the buffer. This module walks every collection of the file the
way HDF5 does (HDF5 file format spec, "Global Heap"), but refuses what would stall or overrun
it, so that the caller can say "damaged" in one line instead of hanging.

Collections are found by their 8-byte header (``GCOL``, version 1, three zero bytes) in one
pass over the file. A collection whose signature is damaged is not found here, and HDF5 refuses
it itself ("bad global heap collection signature").
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

from kbpack.pack import format as F

SIGNATURE = b"GCOL\x01\x00\x00\x00"
HEADER = 16  # signature, version, reserved, collection size (8 bytes)
OBJECT_HEADER = 16  # index (2), reference count (2), reserved (4), object size (8)


def collection_problem(view: memoryview | bytes, at: int) -> str | None:
    """What would make HDF5 stall or overrun walking the collection at file offset ``at``."""
    if at + HEADER > len(view):
        return "its header runs past the end of the file"
    (size,) = struct.unpack_from("<Q", view, at + 8)
    if size < HEADER or at + size > len(view):
        return f"its size {size} runs past the end of the file"
    end = at + size
    p = at + HEADER
    seen: set[int] = set()
    while p < end:
        if p + OBJECT_HEADER > end:
            return None  # HDF5 takes a tail too small for an object header as free space
        index, _refs, _reserved, obj_size = struct.unpack_from("<HHIQ", view, p)
        if index == 0:  # the free space: its size counts its own header, and it ends the walk
            if obj_size < OBJECT_HEADER or p + obj_size != end:
                return f"free-space object at byte {p} has size {obj_size}"
            return None
        if index in seen:
            return f"object {index} appears twice (byte {p})"
        seen.add(index)
        need = OBJECT_HEADER + (obj_size + 7) // 8 * 8
        if p + need > end:
            return f"object {index} at byte {p} (size {obj_size}) runs past the collection"
        p += need
    return None


def malformed_collections(path: Path) -> list[str]:
    """One line per global heap collection of ``path`` that HDF5 must not walk."""
    problems = []
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size <= F.USERBLOCK_SIZE:
            return []
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            view = memoryview(m)
            try:
                at = m.find(SIGNATURE, F.USERBLOCK_SIZE)
                while at >= 0:
                    why = collection_problem(view, at)
                    if why is not None:
                        problems.append(f"HDF5 global heap collection at byte {at}: {why}")
                    at = m.find(SIGNATURE, at + 1)
            finally:
                view.release()
    return problems
