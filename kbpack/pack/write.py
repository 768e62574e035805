"""The atomic pack writer.

Documents stream in one at a time; their canonical text and vectors go to spool files beside
the output, everything else (a few integers per section, page and chunk) stays in memory. At
``commit`` every dataset is written contiguous in its final size, the HDF5 file is closed, the
bytes are hashed, the manifest is written into the user block, and the temp file is fsynced and
``os.replace``d onto the output path. Until then the output path is untouched: a killed build
leaves at most a hidden ``.NAME.tmp-*`` file beside it, never a partial pack.

The writer is a small state machine (open -> adding -> committed | aborted) and refuses calls
out of order.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from kbpack.errors import KbpackError
from kbpack.pack import format as F
from kbpack.pack.copies import RULE as COPIES_RULE
from kbpack.pack.copies import CopyFinder, CopyGroups
from kbpack.pack.digest import (
    StreamDigest,
    attrs_digest,
    numeric_digest,
    row_digests,
    strings_digest,
)
from kbpack.pack.format import PIECE_RULE, PIECE_WEIGHT
from kbpack.pack.ivf import IvfIndex, ivf_attrs, ivf_datasets
from kbpack.pack.ivf import build_index as build_ivf
from kbpack.pack.ivf import wanted as ivf_wanted
from kbpack.pack.manifest import Manifest, encode_header, hash_hdf5_bytes, write_header
from kbpack.pack.preflight import remember_parsed
from kbpack.pack.storage import create_dataset
from kbpack.pack.tempfiles import remove_stale_temp_files, temp_path_for
from kbpack.pack.verified import remember_written
from kbpack.pack.write_child import (
    FULL,
    TOO_LARGE,
    ChildFailed,
    error_number,
    errors_reported_first,
    free_bytes,
    no_space_error,
    run_in_child,
    write_failure,
)
from kbpack.runtime import interrupt
from kbpack.text.document import Document
from kbpack.version import __version__

BLOCK_ROWS = 65536


# Read-only members (properties), so that frozen dataclasses such as chunk.Chunk and
# pieces.Piece satisfy them: a plain ``x: int`` in a Protocol demands a settable attribute.
class ChunkLike(Protocol):
    @property
    def section(self) -> int: ...
    @property
    def start(self) -> int: ...
    @property
    def end(self) -> int: ...
    @property
    def page(self) -> int | None: ...
    @property
    def tokens(self) -> int: ...


class PieceLike(Protocol):
    @property
    def chunk(self) -> int: ...  # index into the document's chunks
    @property
    def start(self) -> int: ...
    @property
    def end(self) -> int: ...


class PostingsLike(Protocol):
    terms: list[str]
    indptr: np.ndarray
    chunk: np.ndarray
    tf: np.ndarray
    doc_len: np.ndarray


@dataclass(frozen=True)
class CommitResult:
    path: Path
    size: int
    counts: dict[str, int]


class _Column:
    """A growing in-memory column of one numeric dtype."""

    def __init__(self, dtype: str) -> None:
        self.dtype = np.dtype(dtype)
        self.parts: list[np.ndarray] = []

    def extend(self, values: Sequence[int] | np.ndarray) -> None:
        self.parts.append(np.asarray(values, dtype=self.dtype))

    def array(self) -> np.ndarray:
        return np.concatenate(self.parts) if self.parts else np.zeros(0, self.dtype)


def created_now() -> str:
    """The ``created`` stamp: now, or ``$SOURCE_DATE_EPOCH`` (reproducible builds: the golden
    packs are rebuilt byte for byte by ``make golden``)."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "")
    when = (
        dt.datetime.fromtimestamp(int(epoch), dt.UTC)
        if epoch.isdigit()
        else dt.datetime.now(dt.UTC)
    )
    return when.replace(microsecond=0).isoformat()


def _remove_files(paths: Sequence[Path]) -> None:
    for p in paths:
        with contextlib.suppress(OSError):
            p.unlink(missing_ok=True)


class PackWriter:
    """Write one pack. Use as a context manager: an exception (Ctrl-C included) aborts cleanly."""

    def __init__(
        self,
        out: Path,
        *,
        model: Mapping[str, Any] | None = None,
        dims: int | None = None,
        gguf: Path | None = None,
        created: str | None = None,
        chunking: Mapping[str, Any] | None = None,
        manifest_extra: Mapping[str, Any] | None = None,
        pieces: bool = False,
        intermediate: bool = False,
        copies: bool = True,
        ivf: bool | None = None,
        ivf_lists: int | None = None,
    ) -> None:
        """``ivf``: write the approximate index ``/ivf`` (True), not (False), or from
        ``kbpack.pack.ivf.MIN_CHUNKS`` chunks on (None); ``ivf_lists``: its lists (None: about
        2 sqrt(chunks)). ``intermediate``: ``out`` is a hidden file its caller renames later
        (split's members), so its commit is not reported as a published file after a late signal. ``copies``: find
        copies of one passage among the chunks and store the groups (``/copies``); False writes
        a pack as kbpack 0.2.0 did, without the element."""
        if (model is None) != (dims is None):
            raise ValueError(
                "a model identity and dims come together (or neither: a BM25-only pack)"
            )
        self.out = Path(out)
        if self.out.is_dir():
            raise KbpackError(f"{self.out}: is a directory; give a file name such as docs.kbpack")
        if not self.out.parent.exists():
            raise KbpackError(f"{self.out.parent}: output folder does not exist; create it first")
        self.model = dict(model) if model else None
        self.dims = dims
        self.gguf = gguf
        self.chunking = dict(chunking) if chunking else None
        self.manifest_extra = dict(manifest_extra) if manifest_extra else {}  # e.g. merged_from
        if pieces and not dims:
            raise ValueError("pieces are a vector level: a BM25-only pack has none")
        self.pieces = pieces
        self.intermediate = intermediate
        # every chunk's fingerprint, grouped at commit (kbpack/pack/copies.py); None: no /copies
        self._copy_finder = CopyFinder() if copies else None
        self._copy_groups: CopyGroups | None = None
        self.ivf, self.ivf_lists = ivf, ivf_lists
        self._ivf_index: IvfIndex | None = None  # built at commit from the vector spool
        self.created = created or created_now()
        self.stale_removed = remove_stale_temp_files(self.out)  # left by killed writers
        self.tmp = temp_path_for(self.out)
        self._text_spool = self.tmp.with_name(self.tmp.name + ".text")
        self._vec_spool = self.tmp.with_name(self.tmp.name + ".vec")
        self._piece_spool = self.tmp.with_name(self.tmp.name + ".pieces")
        self._state = "adding"
        # A Ctrl-C after the spools exist but before the caller's ``with`` reaches __enter__
        # (the rest of __init__, the return) would skip abort(): the files also go when this
        # object is collected or the interpreter exits. After a commit they are gone already.
        weakref.finalize(
            self, _remove_files, (self._text_spool, self._vec_spool, self._piece_spool, self.tmp)
        )
        try:  # a Ctrl-C between two opens must not leave the first spool behind
            self._text_f = open(self._text_spool, "wb")  # noqa: SIM115 - closed in commit/abort
            self._vec_f = open(self._vec_spool, "wb") if dims else None  # noqa: SIM115
            self._piece_f = open(self._piece_spool, "wb") if pieces else None  # noqa: SIM115
        except BaseException:
            self._cleanup_spools()  # (a handle opened here is closed when it is collected)
            raise
        self._piece = {k: _Column(t) for k, t in _PIECE_COLS.items()}
        self._n_pieces = 0
        self._text_lens: list[int] = []
        self._docs: dict[str, list[Any]] = {k: [] for k in _DOC_STR + _DOC_INT}
        self._sec = {k: _Column(t) for k, t in _SEC_COLS.items()}
        self._page = {k: _Column(t) for k, t in _PAGE_COLS.items()}
        self._chunk = {k: _Column(t) for k, t in _CHUNK_COLS.items()}
        self._names: set[str] = set()
        self._sec_titles: list[str] = []
        self._n_sections = 0
        self._n_chunks = 0
        self._n_vectors = 0
        self._postings: PostingsLike | None = None
        self._search: dict[str, Any] = {F.SEARCH_MAX_DISTANCE: F.DEFAULT_MAX_DISTANCE}
        # links (spec §3.12): (document row, from, to, target name, anchor), resolved at
        # commit, when every document's name is known; the anchors of each document by name
        self._links: list[tuple[int, int, int, str, str]] = []
        self._anchors: dict[str, dict[str, int]] = {}

    # -- state -----------------------------------------------------------------------------
    def _require(self, state: str, action: str) -> None:
        if self._state != state:
            raise RuntimeError(f"PackWriter: cannot {action} when {self._state}")

    def __enter__(self) -> PackWriter:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._state == "adding":
            self.abort()

    # -- adding ------------------------------------------------------------------------------
    def add_document(
        self,
        doc: Document,
        chunks: Sequence[ChunkLike] = (),
        vectors: np.ndarray | None = None,
        pieces: Sequence[PieceLike] = (),
        piece_vectors: np.ndarray | None = None,
    ) -> int:
        """Append one document with its sections, pages, chunks, (dense packs) vectors and
        (packs with pieces) the chunks' pieces and their vectors."""
        self._require("adding", "add a document")
        if doc.name in self._names:
            raise KbpackError(f"{doc.name}: two inputs have the same document name")
        if doc.status not in F.STATUSES:
            raise ValueError(f"{doc.name}: status {doc.status!r}")
        if doc.status != "ok" and chunks:
            raise ValueError(f"{doc.name}: a {doc.status} document has no chunks")
        if self.dims:
            n = len(chunks)
            if vectors is None or vectors.shape != (n, self.dims):
                shape = None if vectors is None else vectors.shape
                raise ValueError(
                    f"{doc.name}: expected vectors of shape {(n, self.dims)}, got {shape}"
                )
        if pieces and not self.pieces:
            raise ValueError(f"{doc.name}: pieces given to a writer opened without pieces")
        if self.pieces and self.dims:
            n = len(pieces)
            if piece_vectors is None or piece_vectors.shape != (n, self.dims):
                shape = None if piece_vectors is None else piece_vectors.shape
                raise ValueError(
                    f"{doc.name}: expected piece vectors of shape {(n, self.dims)}, got {shape}"
                )
            _check_pieces(doc, chunks, pieces)
        _check_links(doc)
        row = len(self._text_lens)
        text = doc.text.encode("utf-8")
        try:
            self._text_f.write(text)
            if self._vec_f is not None and vectors is not None and len(chunks):
                self._vec_f.write(np.ascontiguousarray(vectors, dtype="<f2").tobytes())
            if self._piece_f is not None and piece_vectors is not None and len(pieces):
                self._piece_f.write(np.ascontiguousarray(piece_vectors, dtype="<f2").tobytes())
        except OSError as e:
            self.abort()
            if error_number(e) in FULL + TOO_LARGE:
                raise no_space_error(self.out, self.estimated_bytes(), error_number(e)) from e
            raise
        self._names.add(doc.name)
        self._text_lens.append(len(text))
        d = self._docs
        d["name"].append(doc.name)
        d["source_path"].append(doc.source_path)
        d["media_type"].append(doc.media_type)
        d["source_sha256"].append(doc.source_sha256)
        d["title"].append(doc.title)
        d["extractor"].append(doc.extractor)
        d["status"].append(doc.status)
        d["reason"].append(doc.reason)
        d["stage"].append(doc.stage)
        d["decoding"].append(doc.decoding)
        d["warnings"].append(json.dumps(doc.warnings, ensure_ascii=False))
        d["text_sha256"].append(hashlib.sha256(text).hexdigest())
        d["source_size"].append(doc.source_size)
        d["extractor_version"].append(doc.extractor_version)
        d["replaced"].append(doc.replaced)

        sections = doc.sections
        base = self._n_sections
        self._sec["document"].extend([row] * len(sections))
        self._sec["parent"].extend([s.parent + base if s.parent >= 0 else -1 for s in sections])
        self._sec["level"].extend([s.level for s in sections])
        self._sec["from"].extend([s.start for s in sections])
        self._sec["to"].extend([s.end for s in sections])
        self._sec_titles.extend(s.title for s in sections)
        self._n_sections += len(sections)

        self._page["document"].extend([row] * len(doc.pages))
        self._page["number"].extend([p.number for p in doc.pages])
        self._page["from"].extend([p.start for p in doc.pages])
        self._page["to"].extend([p.end for p in doc.pages])

        self._chunk["document"].extend([row] * len(chunks))
        self._chunk["section"].extend([c.section + base for c in chunks])
        self._chunk["from"].extend([c.start for c in chunks])
        self._chunk["to"].extend([c.end for c in chunks])
        self._chunk["page"].extend([c.page or 0 for c in chunks])
        self._chunk["tokens"].extend([c.tokens for c in chunks])
        self._n_chunks += len(chunks)
        if self._copy_finder is not None:
            self._copy_finder.add(row, [doc.text[c.start : c.end] for c in chunks])
        if self._vec_f is not None and vectors is not None and len(chunks):
            self._n_vectors += len(chunks)
        first = self._n_chunks - len(chunks)
        if self._piece_f is not None and piece_vectors is not None and len(pieces):
            self._piece["chunk"].extend([first + p.chunk for p in pieces])
            self._piece["from"].extend([p.start for p in pieces])
            self._piece["to"].extend([p.end for p in pieces])
            self._n_pieces += len(pieces)
        if doc.status == "ok":
            self._links.extend((row, k.start, k.end, k.target, k.anchor) for k in doc.links)
            if doc.anchors:
                self._anchors[doc.name] = dict(doc.anchors)
        return row

    def set_postings(self, postings: PostingsLike) -> None:
        self._require("adding", "set postings")
        if len(postings.doc_len) != self._n_chunks:
            raise ValueError(
                f"postings cover {len(postings.doc_len)} chunks, the pack has {self._n_chunks}"
            )
        self._postings = postings

    def set_search_defaults(
        self, max_distance: float, calibration: Mapping[str, Any] | None = None
    ) -> None:
        self._require("adding", "set search defaults")
        self._search = {F.SEARCH_MAX_DISTANCE: float(max_distance)}
        if calibration is not None:
            self._search[F.SEARCH_CALIBRATION] = json.dumps(dict(calibration), sort_keys=True)

    @property
    def n_chunks(self) -> int:
        return self._n_chunks

    def _incompressible_bytes(self) -> int:
        """What the pack surely takes: text, vectors and model are stored uncompressed."""
        model = self.gguf.stat().st_size if (self.gguf and self.model) else 0
        vectors = (self._n_vectors + self._n_pieces) * (self.dims or 0) * 2
        return sum(self._text_lens) + vectors + model

    def estimated_bytes(self) -> int:
        """About how many bytes the pack will take: text and vectors as they are, postings and
        offsets at their measured format-2 compression (about 1/6; 1/4 here, to err high)."""
        postings = self._postings
        n_postings = int(postings.chunk.size) if postings is not None else 0
        terms = sum(len(t.encode()) + 16 for t in postings.terms) if postings else 0
        model = self.gguf.stat().st_size if (self.gguf and self.model) else 0
        n_strings = len(self._text_lens) * len(_DOC_STR) + self._n_sections
        from kbpack.pack.bm25_store import DENSE_SHARE

        # the common terms' dense tf rows, uncompressed: one byte per chunk each
        df = np.diff(np.asarray(postings.indptr)) if postings is not None else np.zeros(0)
        dense = int((df * DENSE_SHARE >= max(1, self._n_chunks)).sum()) * self._n_chunks
        return (
            F.USERBLOCK_SIZE
            + 256 * 1024  # HDF5 metadata: object headers, chunk indexes (golden pack: ~150 KB)
            + n_strings * 32  # a string's heap reference and heap object header
            + sum(self._text_lens)
            + (self._n_vectors + self._n_pieces) * (self.dims or 0) * 2
            + self._n_pieces * 20 // 4  # piece offsets
            + model
            + (n_postings * 8 + terms) // 4
            + dense
            + self._n_chunks * 40 // 4
            + self._n_sections * 40
            + len(self._text_lens) * 256  # names, paths, hashes, titles
        )

    # -- finishing ---------------------------------------------------------------------------
    def commit(self) -> CommitResult:
        """Write everything, hash it, stamp the manifest, fsync and atomically replace the output."""
        self._require("adding", "commit")
        if self._postings is None:
            raise RuntimeError("PackWriter: set_postings() before commit()")
        needed = self.estimated_bytes()
        try:
            self._text_f.close()
            if self._vec_f is not None:
                self._vec_f.close()
            if self._piece_f is not None:
                self._piece_f.close()
            if self._copy_finder is not None:  # here, not in the HDF5 child: errors surface
                self._copy_groups = self._copy_finder.groups()
            if self.dims and ivf_wanted(self._n_vectors, self.ivf):
                self._ivf_index = self._build_ivf()
            free = free_bytes(self.out.parent)
            if free is not None and self._incompressible_bytes() > free:
                spools = self._incompressible_bytes()  # the spools hold the same bytes
                raise no_space_error(self.out, needed, spools=spools)  # before HDF5 starts
            # HDF5 in a child: a write that fails inside HDF5 can crash the process (SIGSEGV
            # on a full disk); then only the child dies and this process cleans up
            elements, counts = run_in_child(self._write_hdf5)
            size, sha = hash_hdf5_bytes(self.tmp)
            manifest = Manifest(
                format_version=F.FORMAT_VERSION,
                file_size=size,
                hdf5_sha256=sha,
                counts=counts,
                elements=elements,
                kbpack_version=__version__,
                created=self.created,
                extra=self.manifest_extra,
            )
            write_header(self.tmp, encode_header(manifest.to_json_bytes()))
            _fsync_file(self.tmp)
            interrupt.check()  # a Ctrl-C swallowed by a finalizer must not publish the pack
            # a signal from here on is raised after the rename is durable and recorded, so the
            # CLI can say the new pack is complete (a signal here ended with rc -15 in 0.1)
            with interrupt.uninterruptible():
                os.replace(self.tmp, self.out)
                if not self.intermediate:
                    interrupt.published(self.out)
                self._state = "committed"
                _fsync_dir(self.out.parent)
                self._cleanup_spools()
        except ChildFailed as e:
            free = free_bytes(self.out.parent)
            written = self.tmp.stat().st_size if self.tmp.exists() else 0
            self.abort()
            spools = self._incompressible_bytes()
            raise write_failure(self.out, e, needed, free, spools, written) from None
        except OSError as e:
            self.abort()
            if error_number(e) in FULL + TOO_LARGE:
                spools = self._incompressible_bytes()
                raise no_space_error(self.out, needed, error_number(e), spools) from e
            raise
        except BaseException:
            self.abort()  # (nothing to undo once committed: a late signal is raised here)
            raise
        if not self.intermediate:
            # its own bytes: its first open needs no pre-flight, and query no verify hint
            remember_parsed(self.out)
            remember_written(self.out)
        return CommitResult(self.out, size, counts)

    def _build_ivf(self) -> IvfIndex:
        """The IVF index of the spooled vectors (``kbpack/pack/ivf.py``), read memory-mapped."""
        assert self.dims
        vectors = np.memmap(
            self._vec_spool, dtype="<f2", mode="r", shape=(self._n_vectors, self.dims)
        )
        try:
            return build_ivf(vectors, self.ivf_lists)
        except ValueError as e:
            raise KbpackError(f"{self.out}: {e}") from None
        finally:
            del vectors

    def abort(self) -> None:
        """Remove the temp files; the output path is left as it was."""
        if self._state in ("aborted", "committed"):
            return
        self._state = "aborted"
        for f in (self._text_f, self._vec_f, self._piece_f):
            if f is not None:
                with contextlib.suppress(OSError):
                    f.close()
        with contextlib.suppress(OSError):
            self.tmp.unlink(missing_ok=True)
        self._cleanup_spools()

    def _cleanup_spools(self) -> None:
        for p in (self._text_spool, self._vec_spool, self._piece_spool):
            with contextlib.suppress(OSError):
                p.unlink(missing_ok=True)

    def _write_hdf5(self) -> tuple[dict[str, str], dict[str, int]]:
        import h5py

        elements: dict[str, str] = {}
        postings = self._postings
        assert postings is not None
        d = self._docs
        statuses = d["status"]
        n_terms = len(postings.terms)
        from kbpack.pack.bm25_store import TermLookup, dense_rows

        lookup = TermLookup.from_terms(postings.terms)
        model_bytes = self.gguf.stat().st_size if (self.gguf and self.model) else 0
        counts = {
            "documents": len(statuses),
            "documents_ok": statuses.count("ok"),
            "documents_failed": statuses.count("failed"),
            "documents_skipped": statuses.count("skipped"),
            "sections": self._n_sections,
            "pages": sum(len(p) for p in self._page["number"].parts),
            "chunks": self._n_chunks,
            "vectors": self._n_vectors,
            "terms": n_terms,
            "terms_plus_one": n_terms + 1,
            "terms_bytes": int(lookup.blob.size),
            "postings": int(postings.chunk.size),
            "model_bytes": model_bytes,
        }
        if self.pieces:
            counts["pieces"] = self._n_pieces
        # the common terms' dense tf rows (spec §3.7.1), derived from the postings
        dense_terms, dense_tf = dense_rows(
            postings.indptr, postings.chunk, postings.tf, self._n_chunks
        )
        counts["dense_terms"] = int(dense_terms.size)
        counts["dense_tf"] = int(dense_tf.size)
        copies = self._copy_groups
        if copies is not None:
            counts["copies"] = int(copies.chunk.size)
        links = self._resolved_links()
        if links is not None:
            counts["links"] = len(links[F.LINK_ANCHOR])
        ivf = self._ivf_index
        if ivf is not None:
            counts["ivf_lists"] = ivf.lists
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
            _set_attrs(h, root_attrs)
            elements["/@attrs"] = attrs_digest(root_attrs)

            for el in F.ELEMENTS:
                if el.dtype:
                    continue
                if el.path in (F.VECTORS, F.MODEL) and not self.dims:
                    continue
                if el.path == F.PIECES and not self.pieces:
                    continue
                if el.path == F.COPIES and copies is None:
                    continue
                if el.path == F.LINKS and links is None:
                    continue
                if el.path == F.IVF and ivf is None:
                    continue
                g = h.create_group(el.path)
                attrs = {F.A_KIND: el.kind, F.A_VERSION: 1, F.A_DESCRIPTION: el.description}
                if el.path == F.MODEL and self.model:
                    attrs.update({k: self.model[k] for k in F.MODEL_ATTRS})
                    attrs.update({k: str(self.model.get(k, "")) for k in F.MODEL_PREFIX_ATTRS})
                elif el.path == F.BM25:
                    attrs.update({F.BM25_K1: 1.2, F.BM25_B: 0.75, F.BM25_TOKENIZER: F.TOKENIZER_ID})
                    name = getattr(self._postings, "analyzer", None)
                    if name:  # absent = plain, so plain packs stay byte-identical
                        attrs[F.BM25_ANALYZER] = name
                    fields = getattr(self._postings, "fields", None)
                    if fields:  # absent = content only (spec 3.7)
                        attrs[F.BM25_FIELDS] = fields
                elif el.path == F.CHUNKS:
                    attrs[F.CHUNK_HEADER_RULE] = F.EMBEDDED_TEXT_RULE
                    if self.chunking is not None:
                        attrs[F.CHUNKING] = json.dumps(self.chunking, sort_keys=True)
                elif el.path == F.SEARCH:
                    attrs.update(self._search)
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
                elif el.path == F.IVF and ivf is not None:
                    attrs.update(ivf_attrs(ivf))
                elif el.path == F.VECTORS:
                    attrs.update(
                        {"dims": self.dims, "normalisation": "l2", "stored_dtype": "float16"}
                    )
                _set_attrs(g, attrs)
                elements[el.path + "@attrs"] = attrs_digest(attrs)

            def put(path: str, data: np.ndarray) -> None:
                el = F.ELEMENT_BY_PATH[path]
                ds = create_dataset(h, path, data=data)
                elements[path] = numeric_digest(data)
                self._describe(ds, el, elements)

            row_digested: dict[str, np.ndarray] = {}

            def put_str(path: str, items: list[str]) -> None:
                el = F.ELEMENT_BY_PATH[path]
                ds = create_dataset(h, path, data=items)
                elements[path] = strings_digest(items)
                self._describe(ds, el, elements)
                if path in F.ROW_DIGEST_OF:  # written last, in the spec's order (§3.11)
                    row_digested[F.ROW_DIGEST_OF[path]] = row_digests(items)

            for key in _DOC_STR:
                if key != "text":
                    put_str(f"{F.DOCUMENTS}/{key}", d[key])
            for key, dtype in _DOC_INT_TYPES.items():
                put(f"{F.DOCUMENTS}/{key}", np.asarray(d[key], dtype=dtype))
            self._write_text(h, elements)
            for key, col in self._sec.items():
                put(f"{F.SECTIONS}/{key}", col.array())
            put_str(F.SEC_TITLE, self._sec_titles)
            for key, col in self._page.items():
                put(f"{F.PAGES}/{key}", col.array())
            for key, col in self._chunk.items():
                put(f"{F.CHUNKS}/{key}", col.array())
            put(F.BM25_TERMS_BLOB, np.asarray(lookup.blob, dtype="u1"))
            put(F.BM25_TERMS_OFFSETS, np.asarray(lookup.offsets, dtype="<i8"))
            put(F.BM25_INDPTR, np.asarray(postings.indptr, dtype="<i8"))
            put(F.BM25_CHUNK, np.asarray(postings.chunk, dtype="<i4"))
            put(F.BM25_TF, np.asarray(postings.tf, dtype="<i4"))
            put(F.BM25_DOC_LEN, np.asarray(postings.doc_len, dtype="<i4"))
            put(F.BM25_DENSE_TERMS, np.asarray(dense_terms, dtype="<i4"))
            put(F.BM25_DENSE_TF, np.asarray(dense_tf, dtype="u1"))
            if self.dims:
                self._write_vectors(h, elements)
                if self.gguf and self.model:
                    self._write_gguf(h, elements)
            if self.pieces:
                for key, col in self._piece.items():
                    put(f"{F.PIECES}/{key}", col.array())
                self._write_rows(h, elements, F.PIECE_DATA, self._piece_spool, self._n_pieces)
            if copies is not None:
                put(F.COPY_GROUP, copies.group)
                put(F.COPY_CHUNK, copies.chunk)
                put(F.COPY_EXACT, copies.exact)
            for path in F.ROW_DIGEST_OF.values():
                put(path, row_digested[path])
            if links is not None:
                for path, values in links.items():
                    if isinstance(values, np.ndarray):
                        put(path, values)
                    else:
                        put_str(path, values)
            if ivf is not None:  # centroids, lists, and the int8 codes (spec §3.13)
                for path, data in ivf_datasets(ivf):
                    put(path, data)
            # Write everything out while errors still raise: h5py swallows the errors of
            # writes that happen when a dataset is deallocated ("Exception ignored in
            # __dealloc__"), and its close after such a failure is where HDF5 crashed.
            h.flush()
        return elements, counts

    def _resolved_links(self) -> dict[str, Any] | None:
        """The ``/links`` columns (spec §3.12): each link whose target is an ``ok`` document
        of this pack, its anchor resolved to an offset (0 when the target has no such anchor);
        None when no link is left (the pack then has no ``/links``)."""
        names = self._docs["name"]
        statuses = self._docs["status"]
        row_of = {name: i for i, name in enumerate(names) if statuses[i] == "ok"}
        rows: list[tuple[int, int, int, int, int, str]] = []
        for row, start, end, target, anchor in self._links:
            found = next(
                (n for n in (target, *(target + s for s in _COMPRESSED)) if n in row_of), None
            )
            if found is None:
                continue
            offset = self._anchors.get(found, {}).get(anchor, 0) if anchor else 0
            rows.append((row, start, end, row_of[found], offset, anchor))
        if not rows:
            return None
        rows.sort(key=lambda x: (x[0], x[1]))
        return {
            F.LINK_DOCUMENT: np.asarray([x[0] for x in rows], dtype="<i4"),
            F.LINK_FROM: np.asarray([x[1] for x in rows], dtype="<i8"),
            F.LINK_TO: np.asarray([x[2] for x in rows], dtype="<i8"),
            F.LINK_TARGET: np.asarray([x[3] for x in rows], dtype="<i4"),
            F.LINK_TARGET_OFFSET: np.asarray([x[4] for x in rows], dtype="<i8"),
            F.LINK_ANCHOR: [x[5] for x in rows],
        }

    def _describe(self, ds: Any, el: F.Element, elements: dict[str, str]) -> None:
        attrs = {F.A_KIND: el.kind, F.A_VERSION: 1, F.A_DESCRIPTION: el.description}
        _set_attrs(ds, attrs)
        elements[el.path + "@attrs"] = attrs_digest(attrs)

    def _write_text(self, h: Any, elements: dict[str, str]) -> None:
        n = len(self._text_lens)
        ds = create_dataset(h, F.DOC_TEXT, shape=(n,))
        digest = StreamDigest()
        with open(self._text_spool, "rb") as f:
            for i, length in enumerate(self._text_lens):
                raw = f.read(length)
                digest.strings([raw])
                ds[i] = raw.decode("utf-8")
        elements[F.DOC_TEXT] = digest.hexdigest()
        self._describe(ds, F.ELEMENT_BY_PATH[F.DOC_TEXT], elements)

    def _write_vectors(self, h: Any, elements: dict[str, str]) -> None:
        self._write_rows(h, elements, F.VEC_DATA, self._vec_spool, self._n_vectors)

    def _write_rows(self, h: Any, elements: dict[str, str], path: str, spool: Path, n: int) -> None:
        """A float16 (n, dims) dataset from its spool file, in blocks, digested as written."""
        assert self.dims
        ds = create_dataset(h, path, shape=(n, self.dims), dtype="<f2")
        digest = StreamDigest()
        row_bytes = self.dims * 2
        with open(spool, "rb") as f:
            for at in range(0, n, BLOCK_ROWS):
                rows = min(BLOCK_ROWS, n - at)
                block = np.frombuffer(f.read(rows * row_bytes), dtype="<f2").reshape(
                    rows, self.dims
                )
                ds[at : at + rows] = block
                digest.numeric(block)
        elements[path] = digest.hexdigest()
        self._describe(ds, F.ELEMENT_BY_PATH[path], elements)

    def _write_gguf(self, h: Any, elements: dict[str, str]) -> None:
        assert self.gguf
        size = self.gguf.stat().st_size
        ds = create_dataset(h, F.MODEL_GGUF, shape=(size,), dtype="u1")
        digest = StreamDigest()
        block = 16 * 2**20
        with open(self.gguf, "rb") as f:
            for at in range(0, size, block):
                data = np.frombuffer(f.read(block), dtype="u1")
                ds[at : at + data.size] = data
                digest.numeric(data)
        elements[F.MODEL_GGUF] = digest.hexdigest()
        self._describe(ds, F.ELEMENT_BY_PATH[F.MODEL_GGUF], elements)


_DOC_STR = F.DOC_STRING_COLUMNS
_DOC_INT_TYPES = F.DOC_INT_COLUMNS
_DOC_INT = tuple(_DOC_INT_TYPES)
_SEC_COLS = {"document": "<i4", "parent": "<i4", "level": "i1", "from": "<i8", "to": "<i8"}
_PAGE_COLS = {"document": "<i4", "number": "<i4", "from": "<i8", "to": "<i8"}
_CHUNK_COLS = {
    "document": "<i4",
    "section": "<i4",
    "from": "<i8",
    "to": "<i8",
    "page": "<i4",
    "tokens": "<i4",
}


_PIECE_COLS = {"chunk": "<i4", "from": "<i8", "to": "<i8"}


# a link to x.html finds the document x.html.gz (a compressed source keeps its suffix)
_COMPRESSED = (".gz", ".bz2", ".xz")


def _check_links(doc: Document) -> None:
    """Links and anchors inside the document's text, links in order and apart (spec §3.12)."""
    n = len(doc.text)
    end = 0
    for k in doc.links:
        if not end <= k.start < k.end <= n:
            raise ValueError(
                f"{doc.name}: link [{k.start}, {k.end}) to {k.target} is outside the text "
                "or overlaps the link before it"
            )
        if doc.text[k.start].isspace() or doc.text[k.end - 1].isspace():
            raise ValueError(f"{doc.name}: link [{k.start}, {k.end}) starts or ends with space")
        end = k.end
    for anchor, offset in doc.anchors.items():
        if not 0 <= offset <= n:
            raise ValueError(f"{doc.name}: anchor {anchor!r} at {offset} is outside the text")


def _check_pieces(doc: Document, chunks: Sequence[ChunkLike], pieces: Sequence[PieceLike]) -> None:
    """Pieces must lie inside their chunk, in order: the writer refuses what the spec forbids."""
    prev = (-1, -1)
    for p in pieces:
        if not 0 <= p.chunk < len(chunks):
            raise ValueError(f"{doc.name}: a piece names chunk {p.chunk} of {len(chunks)}")
        c = chunks[p.chunk]
        if not c.start <= p.start < p.end <= c.end or (p.chunk, p.start) < prev:
            raise ValueError(
                f"{doc.name}: piece [{p.start}, {p.end}) is not inside chunk "
                f"[{c.start}, {c.end}) in order"
            )
        prev = (p.chunk, p.end)


def _set_attrs(obj: Any, attrs: Mapping[str, Any]) -> None:
    for k, v in attrs.items():
        obj.attrs[k] = v


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):  # not every filesystem lets a directory be fsynced
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


__all__ = ["CommitResult", "PackWriter"]
