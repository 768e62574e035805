"""Searching packs: BM25 and dense candidates, fusion, the refusal gate, typo suggestions,
federation over several packs, and the prompt format. Reads packs through ``kbpack.pack``.
"""

__all__ = ["bm25", "bm25_top", "dense", "federate", "fusion", "prompt", "searcher", "typos"]
