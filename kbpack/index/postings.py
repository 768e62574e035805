"""BM25 postings at build time: chunk texts -> CSC term frequencies and chunk lengths.

Postings are stored with raw term frequencies and per-chunk lengths, never baked scores,
so chunks can be added or removed later and k1/b changed without re-indexing.

Every pack kbpack writes indexes each chunk's header (document title and section path, the
text the model embeds before the content) with its content (``headers=True``, spec/FORMAT.md
3.7): a page asked for by its title is found by BM25 too, not only through a chunk that holds
the heading alone. The header's terms count like the content's, once per occurrence, in tf and
in the chunk's length.
"""

from __future__ import annotations

from array import array
from collections import Counter
from dataclasses import dataclass

import numpy as np

from kbpack.index.chunk import Chunk, chunk_header
from kbpack.pack import format as F
from kbpack.text.analyze import analyzer
from kbpack.text.document import Document


@dataclass
class Postings:
    """BM25 postings in CSC layout: the postings of ``terms[i]`` are rows
    ``indptr[i]:indptr[i+1]`` of ``chunk`` (ascending chunk ids) and ``tf`` (raw counts)."""

    terms: list[str]  # sorted by UTF-8 bytes (= code point order), unique
    indptr: np.ndarray  # int64, len(terms) + 1
    chunk: np.ndarray  # int32
    tf: np.ndarray  # int32
    doc_len: np.ndarray  # int32, one per chunk: its terms (header's + content's, or content's)
    analyzer: str | None = None  # recorded as /bm25 attribute "analyzer"; None: plain
    fields: str | None = None  # recorded as /bm25 attribute "fields"; None: content only


class PostingsBuilder:
    """Streams chunks into postings; memory grows with the number of postings, not with text.

    Each chunk contributes one (term id, chunk id, tf) triple per distinct term, kept in compact
    typed arrays (12 bytes per posting); ``finish`` sorts them into CSC order once.
    """

    def __init__(self, analyzer_name: str | None = None, *, headers: bool = False) -> None:
        """``headers``: every chunk is indexed with its header (``add_chunk`` or ``add`` with
        ``header``), and the postings say so; without it, content only (packs of 0.2.x)."""
        self._analyzer = analyzer(analyzer_name)
        self._headers = headers
        self._vocab: dict[str, int] = {}
        self._term = array("i")
        self._chunk = array("i")
        self._tf = array("i")
        self._doc_len = array("i")
        self._finished = False

    def add_chunk(self, chunk_id: int, doc: Document, chunk: Chunk) -> None:
        """Index ``chunk`` of ``doc``: its header and its content (``headers=True`` builders)."""
        self.add(chunk_id, doc.text[chunk.start : chunk.end], chunk_header(doc, chunk))

    def add(self, chunk_id: int, text: str, header: str | None = None) -> None:
        """Index one chunk: the terms of ``header`` (given exactly when the builder indexes
        headers; "" for a chunk without one), then those of its content ``text``. Chunk ids
        must ascend (0, 1, 2, ...); a skipped id is an empty chunk."""
        if (header is not None) != self._headers:
            raise ValueError(
                "PostingsBuilder(headers=True) indexes every chunk's header: pass one"
                if self._headers
                else "this PostingsBuilder indexes content only: no header"
            )
        if self._finished:
            raise ValueError("PostingsBuilder.add after finish")
        if chunk_id < len(self._doc_len):
            raise ValueError(
                f"chunk ids must ascend: got {chunk_id} after {len(self._doc_len) - 1}"
            )
        self._doc_len.extend([0] * (chunk_id - len(self._doc_len)))
        tokens = self._analyzer.terms(text)
        if header:
            tokens = self._analyzer.terms(header) + tokens
        self._doc_len.append(len(tokens))
        vocab = self._vocab
        counts = Counter(tokens)
        for term in counts:
            tid = vocab.get(term)
            if tid is None:
                tid = vocab[term] = len(vocab)
            self._term.append(tid)
        self._chunk.extend([chunk_id] * len(counts))
        self._tf.extend(counts.values())

    def finish(self, n_chunks: int) -> Postings:
        """Return the postings of chunks ``0..n_chunks-1`` (those never added are empty)."""
        if n_chunks < len(self._doc_len):
            raise ValueError(f"n_chunks={n_chunks} but chunk {len(self._doc_len) - 1} was added")
        self._finished = True
        self._doc_len.extend([0] * (n_chunks - len(self._doc_len)))
        terms = sorted(self._vocab)  # str order is code point order, which is UTF-8 byte order
        rank = np.empty(len(terms), dtype=np.int64)
        rank[[self._vocab[t] for t in terms]] = np.arange(len(terms), dtype=np.int64)
        self._vocab = {}
        # A build's memory peaks here (85M postings at 1M chunks): ranks are int32 and every
        # array is dropped once used, ~4 bytes per posting less at the peak (~0.35 GB at 1M).
        term_rank = rank.astype(np.int32)[np.frombuffer(self._term, dtype=np.int32)]
        self._term = array("i")
        # Chunk ids were appended in ascending order, so a stable sort by term keeps them sorted.
        order = np.argsort(term_rank, kind="stable")
        counts = np.bincount(term_rank, minlength=len(terms))
        del term_rank
        indptr = np.zeros(len(terms) + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr[1:])
        chunk = np.frombuffer(self._chunk, dtype=np.int32)[order]
        self._chunk = array("i")
        tf = np.frombuffer(self._tf, dtype=np.int32)[order]
        self._tf = array("i")
        del order
        doc_len = np.frombuffer(self._doc_len, dtype=np.int32).copy()
        self._doc_len = array("i")
        return Postings(
            terms=terms,
            indptr=indptr,
            chunk=chunk,
            tf=tf,
            doc_len=doc_len,
            analyzer=self._analyzer.name,
            fields=F.HEADER_CONTENT if self._headers else None,
        )
