"""llama.cpp's vectors from kbpack-converted GGUFs against a numpy forward pass of the same
weights (tests/bert_reference.py): the converter's tensor mapping, the pooling read from the
GGUF and respected, for mean and CLS pooling."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from bert_reference import BertReference
from tiny_gguf import build_tiny_gguf

from kbpack.embed import Embedder
from kbpack.model import identify_gguf

TEXTS = [
    "the pack is offline",
    "search the text file",
    "a vector model: 42!",
    "x",
    "the model is not the file, the file is the model",
]


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_llama_cpp_matches_the_numpy_forward_pass(pooling: str, tmp_path: Path) -> None:
    out = build_tiny_gguf(tmp_path / f"{pooling}.gguf", pooling=pooling, window=64, seed=7)
    assert identify_gguf(out).pooling == pooling
    reference = BertReference(out.with_name(out.stem + "-src"))
    with Embedder(out) as emb:
        got = emb.embed(TEXTS)
        ids = [emb.tokenize(t) for t in TEXTS]
    want = np.stack([reference.sentence_vector(i, pooling) for i in ids])
    cosines = np.sum(got * want, axis=1)
    assert cosines.min() >= 0.999, cosines


def test_the_two_poolings_give_different_vectors(tmp_path: Path) -> None:
    """Respecting the pooling matters: on the same weights, CLS and mean disagree."""
    vectors = []
    for pooling in ("mean", "cls"):
        out = build_tiny_gguf(tmp_path / f"{pooling}.gguf", pooling=pooling, window=64, seed=7)
        with Embedder(out) as emb:
            vectors.append(emb.embed(TEXTS))
    assert np.sum(vectors[0] * vectors[1], axis=1).max() < 0.99
