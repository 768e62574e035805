"""The second half of a search, once its candidate lists are in: fusion, the refusal gate and
the citations (``finish``), for one request. Copies of one passage are folded into one result:
chunks of identical words, the corpus's stored copy groups, and in a pack set copies across
packs (``Corpus.near_copy_in``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from kbpack.pack.vector_scan import sorted_unique
from kbpack.search import gating
from kbpack.search.bm25_top import Term, scores_at
from kbpack.search.dense import DenseScores
from kbpack.search.fusion import CANDIDATES, convex
from kbpack.search.fusion import RULE as FUSION_RULE
from kbpack.search.gating import IdentifierGate, heading_only
from kbpack.search.results import Ranking, Result, SearchResponse
from kbpack.search.typos import Suggestion
from kbpack.text.analyze import tokenize

if TYPE_CHECKING:
    from kbpack.search.searcher import Searcher, SearchRequest


@dataclass
class Query:
    """One request's state between its lists and its answer."""

    text: str
    mask: np.ndarray | None
    dense_wanted: bool = False
    lexical_only: bool = False
    terms: Sequence[Term] = ()
    bm_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    bm_scores: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float64))
    gate: IdentifierGate | None = None
    words: set[str] = field(default_factory=set)
    foreign: bool = False
    suggestions: list[Suggestion] = field(default_factory=list)
    dense: DenseScores | None = None
    vector: np.ndarray | None = None


def order(mode: str, q: Query) -> tuple[list[tuple[int, float]], np.ndarray]:
    """The ranked (chunk, score) list of ``mode`` and the dense top ids (empty in bm25)."""
    if mode == "bm25" or q.dense is None:
        ranked = [(int(c), float(x)) for c, x in zip(q.bm_ids, q.bm_scores, strict=True)]
        return ranked, np.zeros(0, np.int64)
    d = q.dense
    de_ids = d.top(CANDIDATES, q.mask)
    if mode == "dense":
        return [(int(c), float(d.score[c])) for c in de_ids], de_ids
    candidates = sorted_unique(np.concatenate((de_ids, q.bm_ids)))
    d.make_exact(candidates)  # the BM25 ones may not be yet
    # BM25 of every candidate, not only of the BM25 top 100 (0 = no shared term)
    lexical = scores_at(q.terms, candidates)
    fused_ids, fused = convex(candidates, d.score[candidates], lexical)
    return [(int(c), float(f)) for c, f in zip(fused_ids, fused, strict=True)], de_ids


def finish(s: Searcher, req: SearchRequest, q: Query) -> SearchResponse:
    corpus = s.corpus
    mode_used = "bm25" if q.lexical_only else req.mode
    gate = q.gate if mode_used == "hybrid" else None
    threshold = corpus.default_threshold() if req.max_distance is None else req.max_distance
    ordered, de_ids = order(mode_used, q)
    bm_rank = {int(c): i + 1 for i, c in enumerate(q.bm_ids)}
    de_rank = {int(c): i + 1 for i, c in enumerate(de_ids)}
    not_in_pack = s.absent_words(req.query)
    # the refusal distance is the chunk's own (with pieces it differs from 1 - score)
    dist: dict[int, float] = {}
    if q.dense is not None and mode_used != "bm25":
        distances = 1.0 - q.dense.cos
        dist = {c: float(distances[c]) for c, _ in ordered}

    def holds_any(c: int) -> bool:
        """The chunk shares a content word with the query (bm25 mode's refusal rule), in its
        content or in its header: BM25 indexes both (spec §3.7), so a page found by its title
        alone is evidence as much as one found by a word of its text."""
        name = corpus.analyzer_name
        if gating.shares_content_word(corpus.chunk_content(c), q.words, name):
            return True
        from kbpack.index.chunk import header  # only when the content lacks every word

        r = corpus.result(c, Ranking(0), "chunk")
        head = header(r.title, r.section.split(" > ") if r.section else [])
        return gating.shares_content_word(head, q.words, name)

    def evidence(c: int) -> bool:
        """``c`` on its own says the pack answers the query (the per-chunk rules)."""
        if mode_used == "bm25":
            return c in bm_rank and holds_any(c)
        limit = threshold if req.max_distance is not None else corpus.threshold(c)
        near = dist.get(c, 2.0) <= limit
        if near and (not q.foreign or holds_any(c)):
            return True
        return gate is not None and gate.opens(corpus.chunk_content(c))

    # Refusal decides per query (issue 32): a pack answers the query when one of its
    # candidates is evidence of an answer and no query word says the pack is about something
    # else; then the ranking decides what is shown, so an exact lexical match is never hidden
    # by its own distance. Where distance is no evidence (bm25 mode: a chunk sharing only
    # "the"; a query in a language the model does not read) each result needs its content
    # word. Several packs searched as one: each pack answers or not by its own threshold.
    answering: set[int] = set()
    if req.refuse and not (s.use_absent and gating.absent_vetoes(req.query, not_in_pack, dist)):
        answering = gating.answering((c for c, _ in ordered), evidence, corpus.answerer)

    def passes(c: int) -> bool:
        if not req.refuse:
            return True
        if corpus.answerer(c) not in answering:
            return False
        return evidence(c) if (mode_used == "bm25" or q.foreign) else True

    top = 0
    if s.reranker is not None:
        from kbpack.model.rerank import DEFAULT_TOP

        top = DEFAULT_TOP if req.rerank_top is None else req.rerank_top
    results, ids = cite(s, ordered, passes, max(req.k, top), dist, bm_rank, de_rank, req.context)
    s.check_dense(q, ids)
    if top and results:
        results = rerank(s, req.query, results, top)
    results = results[: req.k]
    notes = list(s.notes)
    if q.lexical_only and not notes:
        notes.append("dense search did not run: lexical-only results")
    return SearchResponse(
        query=req.query,
        mode=mode_used,
        results=results,
        answered=bool(results),
        threshold=None if mode_used == "bm25" else threshold,
        lexical_only=q.lexical_only,
        notes=notes,
        fusion=FUSION_RULE if mode_used == "hybrid" else None,
        suggestions=q.suggestions,
        not_in_pack=not_in_pack,
    )


def cite(
    s: Searcher,
    ordered: list[tuple[int, float]],
    passes: Any,
    limit: int,
    dist: dict[int, float],
    bm_rank: dict[int, int],
    de_rank: dict[int, int],
    context: str,
) -> tuple[list[Result], list[int]]:
    """The first ``limit`` ranked chunks that pass, as results, copies folded into the first
    of them; and the chunk id of each (``res.chunk`` is a row of its own pack in a set)."""
    corpus = s.corpus
    results: list[Result] = []
    ids: list[int] = []
    by_words: dict[tuple[str, ...], Result] = {}  # identical words: one result
    by_group: dict[Any, Result] = {}  # the stored copy groups: one result
    for c, score in ordered:
        if len(results) >= limit:
            break
        if not passes(c):
            continue
        at = Ranking(len(results) + 1, score, dist.get(c), bm_rank.get(c), de_rank.get(c))
        res = corpus.result(c, at, context)
        key = tuple(tokenize(res.content))
        if heading_only(key, res):
            continue
        group = corpus.copy_group(c)
        first = by_words.get(key) or (by_group.get(group) if group is not None else None)
        if first is None:
            first = corpus.near_copy_in(c, ids, results)
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
        corpus.list_copies(c, res, context)
    return results, ids


def rerank(s: Searcher, query: str, results: list[Result], top: int) -> list[Result]:
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
    scores = s.reranker.score(query, texts)  # type: ignore[union-attr]
    for r, x in zip(head, scores, strict=True):
        r.rerank_score = round(float(x), 6)
    ranked = sorted(range(len(head)), key=lambda i: (-float(scores[i]), i))
    out = [head[i] for i in ranked] + results[top:]
    for rank, r in enumerate(out, 1):
        r.rank = rank
    return out
