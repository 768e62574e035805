"""Incremental build (``kbpack update``): a new pack from the sources, reusing an old pack.

Every source is discovered and hashed as a build would. A document is taken from the old pack
as it is -- text, structure, chunks and vectors, with no extraction and no embedding -- when
its name, source size and SHA-256, extractor (library and logic version), the pipeline version
and the model's SHA-256 all match, and the extraction limits would still admit it. Every
other source is extracted and chunked afresh; documents no longer among the sources are
dropped. For those re-chunked documents, a chunk whose embedded text the old pack already
embedded with the same model gets that vector back instead of a new embedding.

Without ``--model`` the pack's own model is kept (see ``with_pack_model``): vectors are never
rebuilt with another model unless asked.

The result is written by the same pipeline as ``build`` (``build_from``), so it holds what a
fresh build of the same sources holds; ``kbpack diff`` says so. One assumption: the chunking
options (``--max-chars``, ``--overlap``) are those recorded in the old pack unless given.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from kbpack.errors import ModelError, UsageError
from kbpack.extract import Candidate, discover, extract_all
from kbpack.extract.common import blank_document, file_identity
from kbpack.index.chunk import embedded_text, header, section_path
from kbpack.ops.build import BuildOptions, BuildReport, build_from
from kbpack.ops.restore import PackContents
from kbpack.pack import format as F
from kbpack.pack.read import PackReader
from kbpack.runtime.progress import Progress
from kbpack.text.document import Document


def with_pack_model(reader: PackReader, opts: BuildOptions) -> tuple[BuildOptions, str | None]:
    """``opts`` with the model update embeds with, and that model's SHA-256 (None: BM25-only).

    Without ``--model``, update keeps the pack's model: the default model when that is the
    pack's, else the model the pack carries (``--embed-model``); a pack made with another
    model is refused rather than silently re-embedded with the default one. A pack that
    carries its model keeps carrying it while the model stays the same. A BM25-only pack stays
    BM25-only unless ``--model`` is given.
    """
    from kbpack.model.embedder import default_model_path, sha256_file

    stamp = reader.model
    if stamp is None and opts.model is None:
        opts = replace(opts, vectors=False, embed_model=False)  # BM25-only stays BM25-only
    if not opts.vectors:
        return opts, None
    carry = opts.embed_model
    if opts.model is not None:
        sha = sha256_file(opts.model) if Path(opts.model).is_file() else None
    else:
        try:
            sha = sha256_file(default_model_path())
        except ModelError:
            if stamp is None:
                raise  # a BM25-only pack gains vectors: the default model is needed
            sha = None
        if stamp is not None and sha != stamp[F.M_SHA256]:
            opts = replace(opts, model=_pack_model_file(reader))
            sha = stamp[F.M_SHA256]
    if stamp is not None and sha == stamp[F.M_SHA256]:
        carry = carry or reader.has_embedded_model
        # The same model keeps the pack's prefixes unless new ones are given.
        opts = replace(
            opts,
            query_prefix=stamp[F.M_QUERY_PREFIX]
            if opts.query_prefix is None
            else opts.query_prefix,
            doc_prefix=stamp[F.M_DOC_PREFIX] if opts.doc_prefix is None else opts.doc_prefix,
        )
    return replace(opts, embed_model=carry), sha


def _pack_model_file(reader: PackReader) -> Path:
    """The GGUF of the pack's model, taken from the pack, or UsageError saying what to pass."""
    stamp = reader.model
    assert stamp is not None
    if reader.has_embedded_model:
        from kbpack.model.resolve import resolve_embedder

        embedder, _ = resolve_embedder(reader, None)
        if embedder is not None:
            return Path(embedder.path)
    raise UsageError(
        f"{reader.path}: built with model {stamp[F.M_NAME]} (sha256 {str(stamp[F.M_SHA256])[:12]}), "
        "not the default model; pass --model FILE.gguf (that model keeps every vector, "
        "another one re-embeds every chunk)"
    )


def pack_compatible(reader: PackReader, opts: BuildOptions, model_sha: str | None) -> bool:
    """Whether the old pack's chunks and vectors are what this build would make: the same
    pipeline, and the same model with the same prefixes (or BM25-only on both sides)."""
    if reader.root_attrs.get(F.R_PIPELINE_VERSION) != F.PIPELINE_VERSION:
        return False
    stamp = reader.model
    if opts.vectors != (stamp is not None):
        return False
    if stamp is None:
        return True
    same_prefixes = (stamp[F.M_QUERY_PREFIX], stamp[F.M_DOC_PREFIX]) == (
        opts.query_prefix,
        opts.doc_prefix,
    )
    return model_sha is not None and stamp[F.M_SHA256] == model_sha and same_prefixes


def reusable_row(contents: PackContents, candidate: Candidate, opts: BuildOptions) -> int | None:
    """The old pack's row of ``candidate`` if that document can be reused unchanged."""
    row = contents.row_of.get(candidate.name)
    if row is None or candidate.kind is None:
        return None
    r = contents.r
    if r.strings(F.DOC_STATUS)[row] != "ok":
        return None  # failed before: try again, as a fresh build would
    expected = blank_document(candidate.path, candidate.name, candidate.kind)
    if (
        r.strings(F.DOC_EXTRACTOR)[row] != expected.extractor
        or int(r.column(F.DOC_EXTRACTOR_VERSION)[row]) != expected.extractor_version
    ):
        return None
    try:
        size, sha = file_identity(candidate.path)
    except OSError:
        return None  # extraction records why it cannot be read
    if size > opts.limits.max_file_bytes:
        return None
    pages = int(contents.page_rows[row + 1] - contents.page_rows[row])
    if pages > opts.limits.max_pages:
        return None
    if int(r.column(F.DOC_SOURCE_SIZE)[row]) != size or r.strings(F.DOC_SOURCE_SHA256)[row] != sha:
        return None
    return row


class _Reuse:
    """The hooks ``build_from`` calls: whole documents, and single vectors by embedded text."""

    def __init__(self, contents: PackContents) -> None:
        self.contents = contents
        self.waiting: dict[str, tuple[Document, int]] = {}  # name -> (restored doc, old row)
        self.by_text: dict[bytes, int] = {}  # SHA-256 of embedded text -> old chunk row
        self.by_piece: dict[bytes, int] = {}  # SHA-256 of a piece's embedded text -> old piece row

    def restored(self, row: int, candidate: Candidate) -> Document:
        doc = replace(self.contents.document(row), source_path=str(candidate.path))
        self.waiting[doc.name] = (doc, row)
        return doc

    def document(self, doc: Document) -> tuple[list[Any], np.ndarray | None] | None:
        entry = self.waiting.pop(doc.name, None)
        if entry is None or entry[0] is not doc:
            return None
        row = entry[1]
        return self.contents.chunks(row), self.contents.vectors(row)

    def index_vectors(self, rows: Sequence[int]) -> None:
        """Remember the vectors of the chunks of ``rows`` (old documents not reused whole)."""
        c = self.contents
        for row in rows:
            doc = c.document(row)
            first, _ = c.chunk_range(row)
            for k, ch in enumerate(c.chunks(row)):
                h = header(doc.title, section_path(doc, ch.section))
                text = embedded_text(h, doc.text[ch.start : ch.end])
                self.by_text[hashlib.sha256(text.encode("utf-8")).digest()] = first + k

    def index_pieces(self) -> None:
        """Remember the vector of every old piece by its embedded text: pieces are cut afresh
        from the new chunks, and a piece whose text is unchanged keeps its vector."""
        r = self.contents.r
        chunk = r.column(F.PIECE_CHUNK)
        start, end = r.column(F.PIECE_FROM), r.column(F.PIECE_TO)
        doc_of, sec_of = r.column(F.CHUNK_DOCUMENT), r.column(F.CHUNK_SECTION)
        titles = r.strings(F.DOC_TITLE)
        heads: dict[int, str] = {}
        for row in range(len(chunk)):
            c = int(chunk[row])
            d, sec = int(doc_of[c]), int(sec_of[c])
            if sec not in heads:
                heads[sec] = header(titles[d], r.section_path(sec))
            text = embedded_text(heads[sec], r.text(d)[int(start[row]) : int(end[row])])
            self.by_piece[hashlib.sha256(text.encode("utf-8")).digest()] = row

    def vector(self, text: str) -> np.ndarray | None:
        key = hashlib.sha256(text.encode("utf-8")).digest()
        row = self.by_text.get(key)
        if row is not None:
            return self.contents.vector(row)
        row = self.by_piece.get(key)
        return None if row is None else self.contents.r.piece_vectors()[row]


def update_pack(old: Path, opts: BuildOptions, progress: Progress | None = None) -> BuildReport:
    """Write ``opts.out`` from ``opts.sources``, reusing what ``old`` already holds.

    ``opts.out`` may be ``old`` itself: the new pack replaces it atomically at the end.
    """
    found = discover(opts.sources, opts.include, opts.exclude, opts.follow_symlinks)
    candidates, skipped = found.candidates, found.records
    with PackReader(old) as reader:
        if opts.max_chars is None and opts.overlap == 0:
            # not given on the command line: chunk as the old pack was chunked
            recorded = reader.chunking
            opts = replace(opts, max_chars=recorded["max_chars"], overlap=recorded["overlap"])
        if opts.pieces is None:  # neither --pieces nor --no-pieces: as the old pack
            opts = replace(opts, pieces=reader.has_pieces)
        if opts.ivf is None and reader.has_ivf:  # an index stays, rebuilt for the new vectors
            opts = replace(opts, ivf=True)
        if opts.analyzer is None:  # no --analyzer: terms as the old pack made them
            opts = replace(opts, analyzer=reader.bm25_analyzer)
        contents = PackContents(reader)
        opts, model_sha = with_pack_model(reader, opts)
        hooks = _Reuse(contents)
        rows: list[int | None] = [None] * len(candidates)
        if pack_compatible(reader, opts, model_sha):
            rows = [reusable_row(contents, c, opts) for c in candidates]
            kept = {r for r in rows if r is not None}
            ok = reader.strings(F.DOC_STATUS)
            rest = [i for i in contents if i not in kept and ok[i] == "ok"]
            if reader.has_vectors and rest:
                hooks.index_vectors(rest)
            if opts.pieces and reader.has_pieces:
                hooks.index_pieces()
        documents = _documents(skipped, candidates, rows, hooks, opts)
        return build_from(
            documents,
            len(candidates) + len(skipped),
            opts,
            progress,
            reuse=hooks.document,
            known_vectors=hooks.vector if (hooks.by_text or hooks.by_piece) else None,
            found=found,
        )


def _documents(
    skipped: list[Document],
    candidates: list[Candidate],
    rows: list[int | None],
    hooks: _Reuse,
    opts: BuildOptions,
) -> Iterator[Document]:
    """The documents in the order a fresh build yields them: skipped records first, then each
    candidate either restored from the old pack or extracted (in the worker, streaming)."""
    yield from skipped
    fresh = extract_all(
        [c for c, r in zip(candidates, rows, strict=True) if r is None], opts.limits
    )
    for candidate, row in zip(candidates, rows, strict=True):
        yield next(fresh) if row is None else hooks.restored(row, candidate)
    next(fresh, None)  # runs extract_all to its end, which stops the worker process


__all__ = ["pack_compatible", "reusable_row", "update_pack", "with_pack_model"]
