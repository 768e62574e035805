"""What a search reads, behind one interface: ``Corpus``, which one pack (``PackCorpus``) and a
pack set (``kbpack.search.federate.SetCorpus``) both implement. The searcher
(``kbpack.search.searcher``) does candidates, fusion, gating, refusal and citations over it and
never asks which of the two it holds.

Chunk ids are rows of the corpus: a pack's own rows, or a set's (its packs end to end).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from kbpack.pack import format as F
from kbpack.pack.read import PackReader
from kbpack.pack.vector_scan import simsimd_module
from kbpack.search.bm25_top import Term
from kbpack.search.dense import DenseScores
from kbpack.search.postings import PackPostings
from kbpack.search.results import Ranking, Result, locator
from kbpack.search.vectors import PackVectors

ALSO_MAX = 20  # other locations listed per result (a boilerplate paragraph may have hundreds)


class Corpus(Protocol):
    """The chunks a ``Searcher`` searches and everything it reads of them."""

    where: str  # the file a damaged-data error names
    analyzer_name: str | None  # the text -> terms rule of the postings

    # -- BM25 ---------------------------------------------------------------------------------
    def n_chunks(self) -> int: ...
    def terms(self, query: str) -> Sequence[Term]: ...  # the query's postings, query order
    def doc_freq(self, term: str) -> int: ...
    def header_freq(self, term: str) -> int: ...  # chunks whose indexed header holds it
    def near_terms(self, word: str) -> dict[str, tuple[int, int]]: ...

    # -- dense (the dense stage: every chunk's scores for query vectors) ----------------------
    def query_prefix(self) -> str: ...
    def dense_scores(self, q: np.ndarray) -> DenseScores: ...
    def dense_scores_many(self, queries: np.ndarray) -> list[DenseScores]: ...
    def checked_scores(self, q: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...

    # -- filters and thresholds ---------------------------------------------------------------
    def mask(self, doc: str | None, kind: str | None, section: str | None) -> np.ndarray | None: ...
    def default_threshold(self) -> float: ...
    def threshold(self, chunk: int) -> float: ...  # the caller gave none: the chunk's pack's
    def answerer(self, chunk: int) -> int: ...  # which pack decides whether ``chunk`` shows

    # -- content and citations ----------------------------------------------------------------
    def chunk_content(self, chunk: int) -> str: ...
    def result(self, c: int, at: Ranking, context: str) -> Result: ...
    def copy_group(self, chunk: int) -> Any | None: ...
    def copy_members(self, chunk: int) -> list[int]: ...
    def list_copies(self, chunk: int, res: Result, context: str = "chunk") -> None: ...
    def near_copy_in(
        self, chunk: int, ids: Sequence[int], shown: Sequence[Result]
    ) -> Result | None: ...

    # -- start-up -----------------------------------------------------------------------------
    def prepare(self, vectors: bool) -> None: ...
    # every vector scanned (``exact``) or through the pack's approximate index (``probe`` lists)
    def use_ivf(self, exact: bool, probe: int | None) -> None: ...
    def read_ahead(self, loading: Callable[[], bool]) -> None: ...


PREPARED_COLUMNS: tuple[str, ...] = (F.CHUNK_DOCUMENT, F.CHUNK_FROM, F.CHUNK_TO, F.CHUNK_SECTION)
PREPARED_COLUMNS += (F.CHUNK_PAGE, F.SEC_PARENT)
PREPARED_STRINGS = (F.DOC_NAME, F.DOC_TITLE, F.DOC_TEXT_SHA256)  # one row a document


class PackCorpus:
    """One open pack as a ``Corpus``."""

    def __init__(
        self,
        reader: PackReader,
        postings: PackPostings | None = None,
        vectors: PackVectors | None = None,
    ) -> None:
        self.r = reader
        self.where = reader.where
        self.postings = postings or PackPostings(reader)
        self.vectors = vectors or PackVectors(reader)
        self.analyzer_name = self.postings.analyzer_name
        self._query_prefix: str | None = None
        self._header_freq: dict[str, int] | None = None

    # -- BM25 ---------------------------------------------------------------------------------
    def n_chunks(self) -> int:
        return self.postings.n_chunks()

    def terms(self, query: str) -> Sequence[Term]:
        return self.postings.terms(query)

    def doc_freq(self, term: str) -> int:
        return self.postings.doc_freq(term)

    def header_freq(self, term: str) -> int:
        """Chunks whose header (document title and section path) holds ``term`` in the BM25
        postings: 0 in a pack whose postings index content only (spec/FORMAT.md 3.7)."""
        if self._header_freq is None:
            self._header_freq = self._header_terms()
        return self._header_freq.get(term, 0)

    def _header_terms(self) -> dict[str, int]:
        """Term -> chunks whose header holds it, from one pass over the chunks' (document,
        section) pairs; read once, on the first query that needs it."""
        from collections import Counter

        from kbpack.index.chunk import header
        from kbpack.pack import format as F
        from kbpack.text.analyze import analyzer

        r = self.r
        if r.attrs(F.BM25).get(F.BM25_FIELDS) != F.HEADER_CONTENT:
            return {}
        docs = np.asarray(r.column(F.CHUNK_DOCUMENT), dtype=np.int64)
        secs = np.asarray(r.column(F.CHUNK_SECTION), dtype=np.int64)
        pairs, counts = np.unique(np.stack([docs, secs], axis=1), axis=0, return_counts=True)
        terms = analyzer(self.analyzer_name).terms
        out: Counter[str] = Counter()
        for (doc, sec), n in zip(pairs.tolist(), counts.tolist(), strict=True):
            head = header(r.string_at(F.DOC_TITLE, doc), r.section_path(sec))
            for t in set(terms(head)):
                out[t] += n
        return dict(out)

    def near_terms(self, word: str) -> dict[str, tuple[int, int]]:
        return self.postings.near_terms(word)

    # -- dense --------------------------------------------------------------------------------
    def query_prefix(self) -> str:
        """The pack's query prefix. It comes from the pack, never from the embedder or the
        caller: a pack built with a prefix cannot be queried without it. Read on first use, so
        that a BM25 query (every ``--mode bm25`` call) does not read ``/model``'s attributes."""
        if self._query_prefix is None:
            model = self.r.model
            self._query_prefix = str(model.get(F.M_QUERY_PREFIX, "")) if model else ""
        return self._query_prefix

    def dense_scores(self, q: np.ndarray) -> DenseScores:
        return self.vectors.scores(q)

    def dense_scores_many(self, queries: np.ndarray) -> list[DenseScores]:
        return self.vectors.scores_many(queries)

    def checked_scores(self, q: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.vectors.checked(q, ids)

    # -- filters and thresholds ---------------------------------------------------------------
    def mask(self, doc: str | None, kind: str | None, section: str | None) -> np.ndarray | None:
        if not (doc or kind or section):
            return None
        r = self.r
        names = r.strings(F.DOC_NAME)
        keep_doc = np.ones(len(names), dtype=bool)
        if doc:
            keep_doc &= np.array([fnmatch.fnmatch(n, doc) for n in names], dtype=bool)
        if kind:
            ext = [e.split("/", 1)[0] for e in r.strings(F.DOC_EXTRACTOR)]
            keep_doc &= np.array([e == kind.lower().lstrip(".") for e in ext], dtype=bool)
        mask = keep_doc[r.column(F.CHUNK_DOCUMENT)]
        if section:
            needle = section.casefold()
            sec_ids = np.unique(r.column(F.CHUNK_SECTION)[mask])
            ok = {
                int(s) for s in sec_ids if needle in " > ".join(r.section_path(int(s))).casefold()
            }
            mask &= np.isin(r.column(F.CHUNK_SECTION), list(ok))
        return mask

    def default_threshold(self) -> float:
        """The refusal threshold when the caller gives none: the pack's (calibrated) value."""
        return float(self.r.search_defaults["max_distance"])

    def threshold(self, chunk: int) -> float:
        return self.default_threshold()

    def answerer(self, chunk: int) -> int:
        return 0

    # -- content and citations ----------------------------------------------------------------
    def chunk_content(self, chunk: int) -> str:
        return self.r.chunk_content(chunk)

    def span(self, chunk: int, context: str) -> tuple[int, int]:
        """``[from, to)`` of ``chunk`` in its document's text, or of its section's."""
        r = self.r
        if context == "section":
            sec = r.value(F.CHUNK_SECTION, chunk)
            return r.value(F.SEC_FROM, sec), r.value(F.SEC_TO, sec)
        return r.value(F.CHUNK_FROM, chunk), r.value(F.CHUNK_TO, chunk)

    def chunk_locator(self, chunk: int, context: str = "chunk") -> str:
        """The citation of ``chunk`` as ``Result.locator`` says it for ``context``: the
        chunk's characters, or (``"section"``) its whole section's."""
        r = self.r
        doc = r.value(F.CHUNK_DOCUMENT, chunk)
        start, end = self.span(chunk, context)
        page = r.value(F.CHUNK_PAGE, chunk) or None
        return locator(r.string_at(F.DOC_NAME, doc), start, end, page)

    def result(self, c: int, at: Ranking, context: str) -> Result:
        r = self.r
        doc = r.value(F.CHUNK_DOCUMENT, c)
        sec = r.value(F.CHUNK_SECTION, c)
        start, end = self.span(c, context)
        page = r.value(F.CHUNK_PAGE, c) or None
        name = r.string_at(F.DOC_NAME, doc)
        return Result(
            rank=at.rank,
            chunk=c,
            doc=name,
            title=r.string_at(F.DOC_TITLE, doc),
            section=" > ".join(r.section_path(sec)),
            start=start,
            end=end,
            page=page,
            locator=locator(name, start, end, page),
            distance=None if at.distance is None else round(at.distance, 6),
            bm25_rank=at.bm25_rank,
            dense_rank=at.dense_rank,
            score=round(at.score, 6),
            content=r.text(doc)[start:end],
        )

    # -- copies of one passage (kbpack/pack/copies.py, spec/FORMAT.md /copies) ----------------
    def copy_groups(self) -> np.ndarray | None:
        """The stored copy group of every chunk (-1: none), or None in a pack without
        ``/copies`` (kbpack 0.2.0), where only chunks of identical words are collapsed
        (bench/duplicates.py overrides this for its paired comparison)."""
        return self.r.copy_groups()

    def copy_group(self, chunk: int) -> Any | None:
        """The stored copy group of ``chunk`` (hashable), or None."""
        groups = self.copy_groups()
        if groups is None or groups[chunk] < 0:
            return None
        return int(groups[chunk])

    def copy_members(self, chunk: int) -> list[int]:
        """The other chunks of ``chunk``'s stored group, ascending."""
        groups = self.copy_groups()
        if groups is None or groups[chunk] < 0:
            return []
        return [int(x) for x in np.flatnonzero(groups == groups[chunk]) if x != chunk]

    def list_copies(
        self, chunk: int, res: Result, context: str = "chunk", prefix: str = ""
    ) -> None:
        """Add the stored group's other members to ``res.also`` (after those collapsed into
        it, up to ``ALSO_MAX``): every place the passage is, whether it ranked or not, cited
        as the result is (``context``: a section's locator for ``--context section``)."""
        for other in self.copy_members(chunk):
            if len(res.also) >= ALSO_MAX:
                break
            where = prefix + self.chunk_locator(other, context)
            if where not in res.also and where != prefix + res.locator:
                res.also.append(where)

    def near_copy_in(
        self, chunk: int, ids: Sequence[int], shown: Sequence[Result]
    ) -> Result | None:
        """In one pack the build-time groups decide which results are copies: none here."""
        return None

    # -- start-up -----------------------------------------------------------------------------
    def prepare(self, vectors: bool) -> None:
        """Load now what every query needs (the vectors, the baked BM25 postings), so that a
        long-lived server pays for them once at start and not on its first requests."""
        if vectors:
            self.vectors.prepare()
        if self.r.counts.get("chunks", 0):
            self.postings.bake()
            # what every result's citation reads a row of (its document and span, its
            # section's path, its document's name, title and text digest): whole columns, read
            # and digest-checked once, instead of a part read of each row as a cold CLI query
            # does (~40 a search; 8 bytes a chunk, a server's own cost worth paying at start)
            for path in PREPARED_COLUMNS:
                if path in self.r.h5:
                    self.r.column(path)
            for path in PREPARED_STRINGS:
                self.r.strings(path)

    def use_ivf(self, exact: bool, probe: int | None) -> None:
        self.vectors.use_ivf(exact, probe)

    def read_ahead(self, loading: Callable[[], bool]) -> None:
        """While the model loads in a worker thread (``loading()`` says it still does): what
        the dense scan and the citations will read anyway (each step only if the load is still
        running, so that this never makes a query wait longer than the load): the vectors'
        chunk index and mapping, the scan kernel's import, the columns and names a result is
        made of."""
        r = self.r
        steps = [
            lambda: r.stored_rows(F.VEC_DATA) if r.has_vectors else None,
            self.vectors.pieces,
            simsimd_module,
            *(
                (lambda path=path: r.column(path))
                for path in (F.CHUNK_DOCUMENT, F.CHUNK_SECTION, F.CHUNK_FROM, F.CHUNK_TO)
            ),
            lambda: r.column(F.CHUNK_PAGE),
            lambda: r.column(F.SEC_PARENT),
            # a citation reads a name or title row by row where the pack has row digests
            # (their columns are what to read ahead then), else the whole column
            *(
                (lambda path=path: r.strings_unless_row_digests(path))
                for path in (F.DOC_NAME, F.DOC_TITLE, F.SEC_TITLE, F.DOC_TEXT_SHA256)
            ),
            self.copy_groups,
        ]
        for step in steps:
            if not loading():
                return
            try:
                step()
            except Exception:  # raised again, in its place, if the query reads it
                return
