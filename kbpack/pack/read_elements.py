"""Reads of the vectors and the optional elements of a pack.

Chunk and piece vectors, the IVF index, copy groups, links, BM25's dense rows and the embedded
model.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from kbpack.pack import format as F
from kbpack.pack.ivf import CodeRows, IvfIndex, check_codes, check_index
from kbpack.pack.read_checked import CheckedDataset, DamagedDataError, hdf5_errors
from kbpack.pack.read_columns import ColumnReader
from kbpack.pack.read_meta import PackSettings
from kbpack.pack.read_part import OpenFile, ReadPart
from kbpack.pack.read_strings import StringReader
from kbpack.pack.vector_scan import StoredRows


class ElementReader(ReadPart):
    """Reads the vectors (in memory as float32, or as stored for the dense scan) and the
    elements a pack may lack, each checked as verify checks it where a search relies on it."""

    def __init__(
        self, file: OpenFile, columns: ColumnReader, strings: StringReader, settings: PackSettings
    ) -> None:
        super().__init__(file)
        self.columns = columns
        self.strings = strings
        self.settings = settings
        self._stored: dict[str, StoredRows] = {}

    def close(self) -> None:
        """Close the stored rows handed out for the dense scan."""
        for rows in self._stored.values():
            rows.close()
        self._stored.clear()
        ivf = self._cache.get("ivf")
        if ivf is not None and isinstance(ivf.codes, CodeRows):
            ivf.codes.close()  # its map of the file

    def bm25_dense(self) -> tuple[np.ndarray, CheckedDataset] | None:
        """``/bm25/dense_terms`` (read whole, digest-checked) and ``/bm25/dense_tf`` (sliced per
        query term), spec §3.7.1; None when the pack lacks them (packs written before them)."""
        with hdf5_errors(self.where):
            present = F.BM25_DENSE_TERMS in self.h5 and F.BM25_DENSE_TF in self.h5
        if not present:
            return None
        rows = self.columns.column(F.BM25_DENSE_TERMS).astype(np.int64)
        tf = self.columns.dataset(F.BM25_DENSE_TF)
        n = int(self.columns.manifest.counts.get("chunks", 0))
        if len(rows) > 1 and bool((np.diff(rows) <= 0).any()):
            raise DamagedDataError(self.where, F.BM25_DENSE_TERMS, "rows are not ascending")
        if len(tf) != len(rows) * n:
            raise DamagedDataError(
                self.where, F.BM25_DENSE_TF, f"{len(tf)} rows, not {len(rows)} terms x {n} chunks"
            )
        return rows, tf

    def vectors(self) -> np.ndarray:
        """All vectors as float32 (searched in memory; float16 matmul is slow in numpy)."""
        return self._float32(F.VEC_DATA)

    def _float32(self, path: str) -> np.ndarray:
        """A float16 matrix read in blocks into float32, once, and cached."""
        key = f"{path}:f32"
        if key not in self._cache:
            with hdf5_errors(self.where, path):
                ds = self.h5[path]
                out = np.empty(ds.shape, dtype=np.float32)
                step = 65536
                for at in range(0, ds.shape[0], step):
                    out[at : at + step] = ds[at : at + step]
            self._cache[key] = out
        arr: np.ndarray = self._cache[key]
        return arr

    def stored_rows(self, path: str) -> StoredRows:
        """``/vectors/data`` or ``/pieces/data`` as stored (float16), for the dense scan: rows
        are scanned where they lie, never converted as a whole (``kbpack/pack/vector_scan.py``)."""
        if path not in self._stored:
            checked = self.columns.dataset(path)
            with hdf5_errors(self.where, path):
                self._stored[path] = StoredRows(checked, self.h5[path], self.where)
        return self._stored[path]

    @property
    def has_pieces(self) -> bool:
        """Whether the pack holds the sentence-piece vector level (``build --pieces``)."""
        with hdf5_errors(self.where):
            return self.settings.has_vectors and F.PIECE_DATA in self.h5

    def piece_vectors(self) -> np.ndarray:
        """All piece vectors as float32 (searched in memory beside the chunk vectors)."""
        return self._float32(F.PIECE_DATA)

    @property
    def has_copies(self) -> bool:
        """Whether the pack stores groups of copies (``/copies``; packs of kbpack 0.2.0 do not)."""
        with hdf5_errors(self.where):
            return F.COPY_CHUNK in self.h5

    def copy_groups(self) -> np.ndarray | None:
        """The copy group of every chunk row (int64, -1 for a chunk with no copy), or None in a
        pack without ``/copies``."""
        key = "copy_groups"  # None cached too: a result asks per chunk, HDF5's lookup costs
        if key not in self._cache and not self.has_copies:
            self._cache[key] = None
        if key not in self._cache:
            n = len(self.columns.dataset(F.CHUNK_DOCUMENT))  # its length: no need to read it
            out = np.full(n, -1, dtype=np.int64)
            chunk = self.columns.column(F.COPY_CHUNK).astype(np.int64)
            ok = (chunk >= 0) & (chunk < n)  # verify reports the rest; search must not crash
            out[chunk[ok]] = self.columns.column(F.COPY_GROUP)[ok]
            self._cache[key] = out
        arr: np.ndarray | None = self._cache[key]
        return arr

    @property
    def has_links(self) -> bool:
        """Whether the pack stores links between its documents (``/links``, spec §3.12)."""
        with hdf5_errors(self.where):
            return F.LINK_DOCUMENT in self.h5

    def links_of(self, doc: int) -> list[tuple[int, int, int, int, str]]:
        """The links of document ``doc``, in text order: (from, to, target document row,
        offset in the target's text, the href's fragment); none in a pack without ``/links``.
        Every column is read whole and checked against its digest."""
        if not self.has_links:
            return []
        document = self.columns.column(F.LINK_DOCUMENT)
        lo, hi = (int(x) for x in np.searchsorted(document, [doc, doc + 1]))
        start, end = self.columns.column(F.LINK_FROM), self.columns.column(F.LINK_TO)
        target, offset = (
            self.columns.column(F.LINK_TARGET),
            self.columns.column(F.LINK_TARGET_OFFSET),
        )
        anchor = self.strings.strings(F.LINK_ANCHOR)
        return [
            (int(start[i]), int(end[i]), int(target[i]), int(offset[i]), anchor[i])
            for i in range(lo, hi)
        ]

    # -- the approximate index (spec §3.13; kbpack/pack/ivf.py, kbpack/search/ivf.py) ---------
    @property
    def has_ivf(self) -> bool:
        """Whether the pack holds an IVF index (``/ivf``: ``build --ivf``, ``kbpack index``)."""
        with hdf5_errors(self.where):
            return self.settings.has_vectors and F.IVF in self.h5

    def ivf_index(self) -> IvfIndex | None:
        """The IVF index, its datasets read whole (digest-checked) and checked as verify checks
        them (``check_index``: every chunk in exactly one list); None in a pack without."""
        if "ivf" not in self._cache:
            index = None
            if self.has_ivf:
                centroids, offsets, chunks = (self.columns.column(p) for p in F.IVF_DATASETS)
                dims = self.columns.dataset(F.VEC_DATA).shape[1:]
                n = int(self.columns.manifest.counts.get("chunks", 0))
                why = check_index(centroids, offsets, chunks, n, int(dims[0]) if dims else -1)
                if why is not None:
                    raise DamagedDataError(self.where, F.IVF, why)
                index = IvfIndex(centroids, offsets, chunks, *self._ivf_codes(n, int(dims[0])))
            self._cache["ivf"] = index
        out: IvfIndex | None = self._cache["ivf"]
        return out

    def _ivf_codes(self, n: int, dims: int) -> tuple[CodeRows | None, np.ndarray | None]:
        """``/ivf/codes`` mapped in place and its scale (read whole), checked as verify checks
        their shapes; (None, None) in an index without codes (spec §3.13: they are optional)."""
        with hdf5_errors(self.where):
            if not all(p in self.h5 for p in F.IVF_CODE_DATASETS):
                return None, None
        scale = self.columns.column(F.IVF_CODE_SCALE)
        codes_ds = self.columns.dataset(F.IVF_CODES)
        why = check_codes(tuple(codes_ds.shape), scale, n, dims)
        if why is not None:
            raise DamagedDataError(self.where, F.IVF, why)
        with hdf5_errors(self.where, F.IVF_CODES):
            codes = CodeRows(codes_ds, self.h5[F.IVF_CODES], str(self.path))
        return codes, scale.astype(np.float32)

    def write_gguf(self, out: Path) -> None:
        """Copy the embedded GGUF model out of the pack (llama.cpp needs a file path)."""
        with hdf5_errors(self.where, F.MODEL_GGUF):
            ds = self.h5[F.MODEL_GGUF]
            tmp = out.with_name(out.name + f".tmp-{os.getpid()}")
            with open(tmp, "wb") as f:
                step = 16 * 2**20
                for at in range(0, ds.shape[0], step):
                    f.write(ds[at : at + step].tobytes())
            os.replace(tmp, out)
