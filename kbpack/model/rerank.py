"""Reranker: a cross-encoder GGUF (llama.cpp rank pooling) that reads a query and a passage
together and returns one relevance score for the pair.

A bi-encoder compares two vectors made apart; a cross-encoder attends across both texts, so it
orders a short list better and costs one model pass per (query, passage) pair. kbpack applies
it after first-stage retrieval: the hybrid list's top N passages that pass the refusal gate are
scored and reordered by it. The refusal decision itself stays on the first-stage scores (the
reranker's scores are uncalibrated logits).

Pair layout, as the models were trained (and as llama.cpp's server builds it): the query's
tokens with the model's own special tokens, then for non-WordPiece vocabularies a separator
(XLM-RoBERTa's ``</s></s>``), then the passage's tokens without its leading BOS:
``[CLS] q [SEP] p [SEP]`` (BERT) or ``<s> q </s></s> p </s>`` (XLM-RoBERTa).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from kbpack.errors import ModelError
from kbpack.model.embedder import Embedder
from kbpack.model.identity import RERANK_POOLINGS
from kbpack.model.prefixes import Prefixes

# Passages scored per query unless told otherwise: the reference study's cross-encoder gain
# (dense R@1 0.094 -> 0.312) was measured over the top 25.
DEFAULT_TOP = 25
# At most this share of the window goes to the query; the passage gets the rest.
QUERY_SHARE = 0.5


class Reranker(Embedder):
    """One loaded cross-encoder. ``score(query, passages)`` -> float32 relevance per passage
    (higher is more relevant; raw model outputs, not probabilities)."""

    POOLINGS = RERANK_POOLINGS

    def __init__(self, model_path: Path, *, threads: int | None = None) -> None:
        if model_path is None:
            raise ModelError("--rerank needs a cross-encoder FILE.gguf; there is no default")
        super().__init__(model_path, threads=threads, prefixes=Prefixes())
        self._out_width = 1
        self._separator = self._pair_separator()

    def pair_tokens(self, query: str, passage: str) -> list[int]:
        """The tokens of one (query, passage) pair, cut to the window: the query to at most
        ``QUERY_SHARE`` of it, then the passage, each keeping its closing special tokens."""
        q = self.tokenize(query)
        q_limit = max(self._prefix + self._suffix + 1, int(self.window * QUERY_SHARE))
        if len(q) > q_limit:
            q = q[: q_limit - self._suffix] + q[len(q) - self._suffix :]
        p = self.tokenize(passage)[self._prefix :]  # its BOS/[CLS] would start a new text
        room = self.window - len(q) - len(self._separator)
        if len(p) > room:
            self.truncated += 1
            keep = max(0, room - self._suffix)
            p = p[:keep] + p[len(p) - self._suffix :]
        return q + self._separator + p

    def score(self, query: str, passages: Sequence[str]) -> np.ndarray:
        """float32 (len(passages),): the model's relevance of each passage to ``query``."""
        if isinstance(passages, str):
            raise TypeError("score() takes a sequence of passages; wrap a single one in a list")
        pairs = [self.pair_tokens(query, p) for p in passages]
        out = self._pooled(pairs)[:, 0]
        if not np.all(np.isfinite(out)):
            raise ModelError(f"{self.path}: the reranker produced a non-finite score")
        return out

    def _pair_separator(self) -> list[int]:
        """XLM-RoBERTa-style vocabularies put a second separator between the two texts;
        WordPiece (BERT) ends the query with [SEP] already."""
        import llama_cpp as L

        vocab = L.llama_model_get_vocab(self._llm._model.model)
        if L.llama_vocab_type(vocab) == L.LLAMA_VOCAB_TYPE_WPM:
            return []
        sep = L.llama_vocab_sep(vocab)
        return [int(sep)] if 0 <= sep < L.llama_vocab_n_tokens(vocab) else []


def rerank_text(header: str, content: str) -> str:
    """What the reranker reads of a chunk: its header (document > section) and its content,
    as the embedding model read it, without any embedding prefix."""
    from kbpack.index.chunk import embedded_text

    return embedded_text(header, content)
