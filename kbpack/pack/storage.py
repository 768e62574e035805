"""How every dataset of a pack is laid out on disk (format 2, spec/FORMAT.md §1.1).

One helper, ``create_dataset``, is used by every writer so that no dataset escapes the rules:

* every dataset is **chunked with the Fletcher-32 checksum filter**: HDF5 checks it on every
  read (kbpack's, h5dump's, anyone's), so a damaged byte of data becomes a read error instead
  of a wrong citation;
* integer and byte columns (postings, offsets, the vocabulary) also go through **shuffle +
  deflate**: postings are small ascending integers whose high bytes are mostly zero, so they
  shrink several times (bench/size.py); float vectors (random mantissas: deflate saves almost
  nothing and costs a decompression on every dense scan), the embedded GGUF (already dense
  float16 weights) and the common terms' dense tf rows (``/bm25/dense_tf``: a query reads a
  whole row per common term, and inflating it cost ~20x the plain read, bench/RESULTS.md) are
  only checksummed; so are the four BM25 columns every query reads whole before its postings
  (the vocabulary's ``terms_blob`` and ``terms_offsets``, ``indptr``, ``doc_len``): inflating
  them was a quarter of a process's first BM25 query at 100k chunks (~5 of ~19 ms CPU), for
  ~1% of the pack's size (spec §1.1 lets them be either: packs written before are deflated);
* the first dimension is unlimited, because HDF5 cannot chunk a fixed zero-length dimension and
  packs do have empty columns (no pages, no failed documents).

Variable-length string columns stay contiguous and unfiltered, as in format 1: HDF5 refuses
Fletcher-32 on them ("not suitable for filters"), and their bytes live in the global heap where
no filter reaches anyway. ``PackReader`` checks them against their digests when it reads them
(the canonical text against ``text_sha256``, other columns against the manifest).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kbpack.pack import format as F

CHUNK_BYTES = 64 * 1024  # per HDF5 chunk: one term's postings or one vector row read decompresses
#   at most this much, and the B-tree stays small (1M float16 vectors of 384 dims: 12k chunks)
# The postings (chunk ids, tf): a process's first query reads each rare term's slice, and HDF5
# inflates the whole chunk holding it; 4,096 rows instead of 16,384. Cold query (fresh reader,
# synthetic packs, 40 questions x 3, interleaved, 2026-12-02, load ~3.9): 7.87 -> 6.01 ms at
# 10k chunks, 18.8 -> 18.4 at 100k (8 KiB: 5.82 / 19.8, the chunk index grows); +0.4% pack size.
POSTINGS_CHUNK_BYTES = 16 * 1024
VECTOR_CHUNK_BYTES = 256 * 1024  # vectors are scanned whole; larger chunks cost less per byte
DEFLATE_LEVEL = 4  # postings + offsets of 100k chunks (68.6 MB raw): 11.9 MB at level 1, 11.2 at
#   4, 10.95 at 9, which took 6x level 4's time to write

# Elements stored checksummed but not compressed (see the module docstring for why).
UNCOMPRESSED = frozenset(
    {
        F.VEC_DATA,
        F.PIECE_DATA,
        F.MODEL_GGUF,
        F.BM25_DENSE_TF,
        F.IVF_CODES,  # scanned in place by the approximate search, as the vectors (spec §1.1)
        # read whole by every query (spec §1.1: MAY be compressed; kbpack writes them plain)
        F.BM25_TERMS_BLOB,
        F.BM25_TERMS_OFFSETS,
        F.BM25_INDPTR,
        F.BM25_DOC_LEN,
    }
)

# Elements a format-2 pack may hold with either pipeline (spec §1.1): packs written before
# 2026-12-02 have them shuffled and deflated, later ones plain (the readers' check of the
# pipeline, structure.py, accepts both).
EITHER_WAY = frozenset({F.BM25_TERMS_BLOB, F.BM25_TERMS_OFFSETS, F.BM25_INDPTR, F.BM25_DOC_LEN})


def checksummed(path: str) -> bool:
    """Whether format 2 stores ``path`` chunked with Fletcher-32 (every non-string dataset)."""
    return F.ELEMENT_BY_PATH[path].dtype not in ("", "str")


def compressed(path: str) -> bool:
    """Whether format 2 stores ``path`` with shuffle + deflate (integer and byte columns)."""
    return checksummed(path) and path not in UNCOMPRESSED


def chunk_shape(path: str, shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """Chunk dimensions for a dataset of ``shape``: whole rows, about ``CHUNK_BYTES`` each."""
    row_bytes = max(1, itemsize * int(np.prod(shape[1:], dtype=np.int64)))
    target = VECTOR_CHUNK_BYTES if path in (F.VEC_DATA, F.PIECE_DATA, F.IVF_CODES) else CHUNK_BYTES
    if path in (F.BM25_CHUNK, F.BM25_TF):
        target = POSTINGS_CHUNK_BYTES
    rows = max(1, target // row_bytes)
    if shape[0]:
        rows = min(rows, shape[0])  # a small column is one chunk, not a mostly empty one
    return (rows, *shape[1:])


def create_dataset(
    h: Any,
    path: str,
    *,
    data: np.ndarray | list[str] | None = None,
    shape: tuple[int, ...] | None = None,
    dtype: Any = None,
) -> Any:
    """Create the element ``path`` in the open HDF5 file ``h`` with format 2's storage.

    Give ``data`` (written at once) or ``shape`` and ``dtype`` (filled later by slices).
    """
    import h5py

    if not checksummed(path):  # a string column: contiguous, see the module docstring
        dtype = h5py.string_dtype("utf-8")
        if data is not None:
            return h.create_dataset(path, data=data, dtype=dtype)
        return h.create_dataset(path, shape=shape, dtype=dtype)
    if data is not None:
        arr = np.asarray(data)
        dtype, shape = arr.dtype, arr.shape
    assert shape is not None and dtype is not None, "give data, or shape and dtype"
    itemsize = np.dtype(dtype).itemsize
    options: dict[str, Any] = {"fletcher32": True}
    if compressed(path):
        options.update(shuffle=True, compression="gzip", compression_opts=DEFLATE_LEVEL)
    return h.create_dataset(
        path,
        shape=shape,
        dtype=dtype,
        data=data,
        chunks=chunk_shape(path, shape, itemsize),
        maxshape=(None, *shape[1:]),
        **options,
    )


def data_spans(ds: Any) -> list[tuple[int, int]]:
    """``(file offset, bytes)`` of each stored piece of ``ds``'s raw data: one span for a
    contiguous dataset, one per written chunk otherwise (for damage tests and bench/flips.py)."""
    if ds.chunks is None:
        offset = ds.id.get_offset()
        return [] if offset is None else [(int(offset), int(ds.id.get_storage_size()))]
    spans = []
    for i in range(ds.id.get_num_chunks()):
        info = ds.id.get_chunk_info(i)
        spans.append((int(info.byte_offset), int(info.size)))
    return spans


__all__ = [
    "CHUNK_BYTES",
    "DEFLATE_LEVEL",
    "EITHER_WAY",
    "POSTINGS_CHUNK_BYTES",
    "checksummed",
    "chunk_shape",
    "compressed",
    "create_dataset",
    "data_spans",
]
