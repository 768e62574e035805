"""Query a pack: BM25 and dense candidates, fused by scores, gated by a refusal threshold,
returned as citations.

Fusion (``kbpack.search.fusion``, docs/search.md): over the dense top 100 union the BM25 top 100,
``0.8 * minmax(cos) + 0.2 * bm25 / max bm25``. ``rrf`` stays here for bench/fusion.py, which
measures the rule against the reciprocal-rank rules it replaced.

Refusal gate, per query: the pack answers when some candidate is evidence of an answer and no
query word is one the pack never mentions (``kbpack.search.absent``: then the nearest chunk
must be within ``NEAR_DISTANCE``); an answered query lists the top k of the ranking. A
candidate is evidence when its cosine distance is at most the threshold; in
hybrid mode a chunk may also pass on lexical evidence (``IdentifierGate``): it holds every
code-like query term, one of them is rare in the pack, and the query's content words it holds
carry at least half of the query's IDF weight. A year or an acronym alone ("who won the world
cup in 2018") is not such evidence: the words it does not hold weigh more. In bm25 mode (or a
lexical-only fallback) a chunk must share a content word with the query, not "how" or "the".
A query in a language the model does not read (``foreign_query``: Italian function words and
no English one; the default model is English-only and puts any two Italian texts close) needs
that shared content word too: its distance alone is no evidence.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from kbpack.choices import MODES
from kbpack.errors import UsageError
from kbpack.pack import format as F
from kbpack.pack.bm25_store import TermLookup
from kbpack.pack.read import DamagedDataError, PackReader
from kbpack.pack.vector_scan import simsimd_module, sorted_unique
from kbpack.search.absent import NEAR_DISTANCE, absent_words, letter_words
from kbpack.search.absent import preload as preload_word_lists
from kbpack.search.bm25 import BM25Index, accumulate, length_norms, read_term_lists
from kbpack.search.bm25_top import Term, scores_at, top_k_exact
from kbpack.search.dense import DenseScores, PieceIndex, checked_scores, rounded_chunk_scores
from kbpack.search.fusion import RULE as FUSION_RULE
from kbpack.search.fusion import convex
from kbpack.search.ivf import ivf_dense_scores
from kbpack.search.typos import Suggestion, best_suggestions, checkable, near_terms
from kbpack.text.analyze import STEM_MARK, analyzer, tokenize
from kbpack.text.stopwords import ENGLISH, ITALIAN, STOPWORDS

if TYPE_CHECKING:
    from kbpack.model.load import ModelLoad

RRF_K = 60
CANDIDATES = 100  # per list; the fused list is cut to k afterwards
RARE_SHARE = 0.01  # an identifier in at most 1% of chunks (or RARE_MIN) may open the gate
RARE_MIN = 5
EVIDENCE_SHARE = 0.5  # of the query's content-word IDF weight a chunk must hold to pass on words
# not_in_pack: a word this long one edit from a pack term is that term mistyped ("lgos" for
# logs); a 3-letter word is one edit from too many words to say which (zsh from ssh)
TYPO_MIN_LETTERS = 4
ALSO_MAX = 20  # other locations listed per result (a boilerplate paragraph may have hundreds)
# the scan (simsimd or numpy blocks) and the checked re-score (a numpy matmul) round differently
# by ~1e-7; a damaged byte that HDF5's checksum would not flag is not what this compares for
SCAN_TOLERANCE = 1e-5

# An inner capital (PostgreSQL, GitHub) is not code-like: names like these are ordinary words
# in questions and made the gate answer out-of-domain queries (measured by kbpack calibrate).
_CODE_LIKE = re.compile(r"(^[-%.#$@]\S)|_|\d|^[A-Z]{2,}$")


@dataclass
class Result:
    rank: int
    chunk: int
    doc: str
    title: str  # the document's title
    section: str
    start: int
    end: int
    page: int | None
    locator: str
    distance: float | None
    bm25_rank: int | None
    dense_rank: int | None
    score: float
    content: str
    pack: str | None = None  # the pack file, when several packs are searched as one
    rerank_score: float | None = None  # the cross-encoder's relevance, when --rerank ran
    # locators of the other copies of this passage (another copy of the document: HTML and PDF
    # of one manual): the pack's stored group (/copies), or chunks of the same words
    also: list[str] = field(default_factory=list)
    # those of ``also`` that ranked below this result and were folded into it (each would
    # otherwise have taken a result slot of its own)
    collapsed: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["from"] = d.pop("start")
        d["to"] = d.pop("end")
        if d["pack"] is None:
            del d["pack"]
        if d["rerank_score"] is None:
            del d["rerank_score"]
        return d


@dataclass
class SearchResponse:
    query: str
    mode: str
    results: list[Result]
    answered: bool
    threshold: float | None
    lexical_only: bool = False
    notes: list[str] = field(default_factory=list)
    fusion: str | None = (
        None  # the hybrid rule that ordered the results (kbpack.search.fusion.RULE)
    )
    suggestions: list[Suggestion] = field(
        default_factory=list
    )  # "did you mean" (kbpack.search.typos)
    # query words the pack never mentions that are rare in the query's language (search/absent.py)
    not_in_pack: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "mode": self.mode,
            "answered": self.answered,
            "results": [r.as_dict() for r in self.results],
            "threshold": self.threshold,
            "lexical_only": self.lexical_only,
            "fusion": self.fusion,
            "suggestions": [x.as_dict() for x in self.suggestions],
            "not_in_pack": list(self.not_in_pack),
            "notes": self.notes,
        }


def rrf(
    ranked: Sequence[Sequence[int]], weights: Sequence[float], k: int = RRF_K
) -> list[tuple[int, float]]:
    """Weighted reciprocal rank fusion: score(c) = sum of w / (k + rank of c in each list).

    Ranks are 1-based; ties are broken by ascending chunk id so results are deterministic.
    """
    fused: dict[int, float] = {}
    for items, w in zip(ranked, weights, strict=True):
        for rank, c in enumerate(items, 1):
            fused[c] = fused.get(c, 0.0) + w / (k + rank)
    return sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))


def code_like_terms(query: str) -> list[str]:
    """Query words that look like identifiers or codes: they make lexical evidence decisive."""
    words = [w.strip("\"'`()[]{},;:!?") for w in query.split()]
    return [w for w in words if w and _CODE_LIKE.search(w)]


def heading_only(words: Sequence[str], result: Result) -> bool:
    """A chunk whose words are all words of its own heading path or document title (a heading
    and a rule of dashes, say) is no answer on its own."""
    heading = set(tokenize(result.section)) | set(tokenize(result.title))
    return not words or set(words) <= heading


# Function words of one language only ("il", "della" vs "the", "what"; "a", "in", "no" are
# both), of two letters or more: "-l" in "ls -l" tokenizes to "l" too, and is no Italian.
_ITALIAN_ONLY = frozenset(w for w in ITALIAN - ENGLISH if len(w) > 1)
_ENGLISH_ONLY = frozenset(w for w in ENGLISH - ITALIAN if len(w) > 1)


def foreign_query(query: str) -> bool:
    """The query is written in a language the default model does not read: it holds an Italian
    function word and no English one. A bare identifier or keyword query holds neither."""
    tokens = set(tokenize(query))
    return not tokens.isdisjoint(_ITALIAN_ONLY) and tokens.isdisjoint(_ENGLISH_ONLY)


def content_terms(query: str) -> list[str]:
    """The query's distinct BM25 terms that are not stopwords, in order of appearance."""
    return [t for t in dict.fromkeys(tokenize(query)) if t not in STOPWORDS]


def analyzed_content_terms(query: str, analyzer_name: str | None) -> list[str]:
    """``content_terms`` under a pack's analyzer: its stem terms too, except stopwords' stems."""
    terms = dict.fromkeys(analyzer(analyzer_name).terms(query))
    return [t for t in terms if t.removeprefix(STEM_MARK) not in STOPWORDS]


def idf(df: int, n: int) -> float:
    """BM25's (Lucene's) idf; a term no chunk holds weighs the most."""
    return float(np.log1p((n - df + 0.5) / (df + 0.5)))


@dataclass(frozen=True)
class IdentifierGate:
    """Lexical evidence that lets a hybrid result through whatever its distance.

    ``codes``: the query's code-like terms (one of them rare in the pack); ``weights``: the IDF of
    each content word of the query (stopwords left out). A chunk opens the gate when it holds
    every code as whole tokens and the content words it holds weigh at least ``EVIDENCE_SHARE``
    of the total: the identifier must be what the question is about, not a detail of it.
    """

    codes: tuple[str, ...]
    weights: tuple[tuple[str, float], ...]

    def opens(self, content: str) -> bool:
        tokens = set(tokenize(content))
        if not all(set(tokenize(code)) <= tokens for code in self.codes):
            return False
        total = sum(w for _, w in self.weights)
        held = sum(w for t, w in self.weights if t in tokens)
        return held >= EVIDENCE_SHARE * total


class Searcher:
    """Search over one open pack. ``embedder`` is None when dense search cannot run."""

    def __init__(
        self,
        reader: PackReader,
        embedder: Any | None,
        notes: Sequence[str] = (),
        loading: ModelLoad | None = None,
    ) -> None:
        """``loading``: the embedder, still loading in a worker thread (``kbpack.model.load``);
        it becomes ``embedder`` when a search first needs it."""
        self.r = reader
        self._embedder = embedder
        self._loading = loading
        self.notes = list(notes)
        self._lookup: TermLookup | None = None
        self._qcache: tuple[str, np.ndarray] | None = None
        self._norms: np.ndarray | None = None
        self._index: BM25Index | None = None
        self._postings: tuple[TermLookup, np.ndarray, Any, Any] | None = None
        self._dense_rows: tuple[np.ndarray, Any] | None = None
        # False: read every term's postings even where the pack holds dense rows of the common
        # terms (/bm25/dense_tf; bench/bm25_pack.py's comparison); set before the first query
        self.use_dense = True
        self._bm25_queries = 0
        # the text -> terms rule the postings were built with; queries must use the same
        self.analyzer_name: str | None = reader.bm25_analyzer
        self._piece_index: PieceIndex | None = None
        # False: score by chunk vectors alone even in a pack with pieces (bench/pieces.py's
        # paired comparison); set before the first query
        self.use_pieces = True
        # False: ignore the pack's stored copy groups (/copies) and collapse identical words
        # only, as kbpack 0.2.0 did (bench/duplicates.py's paired comparison)
        self.use_copies = True
        # False: words the pack never mentions are reported but refuse nothing
        # (bench/shipped_search.py --no-absent, the paired comparison); set before a query
        self.use_absent = True
        self._dense_cache: tuple[str, DenseScores] | None = None
        self._indptr: np.ndarray | None = None  # /bm25/indptr, checked (``indptr``)
        self._ahead: ModelLoad | None = None  # the finished load, holding the query it embedded
        self._query_prefix: str | None = None  # read when a query is first embedded
        # A cross-encoder (kbpack.model.rerank.Reranker) that reorders the top of the list, or None.
        self.reranker: Any | None = None
        # IVF hook: True searches every vector even where the pack has an approximate index
        # (``kbpack query --exact``); ``probe``: the lists probed (None: the pack's default)
        self.exact = False
        self.probe: int | None = None
        self._centroids: np.ndarray | None = None

    @property
    def query_prefix(self) -> str:
        """The pack's query prefix. It comes from the pack, never from the embedder or the
        caller: a pack built with a prefix cannot be queried without it. Read on first use, so
        that a BM25 query (every ``--mode bm25`` call) does not read ``/model``'s attributes."""
        if self._query_prefix is None:
            model = self.r.model
            self._query_prefix = str(model.get(F.M_QUERY_PREFIX, "")) if model else ""
        return self._query_prefix

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
        if self.embedder is not None:
            self.r.stored_rows(F.VEC_DATA)  # maps the file, reads the chunk index
            self._pieces()
            if not self.exact:  # IVF hook: the index read and checked once (None without)
                self.r.ivf_index()
        if self.r.counts.get("chunks", 0):
            self._bm25_queries = max(self._bm25_queries, 1)  # the next call bakes
            self._bm25("", None)

    # -- the lists ---------------------------------------------------------------------------
    def _bm25(self, query: str, mask: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """The BM25 top ``CANDIDATES``: (chunk ids, scores), best first."""
        return top_k_exact(self._bm25_terms(query), self.n_chunks(), CANDIDATES, mask)

    def _bm25_all(self, query: str, mask: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Every chunk sharing a term with the query: (chunk ids ascending, BM25 scores)."""
        terms = self._bm25_terms(query)
        ids, scores = accumulate([(t.ids, t.contrib) for t in terms], self.n_chunks())
        if mask is not None and ids.size:
            keep = mask[ids]
            ids, scores = ids[keep], scores[keep]
        return ids, scores

    def _bm25_terms(self, query: str) -> Sequence[Term]:
        """The query's terms held by some chunk, in the query's order, with their postings'
        BM25 contributions: what ``top_k_exact`` ranks and ``scores_at`` sums."""
        r = self.r
        k1, b = r.bm25_params
        if self._norms is None:  # per pack, not per query
            self._norms = length_norms(r.column(F.BM25_DOC_LEN), k1, b)
        if self._postings is None:
            # (lookup, indptr, chunk, tf): postings are h5py datasets, sliced per term; kept,
            # since looking a dataset up by path costs as much as a baked query's sums
            self._postings = (
                self.lookup(),
                self.indptr(),
                r.dataset(F.BM25_CHUNK),
                r.dataset(F.BM25_TF),
            )
            self._dense_rows = r.bm25_dense() if self.use_dense else None
        self._bm25_queries += 1
        if self._bm25_queries == 2 and self._index is None:
            # A second query means batch mode or the API: bake every posting's score once (one
            # read of the postings) so each later query only sums slices (bench/bm25.py).
            self._index = BM25Index(
                *self._postings,
                r.column(F.BM25_DOC_LEN),
                k1=k1,
                b=b,
                analyzer_name=self.analyzer_name,
            )
        if self._index is not None:
            return self._index.term_lists(query)
        # One query: read only its terms' postings (indptr is one int per term, read whole), the
        # common ones as dense rows when the pack holds them.
        return read_term_lists(
            query, *self._postings, self._norms, k1, self.analyzer_name, dense=self._dense_rows
        )

    def _query_vector(self, query: str) -> np.ndarray:
        """The query's unit vector, embedded once per query string."""
        assert self.embedder is not None
        if self._qcache is None or self._qcache[0] != query:
            text = self.query_prefix + query
            # embedded by the loading thread right after the load (``_embed_ahead``), or here
            ahead = self._ahead.vector(text) if self._ahead is not None else None
            vector = ahead if ahead is not None else self.embedder.embed([text])[0]
            self._qcache = (query, vector.astype(np.float32))
        return self._qcache[1]

    def dense_similarities(self, query: str) -> np.ndarray:
        """The query's dense score for every chunk (float32, one per chunk row), higher = closer.

        The one place dense rankings come from: ``_dense`` and hybrid fusion read it. In a pack
        with pieces it blends each chunk's cosine with its best piece's (``kbpack/search/dense.py``);
        otherwise it is the cosine. The refusal gate reads ``dense_distances`` instead.
        Exact (the float32 scan's) on the top ``CANDIDATES`` and on every chunk a search reads;
        elsewhere within ``DenseScores.error`` of it (``kbpack/search/dense.py``).
        """
        return self._dense_pair(query)[0]

    def dense_distances(self, query: str) -> np.ndarray:
        """Cosine distance of the query to every chunk's own vector: what the refusal threshold
        (and calibration) reads, with or without pieces. Exact where ``dense_similarities``
        is."""
        return 1.0 - self._dense_pair(query)[1]

    def _dense_pair(self, query: str) -> tuple[np.ndarray, np.ndarray]:
        """(dense score, chunk cosine) of every chunk (``dense_similarities``)."""
        d = self._dense_scores(query)
        return d.score, d.cos

    def _dense_scores(self, query: str) -> DenseScores:
        """The query's ``DenseScores``, computed once per query string; its top ``CANDIDATES``
        (no filter) exact from the start."""
        if self._dense_cache is None or self._dense_cache[0] != query:
            d = self._scores(self._query_vector(query))
            # a NaN or infinite component (a pack whose digests were rewritten to match: only
            # verify's invariants would say so) must be one line, not a fusion ValueError
            for element, values in ((F.VEC_DATA, d.cos), (F.PIECE_DATA, d.score)):
                if d.scored is not None:  # IVF hook: an approximate pass scored these rows only
                    values = np.where(d.scored, values, 0.0)
                if np.isfinite(values).all():  # (no index array to build: the usual case)
                    continue
                bad = np.flatnonzero(~np.isfinite(values))
                if bad.size:
                    raise DamagedDataError(
                        self.r.where,
                        element,
                        f"the vectors of chunk {int(bad[0])} are not finite (NaN or infinity)",
                    )
            d.top(CANDIDATES)
            self._dense_cache = (query, d)
        return self._dense_cache[1]

    def use_ivf(self, exact: bool, probe: int | None) -> None:
        """IVF hook: search every vector (``exact``) or through the pack's approximate index
        probing ``probe`` lists (None: the pack's default); a pack without an index is always
        searched exactly. A pack set passes it to each pack's searcher."""
        if probe is not None and probe < 1:
            raise UsageError(f"--probe {probe}: give a number of lists of at least 1")
        if (exact, probe) != (self.exact, self.probe):
            self.exact, self.probe, self._dense_cache = exact, probe, None
        for member in getattr(self, "members", ()):
            member.use_ivf(exact, probe)

    def _scores(self, q: np.ndarray) -> DenseScores:
        """(dense score, cosine) of the unit query vector for every chunk of this pack, from one
        float16 pass over the vectors (exact where ``DenseScores`` says)."""
        # --- IVF hook (issue 35 item 4): where the dense stage picks its candidates. A pack
        # with an approximate index (/ivf) is searched through it (the probed lists' chunks
        # only) unless exact search was asked for (``self.exact``); kbpack/search/ivf.py.
        index = None if self.exact else self.r.ivf_index()
        if index is not None:
            if self._centroids is None:
                self._centroids = np.ascontiguousarray(index.centroids)
            probe = self.probe or int(self.r.attrs(F.IVF).get(F.IVF_PROBE_ATTR, 0)) or None
            return ivf_dense_scores(
                self._vectors(q), index, self._centroids, q, self._pieces(), probe
            )
        # --- end of the IVF hook
        return rounded_chunk_scores(self._vectors(q), q, self._pieces())

    def _checked_scores(self, q: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``_scores`` of the chunks ``ids`` from vectors read through HDF5's checksum."""
        return checked_scores(self._vectors(q), q, self._pieces(), ids)

    def _vectors(self, q: np.ndarray) -> Any:
        """``/vectors/data`` as stored, its rows as wide as the query vector (and the pieces'
        as wide as the chunks'). The width is in the dataset's dataspace, in the object
        header, where no checksum reaches: one flipped bit made it 385 and the scan raised
        "Vector dimensions don't match" (a header bit-flip sweep of the golden pack)."""
        stored = self.r.stored_rows(F.VEC_DATA)
        width = stored.shape[1] if len(stored.shape) == 2 else -1
        if width != q.shape[-1]:
            raise DamagedDataError(
                self.r.where,
                F.VEC_DATA,
                f"rows of {width} numbers, the query model embeds {q.shape[-1]}",
            )
        if self.use_pieces and self.r.has_pieces:
            pieces = self.r.stored_rows(F.PIECE_DATA)
            if len(pieces.shape) != 2 or pieces.shape[1] != width:
                raise DamagedDataError(
                    self.r.where, F.PIECE_DATA, f"rows not {width} numbers wide, as the chunks' are"
                )
        return stored

    def _check_dense(self, query: str, ids: list[int]) -> None:
        """Re-score the chunks a search returns from checksummed reads and refuse the pack when
        they differ from the scan's: the scan reads the stored bytes without HDF5's Fletcher-32
        check (``kbpack/pack/vector_scan.py``), so this is what keeps every dense score a query shows
        checked (spec §1.2)."""
        if not ids:
            return
        score, cos = self._dense_pair(query)
        rows = np.asarray(ids, dtype=np.int64)
        want_score, want_cos = self._checked_scores(self._query_vector(query), rows)
        for element, got, want in (
            (F.VEC_DATA, cos[rows], want_cos),
            (F.PIECE_DATA, score[rows], want_score),
        ):
            bad = np.flatnonzero(~(np.abs(got - want) <= SCAN_TOLERANCE))
            if bad.size:
                raise DamagedDataError(
                    self.r.where,
                    element,
                    f"the vectors of chunk {int(rows[bad[0]])} read without and with their "
                    "checksum differ",
                )

    def _pieces(self) -> PieceIndex | None:
        """The pack's piece vectors grouped by chunk, loaded once; None in a pack without."""
        if not self.use_pieces:
            return None
        if self._piece_index is None and self.r.has_pieces:
            self._piece_index = PieceIndex.from_columns(
                self.r.stored_rows(F.PIECE_DATA), self.r.column(F.PIECE_CHUNK)
            )
        return self._piece_index

    def _dense(self, query: str, mask: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """The dense top ``CANDIDATES``: (chunk ids, cosine distances), best first."""
        top = self._dense_scores(query).top(CANDIDATES, mask)
        return top, self.dense_distances(query)[top]

    # -- filters -----------------------------------------------------------------------------
    def _mask(self, doc: str | None, kind: str | None, section: str | None) -> np.ndarray | None:
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

    def count_matching(self, doc: str | None, kind: str | None, section: str | None) -> int:
        """How many chunks the filters keep (the CLI refuses filters that keep none)."""
        mask = self._mask(doc, kind, section)
        return self.r.counts.get("chunks", 0) if mask is None else int(mask.sum())

    # -- the query ---------------------------------------------------------------------------
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
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}")
        if max_distance is not None and not 0.0 <= max_distance <= 2.0:  # NaN fails too
            raise ValueError(
                f"max_distance must be a cosine distance in [0, 2], got {max_distance}"
            )
        notes = list(self.notes)
        threshold = self.default_threshold() if max_distance is None else max_distance
        mask = self._mask(doc, kind, section)
        if mode != "bm25" and self._loading is not None:
            self._loading.ahead(self.query_prefix + query)  # embedded right after the load

        # What does not need the query vector runs first: with the model still loading in a
        # worker thread (``kbpack.model.load``), it runs meanwhile.
        bm_ids, bm_scores = np.zeros(0, np.int64), np.zeros(0, np.float64)
        de_ids = np.zeros(0, np.int64)
        sims: np.ndarray | None = None
        bm_terms: Sequence[Term] = []
        if mode != "dense":
            bm_terms = self._bm25_terms(query)
            bm_ids, bm_scores = top_k_exact(bm_terms, self.n_chunks(), CANDIDATES, mask)
        gate = self.identifier_gate(query) if (refuse and mode == "hybrid") else None
        words = set(analyzed_content_terms(query, self.analyzer_name))
        foreign = foreign_query(query)
        suggestions = self.spelling(query)
        if mode != "bm25":
            if self._misses_a_word(query):  # absent_words below reads the lists: start now,
                preload_word_lists()  # while the model loads
            self._read_ahead()

        lexical_only = mode != "bm25" and self.embedder is None  # waits for a running load
        mode_used = "bm25" if lexical_only else mode
        if lexical_only and mode == "dense":  # the BM25 list did not run above
            bm_terms = self._bm25_terms(query)
            bm_ids, bm_scores = top_k_exact(bm_terms, self.n_chunks(), CANDIDATES, mask)
        if mode_used != "hybrid":
            gate = None
        if mode_used in ("hybrid", "dense"):
            sims = self.dense_similarities(query)
            de_ids = self._dense_scores(query).top(CANDIDATES, mask)
        bm_rank = {int(c): i + 1 for i, c in enumerate(bm_ids)}
        de_rank = {int(c): i + 1 for i, c in enumerate(de_ids)}

        ordered: list[tuple[int, float]]
        if mode_used == "hybrid":
            assert sims is not None
            candidates = sorted_unique(np.concatenate((de_ids, bm_ids)))
            self._dense_scores(query).make_exact(candidates)  # the BM25 ones may not be yet
            # BM25 of every candidate, not only of the BM25 top 100 (0 = no shared term)
            lexical = scores_at(bm_terms, candidates)
            fused_ids, fused = convex(candidates, sims[candidates], lexical)
            ordered = [(int(c), float(f)) for c, f in zip(fused_ids, fused, strict=True)]
        elif mode_used == "dense":
            assert sims is not None
            ordered = [(int(c), float(sims[c])) for c in de_ids]
        else:
            ordered = [(int(c), float(x)) for c, x in zip(bm_ids, bm_scores, strict=True)]
        not_in_pack = self.absent_words(query)
        # the refusal distance is the chunk's own (with pieces it differs from 1 - score)
        distances = None if sims is None else self.dense_distances(query)
        dist = {} if distances is None else {c: float(distances[c]) for c, _ in ordered}

        def evidence(c: int) -> bool:
            """``c`` on its own says the pack answers the query (the per-chunk rules)."""
            if mode_used == "bm25":
                return c in bm_rank and self._holds_any(c, words)
            limit = threshold if max_distance is not None else self._threshold(c)
            near = dist.get(c, 2.0) <= limit
            if near and (not foreign or self._holds_any(c, words)):
                return True
            return gate is not None and self._gate_opens(c, gate)

        # Refusal decides per query (issue 32): a pack answers the query when one of its
        # candidates is evidence of an answer and no query word says the pack is about something
        # else; then the ranking decides what is shown, so an exact lexical match is never hidden
        # by its own distance. Where distance is no evidence (bm25 mode: a chunk sharing only
        # "the"; a query in a language the model does not read) each result needs its content
        # word. Several packs searched as one: each pack answers or not by its own threshold.
        answering: set[int] = set()
        if refuse and not (self.use_absent and self.absent_vetoes(not_in_pack, dist)):
            for c, _ in ordered:
                who = self._answerer(c)
                if who not in answering and evidence(c):
                    answering.add(who)

        def passes(c: int) -> bool:
            if not refuse:
                return True
            if self._answerer(c) not in answering:
                return False
            return evidence(c) if (mode_used == "bm25" or foreign) else True

        top = 0
        if self.reranker is not None:
            from kbpack.model.rerank import DEFAULT_TOP

            top = DEFAULT_TOP if rerank_top is None else rerank_top
        results: list[Result] = []
        # the chunk id of each result (res.chunk is a row of its own pack when searching a set)
        ids: list[int] = []
        by_words: dict[tuple[str, ...], Result] = {}  # identical words: one result
        by_group: dict[Any, Result] = {}  # the pack's stored copy groups: one result
        for c, score in ordered:
            if len(results) >= max(k, top):
                break
            if not passes(c):
                continue
            res = self._result(
                len(results) + 1, c, score, dist.get(c), bm_rank.get(c), de_rank.get(c), context
            )
            key = tuple(tokenize(res.content))
            if heading_only(key, res):
                continue
            group = self.copy_group(c)
            first = by_words.get(key) or (by_group.get(group) if group is not None else None)
            if first is None:
                first = self._near_copy_in(c, res, ids, results)
            if first is not None:  # a copy of a result above: one result, the place listed
                where = f"{res.pack}: {res.locator}" if res.pack else res.locator
                if res.locator != first.locator or res.pack != first.pack:
                    for listed in (first.collapsed, first.also):
                        if where not in listed:
                            listed.append(where)
                continue
            by_words[key] = res
            if group is not None:
                by_group[group] = res
            results.append(res)
            ids.append(c)
        for c, res in zip(ids, results, strict=True):
            self._list_copies(c, res, context=context)
        if sims is not None:
            self._check_dense(query, ids)
        if top and results:
            results = self._rerank(query, results, top)
        results = results[:k]
        if lexical_only and not notes:
            notes.append("dense search did not run: lexical-only results")
        return SearchResponse(
            query=query,
            mode=mode_used,
            results=results,
            answered=bool(results),
            threshold=None if mode_used == "bm25" else threshold,
            lexical_only=lexical_only,
            notes=notes,
            fusion=FUSION_RULE if mode_used == "hybrid" else None,
            suggestions=suggestions,
            not_in_pack=not_in_pack,
        )

    def _misses_a_word(self, query: str) -> bool:
        """Some letters-only query word is in no chunk (only then are the word lists read)."""
        terms = analyzer(self.analyzer_name).terms
        return any(not any(self.doc_freq(t) > 0 for t in terms(w)) for w in letter_words(query))

    def absent_words(self, query: str) -> list[str]:
        """The query's words this pack never mentions that are rare in the query's language
        (``kbpack.search.absent``), less the typos of words it holds (``typo_of_pack_word``)."""
        terms = analyzer(self.analyzer_name).terms
        found = absent_words(query, lambda w: any(self.doc_freq(t) > 0 for t in terms(w)))
        return [w for w in found if not self.typo_of_pack_word(w)]

    def typo_of_pack_word(self, word: str) -> bool:
        """``word`` (of ``TYPO_MIN_LETTERS`` letters or more) is one edit from a term of the pack
        (a did-you-mean suggestion at distance 1): "jurnal" is journal mistyped, not a name the
        pack never mentions. Refusing it would contradict the suggestion shown beside it."""
        term = tokenize(word)[:1]
        if not term or len(term[0]) < TYPO_MIN_LETTERS or not checkable(term[0]):
            return False
        found = best_suggestions(term[0], self.near_terms(term[0]))
        return found is not None and any(d == 1 for _, d, _ in found.did_you_mean)

    def _answerer(self, chunk: int) -> int:
        """Which pack decides whether ``chunk`` may be shown (a set: the chunk's own)."""
        return 0

    @staticmethod
    def absent_vetoes(not_in_pack: Sequence[str], dist: dict[int, float]) -> bool:
        """A word the pack never mentions refuses the query unless some candidate is at most
        ``NEAR_DISTANCE`` from it (none is, without distances: bm25 mode)."""
        return bool(not_in_pack) and min(dist.values(), default=2.0) > NEAR_DISTANCE

    def _read_ahead(self) -> None:
        """While the model loads in a worker thread: what the dense scan and the citations
        will read anyway (each step only if the load is still running, so that this never
        makes a query wait longer than the load): the vectors' chunk index and mapping, the
        scan kernel's import, the columns and names a result is made of."""
        r = self.r
        steps = [
            lambda: r.stored_rows(F.VEC_DATA) if r.has_vectors else None,
            self._pieces,
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
            lambda: r.copy_groups() if self.use_copies else None,
        ]
        for step in steps:
            if not self._loading_now():
                return
            try:
                step()
            except Exception:  # raised again, in its place, if the query reads it
                return

    # -- copies of one passage (kbpack/pack/copies.py, spec/FORMAT.md /copies) ----------------------
    def copy_group(self, chunk: int) -> Any | None:
        """The stored copy group of ``chunk`` (hashable), or None: no copy, or a pack without
        ``/copies`` (kbpack 0.2.0), where only chunks of identical words are collapsed."""
        groups = self.r.copy_groups() if self.use_copies else None
        if groups is None or groups[chunk] < 0:
            return None
        return int(groups[chunk])

    def copy_members(self, chunk: int) -> list[int]:
        """The other chunks of ``chunk``'s stored group, ascending."""
        groups = self.r.copy_groups() if self.use_copies else None
        if groups is None or groups[chunk] < 0:
            return []
        return [int(x) for x in np.flatnonzero(groups == groups[chunk]) if x != chunk]

    def chunk_locator(self, chunk: int, context: str = "chunk") -> str:
        """The citation of ``chunk`` as ``Result.locator`` says it for ``context``: the
        chunk's characters, or (``"section"``) its whole section's."""
        r = self.r
        doc = r.value(F.CHUNK_DOCUMENT, chunk)
        start, end = self._span(chunk, context)
        page = r.value(F.CHUNK_PAGE, chunk) or None
        return locator(r.string_at(F.DOC_NAME, doc), start, end, page)

    def _span(self, chunk: int, context: str) -> tuple[int, int]:
        """``[from, to)`` of ``chunk`` in its document's text, or of its section's."""
        r = self.r
        if context == "section":
            sec = r.value(F.CHUNK_SECTION, chunk)
            return r.value(F.SEC_FROM, sec), r.value(F.SEC_TO, sec)
        return r.value(F.CHUNK_FROM, chunk), r.value(F.CHUNK_TO, chunk)

    def _near_copy_in(
        self, chunk: int, res: Result, ids: list[int], shown: list[Result]
    ) -> Result | None:
        """A result above that ``res`` (chunk ``chunk``) nearly copies where no stored group
        can say so: in one pack the build-time groups decide (None); a pack set compares
        results of different packs (``SetSearcher``)."""
        return None

    def _list_copies(
        self, chunk: int, res: Result, prefix: str = "", context: str = "chunk"
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

    def spelling(self, query: str) -> list[Suggestion]:
        """ "Did you mean" for each plain query word no chunk holds (never applied to the query)."""
        out = []
        for word in content_terms(query):
            if checkable(word) and self.doc_freq(word) == 0:
                found = best_suggestions(word, self.near_terms(word))
                if found is not None:
                    out.append(found)
        return out

    def near_terms(self, word: str) -> dict[str, tuple[int, int]]:
        """Vocabulary terms close to ``word``: term -> (edit distance, chunks holding it)."""
        indptr = self.indptr()
        try:
            return near_terms(word, self.lookup(), lambda row: int(indptr[row + 1] - indptr[row]))
        except UnicodeDecodeError as e:
            # a vocabulary term that is not UTF-8, digests rewritten to match (bench/fuzz.py
            # packs 41:10672: /bm25/terms_blob poked, UnicodeDecodeError in did-you-mean)
            raise DamagedDataError(
                self.r.where, F.BM25_TERMS_BLOB, f"a term is not valid UTF-8 ({e.reason})"
            ) from e

    def _rerank(self, query: str, results: list[Result], top: int) -> list[Result]:
        """The first ``top`` results scored by the reranker and reordered by its score (ties
        keep the first-stage order); the rest follow unchanged. Which results pass the refusal
        gate was decided before, on the first-stage scores."""
        from kbpack.index.chunk import header
        from kbpack.model.rerank import rerank_text

        head = results[:top]
        texts = [
            rerank_text(header(r.title, r.section.split(" > ") if r.section else []), r.content)
            for r in head
        ]
        scores = self.reranker.score(query, texts)  # type: ignore[union-attr]
        for r, s in zip(head, scores, strict=True):
            r.rerank_score = round(float(s), 6)
        order = sorted(range(len(head)), key=lambda i: (-float(scores[i]), i))
        out = [head[i] for i in order] + results[top:]
        for rank, r in enumerate(out, 1):
            r.rank = rank
        return out

    def gate_terms(self, query: str) -> list[str]:
        """The code-like query terms that may open the refusal gate, or [] when none may.

        They may when at least one of them is rare in this pack (in at most
        ``RARE_SHARE`` of the chunks, or ``RARE_MIN`` chunks): a rare identifier typed exactly is
        an answer; an acronym found everywhere (NULL, JSON) is not evidence of one.
        """
        codes = code_like_terms(query)
        if not codes:
            return []
        limit = max(RARE_MIN, RARE_SHARE * self.n_chunks())
        for code in codes:
            whole = tokenize(code)[:1]
            if whole and 0 < self.doc_freq(whole[0]) <= limit:
                return codes
        return []

    def identifier_gate(self, query: str) -> IdentifierGate | None:
        """The query's lexical evidence rule, or None when no code-like term of it is rare here."""
        codes = self.gate_terms(query)
        if not codes:
            return None
        n = self.n_chunks()
        weights = tuple((t, idf(self.doc_freq(t), n)) for t in content_terms(query))
        return IdentifierGate(tuple(codes), weights)

    def n_chunks(self) -> int:
        return len(self.r.column(F.BM25_DOC_LEN))

    def lookup(self) -> TermLookup:
        """The pack's vocabulary (term -> postings row), read once."""
        if self._lookup is None:
            r = self.r
            blob, offsets = r.column(F.BM25_TERMS_BLOB), r.column(F.BM25_TERMS_OFFSETS)
            # a self-consistent but hostile pack (digests rewritten) can hold any offsets
            if (
                len(offsets) == 0
                or offsets[0] != 0
                or offsets[-1] != len(blob)
                or (len(offsets) > 1 and bool((np.diff(offsets) < 0).any()))
            ):
                raise DamagedDataError(
                    r.where, F.BM25_TERMS_OFFSETS, "not increasing from 0 to the terms' length"
                )
            self._lookup = TermLookup(blob, offsets)
        return self._lookup

    def indptr(self) -> np.ndarray:
        """``/bm25/indptr`` (where each term's postings start), checked once: it must rise from
        0 to the postings count. A self-consistent but hostile pack (digests rewritten) can
        hold any values, and a term's span is read as rows of the postings: a poked value
        asked numpy for an array "too big" (bench/fuzz.py, packs 42:1697)."""
        if self._indptr is None:
            r = self.r
            indptr = r.column(F.BM25_INDPTR)
            postings = len(r.dataset(F.BM25_CHUNK))
            if (
                len(indptr) == 0
                or indptr[0] != 0
                or indptr[-1] != postings
                or (len(indptr) > 1 and bool((np.diff(indptr) < 0).any()))
            ):
                raise DamagedDataError(
                    r.where, F.BM25_INDPTR, "not increasing from 0 to the postings count"
                )
            self._indptr = indptr
        return self._indptr

    def doc_freq(self, term: str) -> int:
        """Chunks that hold ``term`` (a tokenized term)."""
        row = self.lookup().find(term)
        if row is None:
            return 0
        indptr = self.indptr()
        return int(indptr[row + 1] - indptr[row])

    def default_threshold(self) -> float:
        """The refusal threshold when the caller gives none: the pack's (calibrated) value."""
        return float(self.r.search_defaults["max_distance"])

    def _threshold(self, chunk: int) -> float:
        """The threshold that applies to ``chunk`` when the caller gives none (a pack set: the
        threshold of the chunk's own pack)."""
        return self.default_threshold()

    def chunk_content(self, chunk: int) -> str:
        return self.r.chunk_content(chunk)

    def _gate_opens(self, chunk: int, gate: IdentifierGate) -> bool:
        return gate.opens(self.chunk_content(chunk))

    def _holds_any(self, chunk: int, words: set[str]) -> bool:
        """The chunk shares a content word with the query (bm25 mode's refusal rule)."""
        return self.shares_content_word(self.chunk_content(chunk), words)

    def shares_content_word(self, content: str, words: set[str]) -> bool:
        """``content`` holds one of ``words`` (the query's ``analyzed_content_terms``)."""
        return not words.isdisjoint(analyzer(self.analyzer_name).terms(content))

    def distance_counts(self, query: str, content: str) -> bool:
        """Whether a result's distance may pass the threshold on its own: always, except for a
        ``foreign_query``, whose results must also share a content word with it."""
        if not foreign_query(query):
            return True
        words = set(analyzed_content_terms(query, self.analyzer_name))
        return self.shares_content_word(content, words)

    def _result(
        self,
        rank: int,
        c: int,
        score: float,
        distance: float | None,
        bm25_rank: int | None,
        dense_rank: int | None,
        context: str,
    ) -> Result:
        r = self.r
        doc = r.value(F.CHUNK_DOCUMENT, c)
        sec = r.value(F.CHUNK_SECTION, c)
        start, end = self._span(c, context)
        page = r.value(F.CHUNK_PAGE, c) or None
        name = r.string_at(F.DOC_NAME, doc)
        content = r.text(doc)[start:end]
        return Result(
            rank=rank,
            chunk=c,
            doc=name,
            title=r.string_at(F.DOC_TITLE, doc),
            section=" > ".join(r.section_path(sec)),
            start=start,
            end=end,
            page=page,
            locator=locator(name, start, end, page),
            distance=None if distance is None else round(distance, 6),
            bm25_rank=bm25_rank,
            dense_rank=dense_rank,
            score=round(score, 6),
            content=content,
        )


def _top_similar(sims: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """Ids of the ``CANDIDATES`` most similar chunks (within ``mask``), best first, ties by id."""
    if mask is not None:
        sims = np.where(mask, sims, -np.inf)
    n = min(CANDIDATES, int(np.isfinite(sims).sum()))
    if n == 0:
        return np.zeros(0, np.int64)
    top = np.argpartition(-sims, n - 1)[:n] if n < sims.size else np.arange(sims.size)
    return top[np.lexsort((top, -sims[top]))]


def locator(name: str, start: int, end: int, page: int | None) -> str:
    """``name#char=from,to`` (RFC 5147 style); PDFs lead with ``page=N`` (PDF Open Parameters)."""
    frag = f"char={start},{end}"
    return f"{name}#page={page}&{frag}" if page else f"{name}#{frag}"
