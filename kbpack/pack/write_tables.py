"""The rows a pack writer keeps in memory while documents stream in, and their checks.

Documents, sections, pages, chunks, pieces and links; the checks of what a document may hold,
the links resolved at commit, and the estimate of the pack's size drawn from the rows.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from kbpack.pack import format as F
from kbpack.text.document import Document


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


class Column:
    """A growing in-memory column of one numeric dtype."""

    def __init__(self, dtype: str) -> None:
        self.dtype = np.dtype(dtype)
        self.parts: list[np.ndarray] = []

    def extend(self, values: Sequence[int] | np.ndarray) -> None:
        self.parts.append(np.asarray(values, dtype=self.dtype))

    def array(self) -> np.ndarray:
        return np.concatenate(self.parts) if self.parts else np.zeros(0, self.dtype)


DOC_STR = F.DOC_STRING_COLUMNS
DOC_INT_TYPES = F.DOC_INT_COLUMNS
DOC_INT = tuple(DOC_INT_TYPES)
SEC_COLS = {"document": "<i4", "parent": "<i4", "level": "i1", "from": "<i8", "to": "<i8"}
PAGE_COLS = {"document": "<i4", "number": "<i4", "from": "<i8", "to": "<i8"}
CHUNK_COLS = {
    "document": "<i4",
    "section": "<i4",
    "from": "<i8",
    "to": "<i8",
    "page": "<i4",
    "tokens": "<i4",
}


PIECE_COLS = {"chunk": "<i4", "from": "<i8", "to": "<i8"}


# a link to x.html finds the document x.html.gz (a compressed source keeps its suffix)
COMPRESSED = (".gz", ".bz2", ".xz")


def check_links(doc: Document) -> None:
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


def check_pieces(doc: Document, chunks: Sequence[ChunkLike], pieces: Sequence[PieceLike]) -> None:
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


class DocumentTables:
    """The in-memory columns of the documents added so far (the text and vectors are spooled:
    ``write_spools``); ``add`` appends one document's rows, ``estimated_bytes`` sizes the pack."""

    def __init__(self) -> None:
        self.piece = {k: Column(t) for k, t in PIECE_COLS.items()}
        self.n_pieces = 0
        self.text_lens: list[int] = []
        self.docs: dict[str, list[Any]] = {k: [] for k in DOC_STR + DOC_INT}
        self.sec = {k: Column(t) for k, t in SEC_COLS.items()}
        self.page = {k: Column(t) for k, t in PAGE_COLS.items()}
        self.chunk = {k: Column(t) for k, t in CHUNK_COLS.items()}
        self.names: set[str] = set()
        self.sec_titles: list[str] = []
        self.n_sections = 0
        self.n_chunks = 0
        self.n_vectors = 0
        # links (spec §3.12): (document row, from, to, target name, anchor), resolved at
        # commit, when every document's name is known; the anchors of each document by name
        self.links: list[tuple[int, int, int, str, str]] = []
        self.anchors: dict[str, dict[str, int]] = {}

    def add(
        self,
        doc: Document,
        text: bytes,
        chunks: Sequence[ChunkLike],
        vectors: bool,
        pieces: Sequence[PieceLike],
        piece_vectors: bool,
    ) -> int:
        """Append one document's rows (``text``: its UTF-8 bytes, spooled); ``vectors`` and
        ``piece_vectors``: whether its vectors and piece vectors were spooled. Its row."""
        row = len(self.text_lens)
        self.names.add(doc.name)
        self.text_lens.append(len(text))
        d = self.docs
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
        base = self.n_sections
        self.sec["document"].extend([row] * len(sections))
        self.sec["parent"].extend([s.parent + base if s.parent >= 0 else -1 for s in sections])
        self.sec["level"].extend([s.level for s in sections])
        self.sec["from"].extend([s.start for s in sections])
        self.sec["to"].extend([s.end for s in sections])
        self.sec_titles.extend(s.title for s in sections)
        self.n_sections += len(sections)

        self.page["document"].extend([row] * len(doc.pages))
        self.page["number"].extend([p.number for p in doc.pages])
        self.page["from"].extend([p.start for p in doc.pages])
        self.page["to"].extend([p.end for p in doc.pages])

        self.chunk["document"].extend([row] * len(chunks))
        self.chunk["section"].extend([c.section + base for c in chunks])
        self.chunk["from"].extend([c.start for c in chunks])
        self.chunk["to"].extend([c.end for c in chunks])
        self.chunk["page"].extend([c.page or 0 for c in chunks])
        self.chunk["tokens"].extend([c.tokens for c in chunks])
        self.n_chunks += len(chunks)
        if vectors and len(chunks):
            self.n_vectors += len(chunks)
        first = self.n_chunks - len(chunks)
        if piece_vectors and len(pieces):
            self.piece["chunk"].extend([first + p.chunk for p in pieces])
            self.piece["from"].extend([p.start for p in pieces])
            self.piece["to"].extend([p.end for p in pieces])
            self.n_pieces += len(pieces)
        if doc.status == "ok":
            self.links.extend((row, k.start, k.end, k.target, k.anchor) for k in doc.links)
            if doc.anchors:
                self.anchors[doc.name] = dict(doc.anchors)
        return row

    def incompressible_bytes(self, dims: int | None, model: int) -> int:
        """What the pack surely takes: text, vectors and ``model`` (the GGUF's bytes) are
        stored uncompressed."""
        vectors = (self.n_vectors + self.n_pieces) * (dims or 0) * 2
        return sum(self.text_lens) + vectors + model

    def estimated_bytes(self, postings: PostingsLike | None, dims: int | None, model: int) -> int:
        """About how many bytes the pack will take: text and vectors as they are, postings and
        offsets at their measured format-2 compression (about 1/6; 1/4 here, to err high)."""
        n_postings = int(postings.chunk.size) if postings is not None else 0
        terms = sum(len(t.encode()) + 16 for t in postings.terms) if postings else 0
        n_strings = len(self.text_lens) * len(DOC_STR) + self.n_sections
        from kbpack.pack.bm25_store import DENSE_SHARE

        # the common terms' dense tf rows, uncompressed: one byte per chunk each
        df = np.diff(np.asarray(postings.indptr)) if postings is not None else np.zeros(0)
        dense = int((df * DENSE_SHARE >= max(1, self.n_chunks)).sum()) * self.n_chunks
        return (
            F.USERBLOCK_SIZE
            + 256 * 1024  # HDF5 metadata: object headers, chunk indexes (golden pack: ~150 KB)
            + n_strings * 32  # a string's heap reference and heap object header
            + sum(self.text_lens)
            + (self.n_vectors + self.n_pieces) * (dims or 0) * 2
            + self.n_pieces * 20 // 4  # piece offsets
            + model
            + (n_postings * 8 + terms) // 4
            + dense
            + self.n_chunks * 40 // 4
            + self.n_sections * 40
            + len(self.text_lens) * 256  # names, paths, hashes, titles
        )

    def resolved_links(self) -> dict[str, Any] | None:
        """The ``/links`` columns (spec §3.12): each link whose target is an ``ok`` document
        of this pack, its anchor resolved to an offset (0 when the target has no such anchor);
        None when no link is left (the pack then has no ``/links``)."""
        names = self.docs["name"]
        statuses = self.docs["status"]
        row_of = {name: i for i, name in enumerate(names) if statuses[i] == "ok"}
        rows: list[tuple[int, int, int, int, int, str]] = []
        for row, start, end, target, anchor in self.links:
            found = next(
                (n for n in (target, *(target + s for s in COMPRESSED)) if n in row_of), None
            )
            if found is None:
                continue
            offset = self.anchors.get(found, {}).get(anchor, 0) if anchor else 0
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
