"""Query a corpus (one pack or a pack set, ``kbpack.search.corpus``): BM25 and dense
candidates, fused by scores, gated by a refusal threshold, returned as citations.

Fusion (``kbpack.search.fusion``, docs/search.md): over the dense top 100 union the BM25 top 100,
``0.8 * minmax(cos) + 0.2 * bm25 / max bm25``. The refusal gate's rules are
``kbpack.search.gating``; citations and the folding of copies ``kbpack.search.citing``.

``search_many`` answers several requests at once: one dense pass over the vectors for all of
them (``Corpus.dense_scores_many``), the rest per request; its answers are those of ``search``,
bit for bit (tests/search/test_search_batch.py). Each query is embedded alone by default: llama.cpp's
arithmetic depends on the batch, so a vector embedded beside others differs from the one
embedded alone in its last bits (~3e-8 for MiniLM), which min-max fusion can magnify to the
fifth decimal of a score. ``embed_together=True`` embeds them in one batch all the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from kbpack.choices import MODES
from kbpack.pack.read import DamagedDataError, PackReader
from kbpack.search import gating, words
from kbpack.search.absent import preload as preload_word_lists
from kbpack.search.bm25 import accumulate
from kbpack.search.bm25_top import Term, top_k_exact
from kbpack.search.citing import Query, finish
from kbpack.search.corpus import (
    ALSO_MAX,  # noqa: F401 (the names callers import from here)
    Corpus,
    PackCorpus,
)
from kbpack.search.dense import DenseScores
from kbpack.search.fusion import CANDIDATES
from kbpack.search.gating import (  # noqa: F401
    EVIDENCE_SHARE,
    RARE_MIN,
    RARE_SHARE,
    IdentifierGate,
    analyzed_content_terms,
    code_like_terms,
    content_terms,
    foreign_query,
    heading_only,
    idf,
)
from kbpack.search.results import Ranking, Result, SearchResponse, locator  # noqa: F401
from kbpack.search.typos import Suggestion
from kbpack.search.words import TYPO_MIN_LETTERS  # noqa: F401

if TYPE_CHECKING:
    from kbpack.model.load import ModelLoad

# the scan (simsimd or numpy blocks) and the checked re-score (a numpy matmul) round differently
# by ~1e-7; a damaged byte that HDF5's checksum would not flag is not what this compares for
SCAN_TOLERANCE = 1e-5


@dataclass(frozen=True)
class SearchRequest:
    """One query and its options, as ``Searcher.search`` takes them."""

    query: str
    k: int = 5
    mode: str = "hybrid"
    max_distance: float | None = None
    refuse: bool = True
    doc: str | None = None
    kind: str | None = None
    section: str | None = None
    context: str = "chunk"
    rerank_top: int | None = None

    def check(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}")
        d = self.max_distance
        if d is not None and not 0.0 <= d <= 2.0:  # NaN fails too
            raise ValueError(f"max_distance must be a cosine distance in [0, 2], got {d}")


class Searcher:
    """Search over a ``Corpus`` (or one open pack). ``embedder`` is None when dense search
    cannot run; ``loading``: the embedder, still loading in a worker thread
    (``kbpack.model.load``), which becomes ``embedder`` when a search first needs it."""

    def __init__(
        self,
        corpus: Corpus | PackReader,
        embedder: Any | None,
        notes: Sequence[str] = (),
        loading: ModelLoad | None = None,
    ) -> None:
        self.corpus: Corpus = PackCorpus(corpus) if isinstance(corpus, PackReader) else corpus
        self._embedder = embedder
        self._loading = loading
        self._ahead: ModelLoad | None = None  # the finished load, holding the query it embedded
        self.notes = list(notes)
        # False: words the pack never mentions are reported but refuse nothing
        # (bench/shipped_search.py --no-absent, the paired comparison); set before a query
        self.use_absent = True
        # A cross-encoder (kbpack.model.rerank.Reranker) that reorders the top of the list, or None.
        self.reranker: Any | None = None

    @property
    def r(self) -> PackReader:
        """The reader of a one-pack corpus (the first pack's, for a set)."""
        c: Any = self.corpus
        return c.r if hasattr(c, "r") else c.members[0].r

    @property
    def analyzer_name(self) -> str | None:
        return self.corpus.analyzer_name

    @property
    def query_prefix(self) -> str:
        return self.corpus.query_prefix()

    # -- the model ------------------------------------------------------------------------------
    @property
    def embedder(self) -> Any | None:
        """The query-side embedder (None: dense search cannot run); waits for a running load
        and raises its error."""
        if self._loading is not None:
            loading, self._loading = self._loading, None
            self._embedder = loading.result()
            self._ahead = loading
        return self._embedder

    @embedder.setter
    def embedder(self, value: Any | None) -> None:
        self.finish_loading()
        self._embedder = value

    def finish_loading(self) -> None:
        """Wait for a model still loading (its error, if any, is left to the next search)."""
        if self._loading is not None:
            self._loading.wait()

    def _loading_now(self) -> bool:
        return self._loading is not None and self._loading.running

    def prepare(self) -> None:
        """Load now what every query needs (the vectors, the baked BM25 postings), so that a
        long-lived server pays for them once at start and not on its first requests."""
        self.corpus.prepare(vectors=self.embedder is not None)

    def use_ivf(self, exact: bool, probe: int | None) -> None:
        """Search every vector (``exact``) or through the pack's approximate (IVF) index probing
        ``probe`` lists (None: the pack's default); a pack without an index is always searched
        exactly (``kbpack query --exact/--probe``, ``Pack.search(exact=, probe=)``)."""
        self.corpus.use_ivf(exact, probe)

    def query_vector(self, query: str) -> np.ndarray:
        """The query's unit vector (float32), embedded alone."""
        assert self.embedder is not None
        text = self.query_prefix + query
        # embedded by the loading thread right after the load (``ModelLoad.ahead``), or here
        ahead = self._ahead.vector(text) if self._ahead is not None else None
        vector = ahead if ahead is not None else self.embedder.embed([text])[0]
        return np.asarray(vector, dtype=np.float32)

    def query_vectors(self, queries: Sequence[str], together: bool = False) -> np.ndarray:
        """The queries' unit vectors, (len, dims) float32: each embedded alone (the vector
        ``search`` uses), or ``together`` in ONE embedder call (faster; see the module doc)."""
        if len(queries) == 1 or not together:
            return np.stack([self.query_vector(q) for q in queries])
        assert self.embedder is not None
        vectors = self.embedder.embed([self.query_prefix + q for q in queries])
        return np.asarray(vectors, dtype=np.float32)

    # -- the query ------------------------------------------------------------------------------
    def search(
        self,
        query: str,
        k: int = 5,
        mode: str = "hybrid",
        max_distance: float | None = None,
        refuse: bool = True,
        doc: str | None = None,
        kind: str | None = None,
        section: str | None = None,
        context: str = "chunk",
        rerank_top: int | None = None,
    ) -> SearchResponse:
        """``rerank_top``: with a reranker set, how many of the results that pass the refusal
        gate it scores and reorders (default ``kbpack.model.rerank.DEFAULT_TOP``)."""
        request = SearchRequest(
            query, k, mode, max_distance, refuse, doc, kind, section, context, rerank_top
        )
        return self.search_many([request])[0]

    def search_many(
        self,
        requests: Sequence[SearchRequest],
        vectors: np.ndarray | None = None,
        embed_together: bool = False,
    ) -> list[SearchResponse]:
        """Answer ``requests`` together, one dense pass for all of them; row ``i`` of
        ``vectors`` is request ``i``'s query vector, else ``query_vectors`` embeds them."""
        queries = [self.begin(req) for req in requests]
        self.add_dense(queries, vectors, embed_together)
        return [self.end(req, q) for req, q in zip(requests, queries, strict=True)]

    # A search in three steps, so that a server runs only the shared one in its batch worker
    # (``kbpack.serve.library.Batches``) and each request's own steps in the request's thread:
    def begin(self, req: SearchRequest) -> Query:
        """The request checked and its lists that need no query vector (BM25, the gates)."""
        req.check()
        return self._lexical(req)

    def add_dense(
        self,
        queries: Sequence[Query],
        vectors: np.ndarray | None = None,
        embed_together: bool = False,
    ) -> None:
        """The dense stage of ``queries`` (from ``begin``) in one pass over the vectors; row
        ``i`` of ``vectors`` is query ``i``'s vector, else ``query_vectors`` embeds them."""
        dense = [i for i, q in enumerate(queries) if q.dense_wanted]
        if not dense or self.embedder is None:
            return
        if vectors is None:
            qv = self.query_vectors([queries[i].text for i in dense], embed_together)
        else:
            qv = np.asarray(vectors, dtype=np.float32)[dense]
        for i, d, v in zip(dense, self._dense_scores(qv), qv, strict=True):
            queries[i].dense, queries[i].vector = d, v

    def end(self, req: SearchRequest, q: Query) -> SearchResponse:
        """The answer to ``req`` from its lists (``begin``, ``add_dense``)."""
        if q.dense_wanted and q.dense is None and self.embedder is None:
            q.lexical_only = True
            if req.mode == "dense":  # the BM25 list did not run before
                q.terms = self.corpus.terms(req.query)
                q.bm_ids, q.bm_scores = self._top_bm25(q.terms, q.mask)
        return finish(self, req, q)

    def _lexical(self, req: SearchRequest) -> Query:
        """What does not need the query vector, run first: with the model still loading in a
        worker thread (``kbpack.model.load``), it runs meanwhile."""
        c = self.corpus
        q = Query(req.query, c.mask(req.doc, req.kind, req.section))
        q.dense_wanted = req.mode != "bm25"
        if q.dense_wanted and self._loading is not None:
            self._loading.ahead(self.query_prefix + req.query)  # embedded right after the load
        if req.mode != "dense":
            q.terms = c.terms(req.query)
            q.bm_ids, q.bm_scores = self._top_bm25(q.terms, q.mask)
        if req.refuse and req.mode == "hybrid":
            q.gate = self.identifier_gate(req.query)
        q.words = set(analyzed_content_terms(req.query, c.analyzer_name))
        q.foreign = foreign_query(req.query)
        q.suggestions = self.spelling(req.query)
        if q.dense_wanted:
            if words.misses_a_word(req.query, c.analyzer_name, c.doc_freq):
                preload_word_lists()  # absent_words reads the lists: start now, while it loads
            c.read_ahead(self._loading_now)
        return q

    def _top_bm25(
        self, terms: Sequence[Term], mask: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        return top_k_exact(terms, self.corpus.n_chunks(), CANDIDATES, mask)

    def _dense_scores(self, vectors: np.ndarray) -> list[DenseScores]:
        """The dense stage: each query vector's ``DenseScores``, its top ``CANDIDATES`` (no
        filter) exact from the start; one pass over the vectors for the whole batch."""
        c = self.corpus
        out = [c.dense_scores(vectors[0])] if len(vectors) == 1 else c.dense_scores_many(vectors)
        for d in out:
            d.top(CANDIDATES)
        return out

    def check_dense(self, q: Query, ids: list[int]) -> None:
        """Re-score the chunks a search returns from checksummed reads and refuse the pack when
        they differ from the scan's: the scan reads the stored bytes without HDF5's Fletcher-32
        check (``kbpack/pack/vector_scan.py``), so this is what keeps every dense score a query
        shows checked (spec §1.2)."""
        if not ids or q.dense is None or q.vector is None:
            return
        rows = np.asarray(ids, dtype=np.int64)
        want_score, want_cos = self.corpus.checked_scores(q.vector, rows)
        for element, got, want in (
            ("/vectors/data", q.dense.cos[rows], want_cos),
            ("/pieces/data", q.dense.score[rows], want_score),
        ):
            bad = np.flatnonzero(~(np.abs(got - want) <= SCAN_TOLERANCE))
            if bad.size:
                raise DamagedDataError(
                    self.corpus.where,
                    element,
                    f"the vectors of chunk {int(rows[bad[0]])} read without and with their "
                    "checksum differ",
                )

    # -- the corpus's words (did you mean, words it never mentions, the identifier gate) --------
    def spelling(self, query: str) -> list[Suggestion]:
        return words.spelling(query, self.corpus.doc_freq, self.corpus.near_terms)

    def absent_words(self, query: str) -> list[str]:
        c = self.corpus
        return words.absent_words(query, c.analyzer_name, c.doc_freq, c.near_terms)

    def gate_terms(self, query: str) -> list[str]:
        c = self.corpus
        return gating.gate_terms(query, c.n_chunks(), c.doc_freq, c.header_freq)

    def identifier_gate(self, query: str) -> IdentifierGate | None:
        c = self.corpus
        return gating.identifier_gate(query, c.n_chunks(), c.doc_freq, c.header_freq)

    def distance_counts(self, query: str, content: str) -> bool:
        """Whether a result's distance may pass the threshold on its own: always, except for a
        ``foreign_query``, whose results must also share a content word with it."""
        if not foreign_query(query):
            return True
        terms = set(analyzed_content_terms(query, self.analyzer_name))
        return gating.shares_content_word(content, terms, self.analyzer_name)

    absent_vetoes = staticmethod(gating.absent_vetoes)

    # -- reading the corpus (the CLI's filters, calibration, benches and tests) -----------------
    def n_chunks(self) -> int:
        return self.corpus.n_chunks()

    def doc_freq(self, term: str) -> int:
        return self.corpus.doc_freq(term)

    def default_threshold(self) -> float:
        return self.corpus.default_threshold()

    def count_matching(self, doc: str | None, kind: str | None, section: str | None) -> int:
        """How many chunks the filters keep (the CLI refuses filters that keep none)."""
        mask = self.corpus.mask(doc, kind, section)
        return self.corpus.n_chunks() if mask is None else int(mask.sum())

    def chunk_content(self, chunk: int) -> str:
        return self.corpus.chunk_content(chunk)

    def copy_members(self, chunk: int) -> list[int]:
        return self.corpus.copy_members(chunk)

    def dense_scores(self, query: str) -> DenseScores:
        """The query's ``DenseScores`` (every chunk; exact on its top ``CANDIDATES``)."""
        return self._dense_scores(self.query_vector(query)[None])[0]

    def dense_similarities(self, query: str) -> np.ndarray:
        """The query's dense score for every chunk (float32), higher = closer: the cosine, or in
        a pack with pieces its blend with the best piece's (``kbpack/search/dense.py``). Exact
        on the top ``CANDIDATES``; elsewhere within ``DenseScores.error`` of it."""
        return self.dense_scores(query).score

    def dense_distances(self, query: str) -> np.ndarray:
        """Cosine distance of the query to every chunk's own vector: what the refusal threshold
        (and calibration) reads, with or without pieces."""
        return 1.0 - self.dense_scores(query).cos

    def _bm25_terms(self, query: str) -> Sequence[Term]:
        return self.corpus.terms(query)

    def _bm25(self, query: str, mask: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """The BM25 top ``CANDIDATES``: (chunk ids, scores), best first."""
        return self._top_bm25(self.corpus.terms(query), mask)

    def _bm25_all(self, query: str, mask: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Every chunk sharing a term with the query: (chunk ids ascending, BM25 scores)."""
        terms = self.corpus.terms(query)
        ids, scores = accumulate([(t.ids, t.contrib) for t in terms], self.corpus.n_chunks())
        if mask is not None and ids.size:
            keep = mask[ids]
            ids, scores = ids[keep], scores[keep]
        return ids, scores

    def _dense(self, query: str, mask: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """The dense top ``CANDIDATES``: (chunk ids, cosine distances), best first."""
        d = self.dense_scores(query)
        top = d.top(CANDIDATES, mask)
        return top, 1.0 - d.cos[top]

    def _result(self, rank: int, c: int, *args: Any) -> Result:
        """``args``: score, distance, BM25 rank, dense rank (``Ranking``), then the context."""
        *scores, context = args
        return self.corpus.result(c, Ranking(rank, *scores), context)
