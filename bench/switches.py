"""Variants of a pack's search that only benchmarks compare against (paired, on one pack):
no piece vectors (bench/pieces.py), no stored copy groups (bench/duplicates.py, as kbpack 0.2.0
searched), every BM25 term read from its postings instead of the dense rows
(bench/bm25_pack.py). The product has no switch for them: each is a ``Corpus`` part overridden.
"""

from __future__ import annotations

import numpy as np

from kbpack.pack.read import PackReader
from kbpack.search.corpus import PackCorpus
from kbpack.search.dense import PieceIndex
from kbpack.search.postings import PackPostings
from kbpack.search.searcher import Searcher
from kbpack.search.vectors import PackVectors


class NoPieces(PackVectors):
    """Chunk vectors alone, even in a pack with pieces."""

    def pieces(self) -> PieceIndex | None:
        return None


class PostingsOnly(PackPostings):
    """Every term read from its postings, as before ``/bm25/dense_tf``."""

    def dense_rows(self) -> None:
        return None


class NoCopyGroups(PackCorpus):
    """The pack's stored copy groups ignored: identical words collapsed only (0.2.0)."""

    def copy_groups(self) -> np.ndarray | None:
        return None


def corpus(
    reader: PackReader, *, pieces: bool = True, copies: bool = True, dense_rows: bool = True
) -> PackCorpus:
    cls = PackCorpus if copies else NoCopyGroups
    return cls(
        reader,
        postings=None if dense_rows else PostingsOnly(reader),
        vectors=None if pieces else NoPieces(reader),
    )


def variant(
    s: Searcher, *, pieces: bool = True, copies: bool = True, dense_rows: bool = True
) -> Searcher:
    """``s`` (a one-pack searcher) with the parts switched off, the same model and notes."""
    out = Searcher(corpus(s.r, pieces=pieces, copies=copies, dense_rows=dense_rows), s.embedder)
    out.notes, out.reranker, out.use_absent = list(s.notes), s.reranker, s.use_absent
    return out
