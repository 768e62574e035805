"""The HDF5 file of a pack being committed, written in the HDF5 child.

Its groups and attributes, and every dataset written from the writer's tables and spools in the
spec's order, each digested as written.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from kbpack.pack import format as F
from kbpack.pack.copies import RULE as COPIES_RULE
from kbpack.pack.copies import CopyGroups
from kbpack.pack.digest import (
    StreamDigest,
    attrs_digest,
    numeric_digest,
    row_digests,
    strings_digest,
)
from kbpack.pack.format import PIECE_RULE, PIECE_WEIGHT
from kbpack.pack.ivf import CODE_BLOCK, CodeSource, IvfIndex, ivf_attrs, ivf_datasets
from kbpack.pack.storage import create_dataset
from kbpack.pack.write_child import errors_reported_first
from kbpack.pack.write_spools import Spools
from kbpack.pack.write_tables import DOC_INT_TYPES, DOC_STR, DocumentTables, PostingsLike
from kbpack.version import __version__

BLOCK_ROWS = 65536


def set_attrs(obj: Any, attrs: Mapping[str, Any]) -> None:
    for k, v in attrs.items():
        obj.attrs[k] = v


def write_blocks(ds: Any, source: CodeSource) -> str:
    """Fill the new dataset ``ds`` from ``source`` a block of whole HDF5 chunks at a time; its
    digest (``numeric_digest`` of the whole)."""
    rows = ds.chunks[0] * max(1, CODE_BLOCK // ds.chunks[0])
    digest = StreamDigest()
    at = 0
    for block in source.blocks(rows):
        ds[at : at + len(block)] = block
        digest.numeric(block)
        at += len(block)
    return digest.hexdigest()


class ElementWriter:
    """Creates the datasets of one open HDF5 file, each with its kind/version/description
    attributes, and records every digest in ``elements`` (the manifest's)."""

    def __init__(self, h: Any, elements: dict[str, str]) -> None:
        self.h = h
        self.elements = elements
        # the row digests of the string columns that have them (spec §3.11), written last
        self.row_digested: dict[str, np.ndarray] = {}

    def describe(self, obj: Any, el: F.Element) -> None:
        attrs = {F.A_KIND: el.kind, F.A_VERSION: 1, F.A_DESCRIPTION: el.description}
        set_attrs(obj, attrs)
        self.elements[el.path + "@attrs"] = attrs_digest(attrs)

    def put(self, path: str, data: np.ndarray) -> None:
        el = F.ELEMENT_BY_PATH[path]
        ds = create_dataset(self.h, path, data=data)
        self.elements[path] = numeric_digest(data)
        self.describe(ds, el)

    def put_any(self, path: str, data: np.ndarray | CodeSource) -> None:
        """``put``, or ``put_blocks`` where the data comes in blocks (``ivf_datasets``)."""
        if isinstance(data, CodeSource):
            self.put_blocks(path, data)
        else:
            self.put(path, data)

    def put_blocks(self, path: str, source: CodeSource) -> None:
        """A dataset written from ``source`` (its ``shape``, ``dtype`` and ``blocks(rows)``) a
        block of whole HDF5 chunks at a time, digested as written: the same bytes as ``put``
        of the whole array, which is never held (the IVF codes: 3.6 GB at 10M chunks)."""
        ds = create_dataset(self.h, path, shape=source.shape, dtype=source.dtype)
        self.elements[path] = write_blocks(ds, source)
        self.describe(ds, F.ELEMENT_BY_PATH[path])

    def put_str(self, path: str, items: list[str]) -> None:
        el = F.ELEMENT_BY_PATH[path]
        ds = create_dataset(self.h, path, data=items)
        self.elements[path] = strings_digest(items)
        self.describe(ds, el)
        if path in F.ROW_DIGEST_OF:  # written last, in the spec's order (§3.11)
            self.row_digested[F.ROW_DIGEST_OF[path]] = row_digests(items)

    def text(self, spool: Path, text_lens: list[int]) -> None:
        """``/documents/text`` from the text spool, one document at a time."""
        n = len(text_lens)
        ds = create_dataset(self.h, F.DOC_TEXT, shape=(n,))
        digest = StreamDigest()
        with open(spool, "rb") as f:
            for i, length in enumerate(text_lens):
                raw = f.read(length)
                digest.strings([raw])
                ds[i] = raw.decode("utf-8")
        self.elements[F.DOC_TEXT] = digest.hexdigest()
        self.describe(ds, F.ELEMENT_BY_PATH[F.DOC_TEXT])

    def rows(self, path: str, spool: Path, n: int, dims: int) -> None:
        """A float16 (n, dims) dataset from its spool file, in blocks, digested as written."""
        ds = create_dataset(self.h, path, shape=(n, dims), dtype="<f2")
        digest = StreamDigest()
        row_bytes = dims * 2
        with open(spool, "rb") as f:
            for at in range(0, n, BLOCK_ROWS):
                rows = min(BLOCK_ROWS, n - at)
                block = np.frombuffer(f.read(rows * row_bytes), dtype="<f2").reshape(rows, dims)
                ds[at : at + rows] = block
                digest.numeric(block)
        self.elements[path] = digest.hexdigest()
        self.describe(ds, F.ELEMENT_BY_PATH[path])

    def gguf(self, gguf: Path) -> None:
        """``/model/gguf``: the model file's bytes, in blocks."""
        size = gguf.stat().st_size
        ds = create_dataset(self.h, F.MODEL_GGUF, shape=(size,), dtype="u1")
        digest = StreamDigest()
        block = 16 * 2**20
        with open(gguf, "rb") as f:
            for at in range(0, size, block):
                data = np.frombuffer(f.read(block), dtype="u1")
                ds[at : at + data.size] = data
                digest.numeric(data)
        self.elements[F.MODEL_GGUF] = digest.hexdigest()
        self.describe(ds, F.ELEMENT_BY_PATH[F.MODEL_GGUF])


class PackFile:
    """Writes the HDF5 file ``tmp`` (the pack less its manifest) from what a writer collected;
    ``write`` returns the manifest's element digests and counts."""

    def __init__(
        self,
        tmp: Path,
        *,
        model: dict[str, Any] | None,
        dims: int | None,
        gguf: Path | None,
        chunking: dict[str, Any] | None,
        pieces: bool,
        created: str,
        tables: DocumentTables,
        spools: Spools,
        postings: PostingsLike,
        search: dict[str, Any],
        copies: CopyGroups | None,
        ivf: IvfIndex | None,
    ) -> None:
        self.tmp = tmp
        self.model, self.dims, self.gguf = model, dims, gguf
        self.chunking, self.pieces, self.created = chunking, pieces, created
        self.tables, self.spools, self.postings = tables, spools, postings
        self.search, self.copies, self.ivf = search, copies, ivf

    def write(self) -> tuple[dict[str, str], dict[str, int]]:
        import h5py

        from kbpack.pack.bm25_store import TermLookup, dense_rows

        elements: dict[str, str] = {}
        postings, t = self.postings, self.tables
        lookup = TermLookup.from_terms(postings.terms)
        # the common terms' dense tf rows (spec §3.7.1), derived from the postings
        dense = dense_rows(postings.indptr, postings.chunk, postings.tf, t.n_chunks)
        links = t.resolved_links()
        counts = self.counts(lookup, dense, links)
        with (
            h5py.File(self.tmp, "w", userblock_size=F.USERBLOCK_SIZE, libver=("v110", "v110")) as h,
            errors_reported_first(),
        ):
            root_attrs = {
                F.A_KIND: "kbpack",
                F.A_VERSION: F.FORMAT_VERSION,
                F.A_DESCRIPTION: "kbpack knowledge pack: documents, chunks, vectors, BM25; see spec/FORMAT.md",
                F.R_FORMAT_VERSION: F.FORMAT_VERSION,
                F.R_KBPACK_VERSION: __version__,
                F.R_PIPELINE_VERSION: F.PIPELINE_VERSION,
                F.R_CREATED: self.created,
                F.R_VECTORS: "dense" if self.dims else "none",
            }
            set_attrs(h, root_attrs)
            elements["/@attrs"] = attrs_digest(root_attrs)
            for el in F.ELEMENTS:
                attrs = self.group_attrs(el, links is not None)
                if attrs is None:
                    continue
                g = h.create_group(el.path)
                set_attrs(g, attrs)
                elements[el.path + "@attrs"] = attrs_digest(attrs)
            self.datasets(ElementWriter(h, elements), lookup, dense, links)
            # Write everything out while errors still raise: h5py swallows the errors of
            # writes that happen when a dataset is deallocated ("Exception ignored in
            # __dealloc__"), and its close after such a failure is where HDF5 crashed.
            h.flush()
        return elements, counts

    def counts(
        self, lookup: Any, dense: tuple[np.ndarray, np.ndarray], links: dict[str, Any] | None
    ) -> dict[str, int]:
        """The manifest's counts."""
        t, postings = self.tables, self.postings
        statuses = t.docs["status"]
        n_terms = len(postings.terms)
        model_bytes = self.gguf.stat().st_size if (self.gguf and self.model) else 0
        counts = {
            "documents": len(statuses),
            "documents_ok": statuses.count("ok"),
            "documents_failed": statuses.count("failed"),
            "documents_skipped": statuses.count("skipped"),
            "sections": t.n_sections,
            "pages": sum(len(p) for p in t.page["number"].parts),
            "chunks": t.n_chunks,
            "vectors": t.n_vectors,
            "terms": n_terms,
            "terms_plus_one": n_terms + 1,
            "terms_bytes": int(lookup.blob.size),
            "postings": int(postings.chunk.size),
            "model_bytes": model_bytes,
        }
        if self.pieces:
            counts["pieces"] = t.n_pieces
        counts["dense_terms"] = int(dense[0].size)
        counts["dense_tf"] = int(dense[1].size)
        if self.copies is not None:
            counts["copies"] = int(self.copies.chunk.size)
        if links is not None:
            counts["links"] = len(links[F.LINK_ANCHOR])
        if self.ivf is not None:
            counts["ivf_lists"] = self.ivf.lists
        return counts

    def group_attrs(self, el: F.Element, links: bool) -> dict[str, Any] | None:
        """The attributes of group ``el``; None for a dataset, or a group this pack lacks."""
        if el.dtype:
            return None
        if el.path in (F.VECTORS, F.MODEL) and not self.dims:
            return None
        if el.path == F.PIECES and not self.pieces:
            return None
        if el.path == F.COPIES and self.copies is None:
            return None
        if el.path == F.LINKS and not links:
            return None
        if el.path == F.IVF and self.ivf is None:
            return None
        attrs = {F.A_KIND: el.kind, F.A_VERSION: 1, F.A_DESCRIPTION: el.description}
        if el.path == F.MODEL and self.model:
            attrs.update({k: self.model[k] for k in F.MODEL_ATTRS})
            attrs.update({k: str(self.model.get(k, "")) for k in F.MODEL_PREFIX_ATTRS})
        elif el.path == F.BM25:
            attrs.update({F.BM25_K1: 1.2, F.BM25_B: 0.75, F.BM25_TOKENIZER: F.TOKENIZER_ID})
            name = getattr(self.postings, "analyzer", None)
            if name:  # absent = plain, so plain packs stay byte-identical
                attrs[F.BM25_ANALYZER] = name
            fields = getattr(self.postings, "fields", None)
            if fields:  # absent = content only (spec 3.7)
                attrs[F.BM25_FIELDS] = fields
        elif el.path == F.CHUNKS:
            attrs[F.CHUNK_HEADER_RULE] = F.EMBEDDED_TEXT_RULE
            if self.chunking is not None:
                attrs[F.CHUNKING] = json.dumps(self.chunking, sort_keys=True)
        elif el.path == F.SEARCH:
            attrs.update(self.search)
        elif el.path == F.PIECES:
            attrs.update(
                {
                    F.PIECE_RULE_ATTR: PIECE_RULE,
                    F.PIECE_WEIGHT_ATTR: PIECE_WEIGHT,
                    "dims": self.dims,
                    "normalisation": "l2",
                    "stored_dtype": "float16",
                }
            )
        elif el.path == F.COPIES:
            attrs[F.COPIES_RULE_ATTR] = COPIES_RULE
        elif el.path == F.IVF and self.ivf is not None:
            attrs.update(ivf_attrs(self.ivf))
        elif el.path == F.VECTORS:
            attrs.update({"dims": self.dims, "normalisation": "l2", "stored_dtype": "float16"})
        return attrs

    def datasets(
        self,
        w: ElementWriter,
        lookup: Any,
        dense: tuple[np.ndarray, np.ndarray],
        links: dict[str, Any] | None,
    ) -> None:
        """Every dataset, in the spec's order (the golden packs' bytes depend on it)."""
        t, postings, d = self.tables, self.postings, self.tables.docs
        for key in DOC_STR:
            if key != "text":
                w.put_str(f"{F.DOCUMENTS}/{key}", d[key])
        for key, dtype in DOC_INT_TYPES.items():
            w.put(f"{F.DOCUMENTS}/{key}", np.asarray(d[key], dtype=dtype))
        w.text(self.spools.text, t.text_lens)
        for key, col in t.sec.items():
            w.put(f"{F.SECTIONS}/{key}", col.array())
        w.put_str(F.SEC_TITLE, t.sec_titles)
        for key, col in t.page.items():
            w.put(f"{F.PAGES}/{key}", col.array())
        for key, col in t.chunk.items():
            w.put(f"{F.CHUNKS}/{key}", col.array())
        w.put(F.BM25_TERMS_BLOB, np.asarray(lookup.blob, dtype="u1"))
        w.put(F.BM25_TERMS_OFFSETS, np.asarray(lookup.offsets, dtype="<i8"))
        w.put(F.BM25_INDPTR, np.asarray(postings.indptr, dtype="<i8"))
        w.put(F.BM25_CHUNK, np.asarray(postings.chunk, dtype="<i4"))
        w.put(F.BM25_TF, np.asarray(postings.tf, dtype="<i4"))
        w.put(F.BM25_DOC_LEN, np.asarray(postings.doc_len, dtype="<i4"))
        w.put(F.BM25_DENSE_TERMS, np.asarray(dense[0], dtype="<i4"))
        w.put(F.BM25_DENSE_TF, np.asarray(dense[1], dtype="u1"))
        if self.dims:
            w.rows(F.VEC_DATA, self.spools.vectors, t.n_vectors, self.dims)
            if self.gguf and self.model:
                w.gguf(self.gguf)
        if self.pieces:
            assert self.dims
            for key, col in t.piece.items():
                w.put(f"{F.PIECES}/{key}", col.array())
            w.rows(F.PIECE_DATA, self.spools.pieces, t.n_pieces, self.dims)
        if self.copies is not None:
            w.put(F.COPY_GROUP, self.copies.group)
            w.put(F.COPY_CHUNK, self.copies.chunk)
            w.put(F.COPY_EXACT, self.copies.exact)
        for path in F.ROW_DIGEST_OF.values():
            w.put(path, w.row_digested[path])
        if links is not None:
            for path, values in links.items():
                if isinstance(values, np.ndarray):
                    w.put(path, values)
                else:
                    w.put_str(path, values)
        if self.ivf is not None:  # centroids, lists, and the int8 codes (spec §3.13)
            for path, data in ivf_datasets(self.ivf):
                w.put_any(path, data)  # the codes quantised as written, a block at a time
