"""What a search returns: ``Result`` (one cited passage) and ``SearchResponse`` (the answer to
one query), and ``locator``, the citation format both use. Plain data, no pack access."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from kbpack.schema import fields_of
from kbpack.search.typos import Suggestion


@dataclass(frozen=True)
class Ranking:
    """Where a chunk stands in one search, as its ``Result`` reports it: rank among the
    results shown, fused score, cosine distance (None: no dense score), and its ranks in the
    BM25 and dense candidate lists (None: not among them)."""

    rank: int
    score: float = 0.0
    distance: float | None = None
    bm25_rank: int | None = None
    dense_rank: int | None = None


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
            **fields_of(self, "query", "mode", "answered"),
            "results": [r.as_dict() for r in self.results],
            **fields_of(self, "threshold", "lexical_only", "fusion"),
            "suggestions": [x.as_dict() for x in self.suggestions],
            "not_in_pack": list(self.not_in_pack),
            "notes": self.notes,
        }


def locator(name: str, start: int, end: int, page: int | None) -> str:
    """``name#char=from,to`` (RFC 5147 style); PDFs lead with ``page=N`` (PDF Open Parameters)."""
    frag = f"char={start},{end}"
    return f"{name}#page={page}&{frag}" if page else f"{name}#{frag}"
