"""Searching packs: BM25 and dense candidates, fusion, the refusal gate, typo suggestions,
federation over several packs, and the prompt format. Reads packs through ``kbpack.pack``.

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
    "bm25",
    "bm25_top",
    "dense",
    "federate",
    "fusion",
    "prompt",
    "searcher",
    "typos",
]

_LAZY = {"Result", "SearchResponse", "Searcher"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from kbpack.search import searcher

        return getattr(searcher, name)
    raise AttributeError(f"module 'kbpack.search' has no attribute {name!r}")
