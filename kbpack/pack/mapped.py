"""A chunked HDF5 dataset of rows read where it lies: the file mapped, one view per HDF5 chunk."""

from __future__ import annotations

import mmap
from typing import Any

import numpy as np

from kbpack.pack.structure import FLETCHER32  # a checksum after the bytes: they stay values


def map_chunks(
    ds: Any, path: str, dtype: np.dtype[Any], shape: tuple[int, ...]
) -> tuple[mmap.mmap, list[tuple[int, np.ndarray]]] | None:
    """The map of ``path`` and (first row, rows view) of every HDF5 chunk of the 2-D dataset
    ``ds``, or None where the layout does not allow reading the stored bytes as the values: a
    filter other than Fletcher-32, rows split across chunks, a chunk never written (it reads as
    the fill value, which is not in the file), a chunk past the file's end, or a first or last
    chunk whose bytes differ from what HDF5 reads (compared bit for bit, NaNs included)."""
    if len(shape) != 2 or shape[0] == 0 or ds.dtype != dtype or ds.chunks is None:
        return None
    n, dims = shape
    if ds.chunks[1:] != (dims,):
        return None
    dcpl = ds.id.get_create_plist()
    if [dcpl.get_filter(i)[0] for i in range(dcpl.get_nfilters())] not in ([], [FLETCHER32]):
        return None
    extents: list[tuple[int, int]] = []
    ds.id.chunk_iter(lambda c: extents.append((int(c.chunk_offset[0]), int(c.byte_offset))))
    extents.sort()
    rows_per = int(ds.chunks[0])
    if [r for r, _ in extents] != list(range(0, n, rows_per)):
        return None
    with open(path, "rb") as f:
        the_map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    flat = np.frombuffer(the_map, dtype=np.uint8)
    row_bytes = dims * dtype.itemsize
    blocks = []
    for first, offset in extents:
        m = min(rows_per, n - first)
        if offset + m * row_bytes > flat.size:
            return None
        blocks.append((first, flat[offset : offset + m * row_bytes].view(dtype).reshape(m, dims)))
    bits = np.dtype(f"u{dtype.itemsize}")
    for first, view in (blocks[0], blocks[-1]):
        if not np.array_equal(
            np.asarray(ds[first : first + len(view)]).view(bits), view.view(bits)
        ):
            return None
    return the_map, blocks
