"""llama.cpp's vectors from kbpack-converted GGUFs against a numpy forward pass of the same
weights (tests/bert_reference.py): the converter's tensor mapping, the pooling read from the
GGUF and respected, for mean and CLS pooling."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from bert_reference import BertReference
from tiny_gguf import build_tiny_gguf

from kbpack.model import identify_gguf
from kbpack.model.embedder import Embedder
from tests.paths import TESTS_DIR

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


_WIDE_CHILD = """
import json, sys
from pathlib import Path
import numpy as np
sys.path.insert(0, sys.argv[2])
from bert_reference import BertReference
from kbpack.model.embedder import Embedder
model = Path(sys.argv[1])
# letters outside the tiny vocabulary's words: one token each, so these run past 256 tokens
texts = ["abcdefghij " * 24, "search the text file", "klmnop qrstu " * 30]
with Embedder(model, threads=1) as emb:
    got = emb.embed(texts)
    ids = [emb.fit(emb.tokenize(t)) for t in texts]
    ctx = emb._n_ctx
reference = BertReference(model.with_name(model.stem + "-src"))
want = np.stack([reference.sentence_vector(i, "mean") for i in ids])
print(json.dumps({"n_ctx": ctx, "tokens": [len(i) for i in ids],
                  "cosines": np.sum(got * want, axis=1).tolist()}))
"""


@pytest.mark.parametrize(("positions", "window"), [(320, 300), (400, 384), (700, 640)])
def test_windows_between_multiples_of_256_load_and_match(
    positions: int, window: int, tmp_path: Path
) -> None:
    """A context of 300, 384 or 640 tokens made llama.cpp abort the process at load; kbpack
    rounds the context up to a multiple of 256 (run in a child: an abort fails the test
    instead of ending the session). Texts as long as the window still match the reference."""
    import json
    import subprocess
    import sys

    out = build_tiny_gguf(tmp_path / "wide.gguf", positions=positions, window=window, seed=3)
    child = subprocess.run(
        [sys.executable, "-c", _WIDE_CHILD, str(out), str(TESTS_DIR)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == 0, child.stderr[-800:]
    got = json.loads(child.stdout)
    assert got["n_ctx"] % 256 == 0 and got["n_ctx"] >= window
    assert max(got["tokens"]) > 256  # longer than the old 256-token context
    assert min(got["cosines"]) >= 0.999, got
