"""The Embedder on real llama.cpp with tiny random-weight models built by the tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kbpack.errors import ModelError
from kbpack.model import identify_gguf, sha256_file
from kbpack.model.embedder import Embedder

TEXTS = ["the pack is offline", "search the text file", "", "model vector", "a b c", "x"]


@pytest.fixture(scope="module")
def embedder(tiny_model: Path) -> Embedder:
    return Embedder(tiny_model, threads=1)


def test_vectors_are_float32_unit_norm_one_row_per_text(embedder: Embedder) -> None:
    v = embedder.embed(TEXTS)
    assert v.shape == (len(TEXTS), 32)
    assert v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert len({row.tobytes() for row in v}) == len(TEXTS)  # distinct texts, distinct vectors


def test_same_input_same_vectors(embedder: Embedder) -> None:
    np.testing.assert_allclose(embedder.embed(TEXTS), embedder.embed(TEXTS), atol=1e-6)


def test_vector_does_not_depend_on_batch_or_order(embedder: Embedder) -> None:
    together = embedder.embed(TEXTS)
    alone = np.vstack([embedder.embed([t]) for t in TEXTS])
    reversed_ = embedder.embed(TEXTS[::-1])[::-1]
    np.testing.assert_allclose(together, alone, atol=1e-5)
    np.testing.assert_allclose(together, reversed_, atol=1e-5)


def test_no_texts_gives_empty_matrix(embedder: Embedder) -> None:
    assert embedder.embed([]).shape == (0, 32)


def test_a_bare_string_is_refused(embedder: Embedder) -> None:
    with pytest.raises(TypeError):
        embedder.embed("the pack")  # type: ignore[arg-type]


def test_identity_is_the_file_hash_and_header_facts(embedder: Embedder, tiny_model: Path) -> None:
    ident = embedder.identity
    assert ident.sha256 == sha256_file(tiny_model)
    assert (ident.name, ident.architecture, ident.dims) == ("tiny-a", "bert", 32)
    assert (ident.pooling, ident.window, ident.normalize) == ("mean", 16, "l2")
    assert embedder.window == 16 and embedder.dims == 32
    assert ident == identify_gguf(tiny_model)


def test_count_tokens_includes_the_special_tokens(embedder: Embedder) -> None:
    assert embedder.count_tokens("") == 2  # [CLS] [SEP]
    assert embedder.count_tokens("the pack") == 4
    assert embedder.count_tokens("a " * 40) == 42  # counted in full, beyond the window
    assert embedder.tokenize("the")[0] != embedder.tokenize("the")[-1]


def test_long_input_is_truncated_explicitly_and_counted(tiny_model: Path) -> None:
    e = Embedder(tiny_model, threads=1)
    long_text = "a " * 40  # 42 tokens for a 16-token window
    fitted = e.fit(e.tokenize(long_text))
    assert len(fitted) == e.window
    assert fitted[-1] == e.tokenize("")[-1]  # the closing [SEP] is kept, as sentence-transformers
    v = e.embed([long_text, "the pack", long_text])
    assert e.truncated == 2
    # What the model saw is exactly the window's worth: 14 words plus [CLS] and [SEP].
    np.testing.assert_allclose(v[0], e.embed(["a " * 14])[0], atol=1e-5)
    assert e.truncated == 2  # a text that fits is not counted


def test_many_full_window_texts_never_overflow_a_batch(tiny_model: Path) -> None:
    # 300 texts at or over the window: far more tokens than one llama.cpp batch holds.
    e = Embedder(tiny_model, threads=1)
    texts = [f"{'a b c d e f ' * (2 + i % 5)}{i}" for i in range(300)]
    v = e.embed(texts)
    assert v.shape == (300, 32)
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert e.truncated == sum(e.count_tokens(t) > e.window for t in texts) > 0


def test_second_model_has_its_own_identity_and_dims(tiny_model_b: Path, tiny_model: Path) -> None:
    b = Embedder(tiny_model_b, threads=1)
    assert b.dims == 48 and b.window == 24
    assert b.identity.sha256 != identify_gguf(tiny_model).sha256
    assert b.embed(["the pack"]).shape == (1, 48)


def test_threads_default_to_the_available_cores(tiny_model: Path) -> None:
    import os

    assert Embedder(tiny_model).threads == len(os.sched_getaffinity(0))


def test_file_that_is_not_gguf_is_a_one_line_model_error(tmp_path: Path) -> None:
    bogus = tmp_path / "model.gguf"
    bogus.write_text("this is not a model\n")
    with pytest.raises(ModelError) as info:
        Embedder(bogus)
    assert str(info.value) == (f"{bogus}: not a GGUF model file (starts with b'this', not b'GGUF')")


def test_missing_model_file_is_a_model_error(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="model file not found"):
        Embedder(tmp_path / "absent.gguf")


def test_truncated_gguf_is_refused_before_llama_cpp(tiny_model: Path, tmp_path: Path) -> None:
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(tiny_model.read_bytes()[:300])
    with pytest.raises(ModelError, match="truncated; the file is damaged"):
        Embedder(cut)


def test_gguf_without_bos_token_is_refused_not_aborted(tiny_model: Path, tmp_path: Path) -> None:
    # llama.cpp would GGML_ASSERT (SIGABRT) in tokenize(); run in a child so an abort shows up
    # as a failed test instead of killing the test session.
    from tiny_gguf import rewrite_gguf

    broken = rewrite_gguf(tiny_model, tmp_path / "nobos.gguf", drop={"tokenizer.ggml.bos_token_id"})
    code = f"from kbpack.model.embedder import Embedder; Embedder(__import__('pathlib').Path({str(broken)!r}))"
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert child.returncode == 1, child.stderr[-500:]
    assert "ModelError" in child.stderr
    assert "tokenizer.ggml.bos_token_id is missing or invalid" in child.stderr


def test_many_tiny_texts_on_a_long_context_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With a 1024-token batch, 700 two-token texts fit one batch's token budget but exceed
    # llama.cpp's limit of 256 sequences per batch: they must be split, not rejected.
    from tiny_gguf import build_tiny_gguf, rewrite_gguf

    import kbpack.model.embedder

    monkeypatch.setattr(kbpack.model.embedder, "BATCH_TOKENS", 1024)
    model = build_tiny_gguf(tmp_path / "long.gguf", positions=1024, window=None)
    e = Embedder(model, threads=1)
    assert e.window == 1024
    v = e.embed([""] * 700 + ["a " * 1500])
    assert v.shape == (701, 32) and e.truncated == 1
    np.testing.assert_allclose(v[:700], np.repeat(v[:1], 700, axis=0), atol=1e-5)
    # Without kbpack's key, the window is the context length, capped at MAX_WINDOW.
    huge = rewrite_gguf(
        model,
        tmp_path / "huge.gguf",
        drop={"kbpack.token_window"},
        set_uint32={"bert.context_length": 32768},
    )
    assert identify_gguf(huge).window == 8192


def test_missing_llama_cpp_is_a_clear_error(tiny_model: Path) -> None:
    # A child where `import llama_cpp` fails, as on a machine without llama-cpp-python.
    code = (
        "import sys; sys.modules['llama_cpp'] = None\n"
        "from pathlib import Path\n"
        "from kbpack.model.embedder import Embedder\n"
        "from kbpack.errors import ModelError\n"
        f"try: Embedder(Path({str(tiny_model)!r}))\n"
        "except ModelError as e: print(e)\n"
    )
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert child.returncode == 0, child.stderr[-500:]
    assert child.stdout.startswith("llama-cpp-python is not importable (")
    assert "pip install llama-cpp-python" in child.stdout and "--no-vectors" in child.stdout


def test_embedder_closes_as_a_context_manager(tiny_model: Path) -> None:
    with Embedder(tiny_model, threads=1) as e:
        first = e.embed(["the pack"])
    with Embedder(tiny_model, threads=1) as again:
        np.testing.assert_allclose(again.embed(["the pack"]), first, atol=1e-6)
