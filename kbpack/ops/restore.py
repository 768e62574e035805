"""Documents, chunks and vectors rebuilt from a pack: what ``update`` and ``migrate`` reuse.

A pack holds everything a build produced -- canonical text, the section tree, the page map,
chunk offsets, token counts and vectors -- so restoring is the inverse of
``PackWriter.add_document``: section parents and chunk sections become document-local again,
a stored page 0 becomes ``None`` (not paged), warnings are parsed back from JSON. A restored
document written again yields the same rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cached_property

import numpy as np

from kbpack.errors import PackError
from kbpack.index.chunk import Chunk
from kbpack.index.pieces import Piece
from kbpack.pack import format as F
from kbpack.pack.read import PackReader
from kbpack.text.document import Document, Link, Page, Section, Status


class PackContents:
    """Random access to the documents of an open pack, each with its chunks and vectors."""

    def __init__(self, reader: PackReader) -> None:
        self.r = reader
        self.n = int(reader.counts.get("documents", 0))

    # -- where each document's rows are --------------------------------------------------------
    def _ranges(self, column: str) -> np.ndarray:
        """Row range ``[out[d], out[d + 1])`` of document ``d`` in a table keyed by document."""
        docs = self.r.column(column)
        if docs.size and (np.any(np.diff(docs) < 0) or docs[0] < 0 or docs[-1] >= self.n):
            raise PackError(
                f"{self.r.path}: {column} is not ordered by document row; run kbpack verify"
            )
        bounds: np.ndarray = np.searchsorted(docs, np.arange(self.n + 1), side="left")
        return bounds

    @cached_property
    def section_rows(self) -> np.ndarray:
        return self._ranges(F.SEC_DOCUMENT)

    @cached_property
    def page_rows(self) -> np.ndarray:
        return self._ranges(F.PAGE_DOCUMENT)

    @cached_property
    def chunk_rows(self) -> np.ndarray:
        return self._ranges(F.CHUNK_DOCUMENT)

    @cached_property
    def names(self) -> list[str]:
        return self.r.strings(F.DOC_NAME)

    @cached_property
    def row_of(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.names)}

    def chunk_range(self, doc: int) -> tuple[int, int]:
        return int(self.chunk_rows[doc]), int(self.chunk_rows[doc + 1])

    # -- documents ---------------------------------------------------------------------------
    def document(self, doc: int) -> Document:
        """Document ``doc`` as extraction produced it (text, sections, pages, provenance)."""
        r = self.r

        def s(path: str) -> str:
            return r.strings(path)[doc]

        def i(path: str) -> int:
            return int(r.column(path)[doc])

        status = s(F.DOC_STATUS)
        if status not in F.STATUSES:
            raise PackError(f"{r.path}: {F.DOC_STATUS} row {doc} is {status!r}; run kbpack verify")
        warnings = r.warnings(doc)
        return Document(
            name=s(F.DOC_NAME),
            source_path=s(F.DOC_SOURCE_PATH),
            media_type=s(F.DOC_MEDIA_TYPE),
            source_size=i(F.DOC_SOURCE_SIZE),
            source_sha256=s(F.DOC_SOURCE_SHA256),
            title=s(F.DOC_TITLE),
            extractor=s(F.DOC_EXTRACTOR),
            extractor_version=i(F.DOC_EXTRACTOR_VERSION),
            status=_status(status),
            reason=s(F.DOC_REASON),
            stage=s(F.DOC_STAGE),
            text=r.text(doc),
            sections=self.sections(doc),
            pages=self.pages(doc),
            decoding=s(F.DOC_DECODING),
            replaced=i(F.DOC_REPLACED),
            warnings=[str(w) for w in warnings] if isinstance(warnings, list) else [],
            links=self.links(doc),
            anchors=dict(self.anchors.get(doc, {})),
        )

    def _rows(self, a: int, b: int, *columns: str) -> list[np.ndarray]:
        """Rows ``a`` to ``b`` of each of ``columns``."""
        return [self.r.column(c)[a:b] for c in columns]

    @cached_property
    def link_rows(self) -> np.ndarray:
        return self._ranges(F.LINK_DOCUMENT)

    def links(self, doc: int) -> list[Link]:
        """The links of ``doc`` (spec §3.12) with their targets by name, as extraction gave
        them: written again, each resolves to the same target and offset."""
        r = self.r
        if not r.has_links:
            return []
        a, b = int(self.link_rows[doc]), int(self.link_rows[doc + 1])
        start, end = r.column(F.LINK_FROM), r.column(F.LINK_TO)
        target, anchor = r.column(F.LINK_TARGET), r.strings(F.LINK_ANCHOR)
        return [
            Link(int(start[i]), int(end[i]), self.names[int(target[i])], anchor[i])
            for i in range(a, b)
        ]

    @cached_property
    def anchors(self) -> dict[int, dict[str, int]]:
        """The anchors each document is linked at, with their offsets: what a pack keeps of a
        document's anchors (only those some link of the pack leads to)."""
        r = self.r
        out: dict[int, dict[str, int]] = {}
        if not r.has_links:
            return out
        target, offset = r.column(F.LINK_TARGET), r.column(F.LINK_TARGET_OFFSET)
        for i, anchor in enumerate(r.strings(F.LINK_ANCHOR)):
            if anchor:
                out.setdefault(int(target[i]), {}).setdefault(anchor, int(offset[i]))
        return out

    def sections(self, doc: int) -> list[Section]:
        r = self.r
        a, b = int(self.section_rows[doc]), int(self.section_rows[doc + 1])
        parent, level, start, end = self._rows(
            a, b, F.SEC_PARENT, F.SEC_LEVEL, F.SEC_FROM, F.SEC_TO
        )
        titles = r.strings(F.SEC_TITLE)[a:b]
        out = []
        for k in range(b - a):
            p = int(parent[k])
            local = p - a if p >= 0 else -1
            if p >= 0 and not 0 <= local < b - a:
                raise PackError(
                    f"{r.path}: {F.SEC_PARENT} row {a + k} points outside its document; "
                    "run kbpack verify"
                )
            out.append(Section(int(level[k]), titles[k], int(start[k]), int(end[k]), local))
        return out

    def pages(self, doc: int) -> list[Page]:
        a, b = int(self.page_rows[doc]), int(self.page_rows[doc + 1])
        number, start, end = self._rows(a, b, F.PAGE_NUMBER, F.PAGE_FROM, F.PAGE_TO)
        return [Page(int(number[k]), int(start[k]), int(end[k])) for k in range(b - a)]

    def chunks(self, doc: int) -> list[Chunk]:
        """Chunks of ``doc`` with document-local section indices, as the chunker made them."""
        r = self.r
        a, b = self.chunk_range(doc)
        base = int(self.section_rows[doc])
        n_sec = int(self.section_rows[doc + 1]) - base
        section, start, end, page, tokens = self._rows(
            a, b, F.CHUNK_SECTION, F.CHUNK_FROM, F.CHUNK_TO, F.CHUNK_PAGE, F.CHUNK_TOKENS
        )
        out = []
        for k in range(b - a):
            local = int(section[k]) - base
            if not 0 <= local < n_sec:
                raise PackError(
                    f"{r.path}: {F.CHUNK_SECTION} row {a + k} is not a section of its document; "
                    "run kbpack verify"
                )
            p = int(page[k])
            out.append(Chunk(local, int(start[k]), int(end[k]), p or None, int(tokens[k])))
        return out

    def vectors(self, doc: int) -> np.ndarray | None:
        """float32 vectors of ``doc``'s chunks (exact: stored float16 widened), None if BM25-only."""
        if not self.r.has_vectors:
            return None
        a, b = self.chunk_range(doc)
        block = np.asarray(self.r.dataset(F.VEC_DATA)[a:b], dtype=np.float32)
        return block

    def pieces(self, doc: int) -> tuple[list[Piece], np.ndarray]:
        """The pieces of ``doc``'s chunks (chunk index local to the document) and their float32
        vectors; nothing in a pack without pieces."""
        r = self.r
        if not r.has_pieces:
            return [], np.zeros((0, 0), np.float32)
        a, b = self.chunk_range(doc)
        chunk = r.column(F.PIECE_CHUNK)
        lo, hi = (int(x) for x in np.searchsorted(chunk, [a, b]))  # rows ordered by chunk
        start, end = r.column(F.PIECE_FROM), r.column(F.PIECE_TO)
        out = [Piece(int(chunk[i]) - a, int(start[i]), int(end[i])) for i in range(lo, hi)]
        return out, r.piece_vectors()[lo:hi]

    def vector(self, row: int) -> np.ndarray:
        return np.asarray(self.r.dataset(F.VEC_DATA)[row], dtype=np.float32)

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.n))


def _status(value: str) -> Status:
    if value == "ok":
        return "ok"
    if value == "failed":
        return "failed"
    return "skipped"
