"""Model identity, the GGUF header reader, the safetensors reader and the BERT converter."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from tiny_gguf import rewrite_gguf, write_bert_folder, write_safetensors

from kbpack.errors import ModelError
from kbpack.model import ModelIdentity, convert_bert, identify_gguf, sha256_file
from kbpack.model.embedder import Embedder
from kbpack.model.gguf_header import read_gguf_metadata
from kbpack.model.safetensors import read_safetensors

IDENTITY = {
    "name": "all-MiniLM-L6-v2",
    "sha256": "ab" * 32,
    "architecture": "bert",
    "dims": 384,
    "pooling": "mean",
    "window": 256,
    "normalize": "l2",
    "llama_cpp_version": "0.3.36",
}


# -- identity --------------------------------------------------------------------------------


def test_identity_round_trips_through_a_dict() -> None:
    ident = ModelIdentity.from_dict(IDENTITY)
    assert ident.as_dict() == IDENTITY
    assert ModelIdentity.from_dict(ident.as_dict()) == ident


def test_identity_accepts_what_h5py_returns() -> None:
    stored = dict(IDENTITY, dims=np.int64(384), window=np.int32(256), name=b"all-MiniLM-L6-v2")
    assert ModelIdentity.from_dict(stored) == ModelIdentity.from_dict(IDENTITY)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"dims": None}, "model identity: key 'dims' is missing"),
        ({"dims": 0}, "model identity: 'dims' must be a positive integer"),
        ({"window": "256"}, "model identity: 'window' must be a positive integer"),
        ({"dims": True}, "model identity: 'dims' must be a positive integer"),
        ({"pooling": ""}, "model identity: 'pooling' must be a non-empty string"),
        ({"sha256": "AB" * 32}, "model identity: 'sha256' must be 64 lowercase hex digits"),
        ({"sha256": "ab" * 31}, "model identity: 'sha256' must be 64 lowercase hex digits"),
    ],
)
def test_identity_from_dict_names_the_bad_key(change: dict[str, object], message: str) -> None:
    d = {k: v for k, v in {**IDENTITY, **change}.items() if v is not None}
    with pytest.raises(ModelError) as info:
        ModelIdentity.from_dict(d)
    assert str(info.value) == message


def test_sha256_file_matches_hashlib(tiny_model: Path) -> None:
    assert sha256_file(tiny_model) == hashlib.sha256(tiny_model.read_bytes()).hexdigest()


# -- converter -------------------------------------------------------------------------------


def test_conversion_is_deterministic(tmp_path: Path) -> None:
    folder = write_bert_folder(tmp_path / "src", seed=3)
    a = convert_bert(folder, tmp_path / "a.gguf", name="m")
    b = convert_bert(folder, tmp_path / "b.gguf", name="m")
    assert a.read_bytes() == b.read_bytes()
    other = convert_bert(
        write_bert_folder(tmp_path / "src2", seed=4), tmp_path / "c.gguf", name="m"
    )
    assert sha256_file(other) != sha256_file(a)


def test_converted_header_holds_what_llama_cpp_and_kbpack_need(tiny_model: Path) -> None:
    meta = read_gguf_metadata(tiny_model)
    assert meta["general.architecture"] == "bert"
    assert meta["bert.pooling_type"] == 1  # MEAN: without it llama.cpp returns token vectors
    assert meta["bert.attention.causal"] is False
    assert meta["tokenizer.ggml.model"] == "bert"
    assert meta["tokenizer.ggml.token_type_count"] == 2
    assert meta["kbpack.token_window"] == 16
    src = tiny_model.with_name(tiny_model.stem + "-src") / "model.safetensors"
    assert meta["kbpack.source_sha256"] == sha256_file(src)


def test_converted_weights_are_the_source_weights(tmp_path: Path) -> None:
    import gguf

    folder = write_bert_folder(tmp_path / "src", seed=5)
    out = convert_bert(folder, tmp_path / "m.gguf")
    source = read_safetensors(folder / "model.safetensors")
    tensors = {t.name: np.array(t.data) for t in gguf.GGUFReader(out).tensors}
    np.testing.assert_allclose(
        tensors["token_embd.weight"].astype(np.float32),
        source["embeddings.word_embeddings.weight"],
        atol=1e-3,
    )
    np.testing.assert_array_equal(
        tensors["blk.1.layer_output_norm.bias"], source["encoder.layer.1.output.LayerNorm.bias"]
    )
    assert tensors["blk.0.ffn_up.weight"].dtype == np.float16
    assert tensors["token_types.weight"].dtype == np.float32


def test_window_option_and_defaults(tmp_path: Path) -> None:
    folder = write_bert_folder(tmp_path / "src", window=None, positions=40)
    assert identify_gguf(convert_bert(folder, tmp_path / "a.gguf")).window == 40
    assert identify_gguf(convert_bert(folder, tmp_path / "b.gguf", window=20)).window == 20
    with pytest.raises(ModelError, match=r"token window 41 must be in 3\.\.40"):
        convert_bert(folder, tmp_path / "c.gguf", window=41)


def test_converter_refuses_a_non_bert_model(tmp_path: Path) -> None:
    folder = write_bert_folder(tmp_path / "src")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "roberta"}))
    with pytest.raises(ModelError, match="model_type 'roberta' is not supported"):
        convert_bert(folder, tmp_path / "m.gguf")
    assert not (tmp_path / "m.gguf").exists()


def test_converter_refuses_a_cased_tokenizer(tmp_path: Path) -> None:
    folder = write_bert_folder(tmp_path / "src")
    (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False}))
    with pytest.raises(ModelError, match="do_lower_case is false"):
        convert_bert(folder, tmp_path / "m.gguf")


def test_converter_refuses_extra_sentence_transformers_modules(tmp_path: Path) -> None:
    folder = write_bert_folder(tmp_path / "src")
    modules = [
        {"type": "sentence_transformers.models.Transformer"},
        {"type": "sentence_transformers.models.Dense"},
    ]
    (folder / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(ModelError, match="module 'Dense' is not supported"):
        convert_bert(folder, tmp_path / "m.gguf")


def test_converter_needs_the_vocabulary_to_match_the_weights(tmp_path: Path) -> None:
    folder = write_bert_folder(tmp_path / "src")
    vocab = (folder / "vocab.txt").read_text().splitlines()
    (folder / "vocab.txt").write_text("\n".join(vocab[:-3]) + "\n")
    with pytest.raises(ModelError, match=r"vocab.txt: \d+ tokens but the weights have \d+"):
        convert_bert(folder, tmp_path / "m.gguf")


def test_converter_on_a_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="not a folder"):
        convert_bert(tmp_path / "nope", tmp_path / "m.gguf")


# -- safetensors reader ----------------------------------------------------------------------


def test_safetensors_reader_reads_what_was_written(tmp_path: Path) -> None:
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    write_safetensors(tmp_path / "w.safetensors", {"a": a, "b": np.ones(4, np.float32)})
    got = read_safetensors(tmp_path / "w.safetensors")
    np.testing.assert_array_equal(got["a"], a)
    np.testing.assert_array_equal(got["b"], np.ones(4))


@pytest.mark.parametrize(
    ("header", "tail", "message"),
    [
        ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, 12, "bytes after the last"),
        ({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, 8, "do not match shape"),
        (
            {"a": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}},
            12,
            "has a hole at byte 0",
        ),
        ({"a": {"dtype": "Q4", "shape": [2], "data_offsets": [0, 8]}}, 8, "unsupported dtype 'Q4'"),
        ({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}, 8, "invalid shape"),
    ],
)
def test_safetensors_reader_refuses_inconsistent_files(
    tmp_path: Path, header: dict[str, object], tail: int, message: str
) -> None:
    raw = json.dumps(header).encode()
    path = tmp_path / "w.safetensors"
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + bytes(tail))
    with pytest.raises(ModelError, match=message):
        read_safetensors(path)


def test_safetensors_reader_refuses_an_impossible_header_size(tmp_path: Path) -> None:
    path = tmp_path / "w.safetensors"
    path.write_bytes((1 << 40).to_bytes(8, "little") + b"{}")
    with pytest.raises(ModelError, match="header size 1099511627776 is impossible"):
        read_safetensors(path)


def test_bf16_weights_are_widened_exactly(tmp_path: Path) -> None:
    values = np.array([1.0, -2.5, 3.140625], dtype=np.float32)
    bf16 = (values.view(np.uint32) >> 16).astype("<u2").tobytes()
    raw = json.dumps({"a": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 6]}}).encode()
    path = tmp_path / "w.safetensors"
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + bf16)
    np.testing.assert_array_equal(read_safetensors(path)["a"], values)


# -- GGUF header and foreign models ----------------------------------------------------------


def test_gguf_from_an_unknown_version_is_refused(tiny_model: Path, tmp_path: Path) -> None:
    data = bytearray(tiny_model.read_bytes())
    data[4:8] = (9).to_bytes(4, "little")
    path = tmp_path / "v9.gguf"
    path.write_bytes(bytes(data))
    with pytest.raises(ModelError, match="GGUF version 9 is not supported"):
        identify_gguf(path)


def test_model_without_pooling_is_refused(tiny_model: Path, tmp_path: Path) -> None:
    path = rewrite_gguf(tiny_model, tmp_path / "nopool.gguf", set_uint32={"bert.pooling_type": 0})
    with pytest.raises(ModelError, match=r"pooling .none. .* gives no sentence embedding"):
        Embedder(path)


def test_window_beyond_the_positions_is_refused(tiny_model: Path, tmp_path: Path) -> None:
    path = rewrite_gguf(tiny_model, tmp_path / "w.gguf", set_uint32={"kbpack.token_window": 65})
    with pytest.raises(ModelError, match=r"kbpack\.token_window 65 must be in 3\.\.64"):
        Embedder(path)


def test_foreign_gguf_without_kbpack_window_uses_its_context(
    tiny_model: Path, tmp_path: Path
) -> None:
    path = rewrite_gguf(tiny_model, tmp_path / "foreign.gguf", drop={"kbpack.token_window"})
    e = Embedder(path, threads=1)
    assert e.window == 64
    assert e.embed(["a " * 200]).shape == (1, 32) and e.truncated == 1


def test_lying_context_length_is_a_load_error_not_a_crash(tiny_model: Path, tmp_path: Path) -> None:
    path = rewrite_gguf(tiny_model, tmp_path / "lie.gguf", set_uint32={"bert.context_length": 4096})
    with pytest.raises(ModelError) as info:
        Embedder(path)
    message = str(info.value)
    assert message.startswith(f"{path}: llama.cpp cannot load the model (")
    assert "tensor 'position_embd.weight' has wrong shape" in message
    assert "\n" not in message


def test_copied_model_keeps_its_identity(tiny_model: Path, tmp_path: Path) -> None:
    copy = tmp_path / "renamed.gguf"
    shutil.copy(tiny_model, copy)
    assert identify_gguf(copy) == identify_gguf(tiny_model)  # the identity is the content
