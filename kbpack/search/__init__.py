"""Searching packs: one ``Searcher`` (candidates, fusion, refusal, citations; batches too) over a
``Corpus`` that one pack (``corpus.PackCorpus``) and a pack set (``federate.SetCorpus``) both
implement, with the pure rules beside it: BM25 (``bm25``, ``bm25_top``), dense scoring
(``dense``), fusion (``fusion``), the refusal gate (``gating``), the query's words against the
vocabulary (``words``, ``typos``, ``absent``), citations (``citing``). ``assemble`` is the one
place a searcher gets its embedder. Reads packs through ``kbpack.pack``.

The result types stay importable from here, where they lived before the 0.3 layout
(``from kbpack.search import SearchResponse``); they load on first use, so importing a
submodule stays cheap.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "Result",
    "SearchResponse",
    "Searcher",
    "absent",
    "assemble",
    "bm25",
    "bm25_top",
    "citing",
    "corpus",
    "dense",
    "federate",
    "fusion",
    "gating",
    "opened",
    "postings",
    "prompt",
    "results",
    "searcher",
    "typos",
    "vectors",
    "words",
]

_LAZY = {"Result", "SearchResponse", "Searcher"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from kbpack.search import searcher

        return getattr(searcher, name)
    raise AttributeError(f"module 'kbpack.search' has no attribute {name!r}")
