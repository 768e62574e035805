"""Build tiny random-weight BERT models for tests: a sentence-transformers style folder
(config, vocab, safetensors written by hand below) and its GGUF via kbpack's converter.

Real llama.cpp runs them in milliseconds, so tests exercise the true embedding path without
the 46 MB default model.
"""

from __future__ import annotations

import json
import string
from pathlib import Path

import numpy as np

from kbpack.model.convert import convert_bert

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = ["the", "pack", "model", "vector", "offline", "search", "text", "file", "is", "not"]
# ~100 WordPiece tokens: specials, single characters, their continuations, a few words.
VOCAB = (
    SPECIALS
    + list(string.ascii_lowercase)
    + [f"##{c}" for c in string.ascii_lowercase]
    + list(string.digits)
    + list(".,:;!?()[]'\"-_/@#=+*")
    + WORDS
)


def write_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    """The safetensors layout: u64 header size, JSON header, contiguous little-endian data."""
    header: dict[str, object] = {}
    blobs: list[bytes] = []
    offset = 0
    for name, array in tensors.items():
        data = np.ascontiguousarray(array, dtype="<f4").tobytes()
        header[name] = {
            "dtype": "F32",
            "shape": list(array.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        blobs.append(data)
        offset += len(data)
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + b"".join(blobs))


def write_bert_folder(
    folder: Path,
    *,
    seed: int = 0,
    hidden: int = 32,
    layers: int = 2,
    heads: int = 2,
    positions: int = 64,
    window: int | None = 16,
    pooling: str = "mean",
    classifier: bool = False,
) -> Path:
    """A random-weight BERT in sentence-transformers layout (``pooling`` "mean" or "cls").

    ``classifier``: a cross-encoder instead (BertForSequenceClassification, one label: pooler
    + classifier weights, one token type as in the XLM-RoBERTa rerankers), no pooling files."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    ffn = hidden * 4

    def w(*shape: int) -> np.ndarray:
        return rng.normal(0.0, 0.2, shape).astype(np.float32)

    tensors = {
        "embeddings.word_embeddings.weight": w(len(VOCAB), hidden),
        "embeddings.position_embeddings.weight": w(positions, hidden),
        "embeddings.token_type_embeddings.weight": w(2, hidden),
        "embeddings.LayerNorm.weight": np.ones(hidden, np.float32),
        "embeddings.LayerNorm.bias": np.zeros(hidden, np.float32),
    }
    for i in range(layers):
        p = f"encoder.layer.{i}."
        for part in ("attention.self.query", "attention.self.key", "attention.self.value"):
            tensors[p + part + ".weight"] = w(hidden, hidden)
            tensors[p + part + ".bias"] = w(hidden)
        tensors[p + "attention.output.dense.weight"] = w(hidden, hidden)
        tensors[p + "attention.output.dense.bias"] = w(hidden)
        tensors[p + "attention.output.LayerNorm.weight"] = np.ones(hidden, np.float32)
        tensors[p + "attention.output.LayerNorm.bias"] = np.zeros(hidden, np.float32)
        tensors[p + "intermediate.dense.weight"] = w(ffn, hidden)
        tensors[p + "intermediate.dense.bias"] = w(ffn)
        tensors[p + "output.dense.weight"] = w(hidden, ffn)
        tensors[p + "output.dense.bias"] = w(hidden)
        tensors[p + "output.LayerNorm.weight"] = np.ones(hidden, np.float32)
        tensors[p + "output.LayerNorm.bias"] = np.zeros(hidden, np.float32)
    if classifier:  # transformers' names: the encoder under "bert.", the head beside it
        tensors["embeddings.token_type_embeddings.weight"] = w(1, hidden)
        tensors["pooler.dense.weight"] = w(hidden, hidden)
        tensors["pooler.dense.bias"] = w(hidden)
        tensors = {"bert." + k: v for k, v in tensors.items()}
        tensors["classifier.weight"] = w(1, hidden)
        tensors["classifier.bias"] = w(1)
    write_safetensors(folder / "model.safetensors", tensors)
    config = {
        "model_type": "bert",
        "architectures": ["BertForSequenceClassification" if classifier else "BertModel"],
        "hidden_size": hidden,
        "intermediate_size": ffn,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "max_position_embeddings": positions,
        "type_vocab_size": 1 if classifier else 2,
        "layer_norm_eps": 1e-12,
        "vocab_size": len(VOCAB),
    }
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    if classifier:
        config["id2label"] = {"0": "LABEL_0"}
        (folder / "config.json").write_text(json.dumps(config))
        return folder
    if window is not None:
        (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": window}))
    (folder / "1_Pooling").mkdir(exist_ok=True)
    mode = {"mean": "pooling_mode_mean_tokens", "cls": "pooling_mode_cls_token"}[pooling]
    (folder / "1_Pooling" / "config.json").write_text(
        json.dumps({"word_embedding_dimension": hidden, mode: True})
    )
    return folder


def build_tiny_gguf(out: Path, *, name: str = "tiny-bert", **kwargs: int | str | None) -> Path:
    """A tiny model's GGUF at ``out`` (its source folder beside it, named ``out.stem``-src)."""
    folder = write_bert_folder(out.with_name(out.stem + "-src"), **kwargs)  # type: ignore[arg-type]
    return convert_bert(folder, out, name=name)


def rewrite_gguf(
    src: Path,
    out: Path,
    *,
    drop: set[str] = frozenset(),
    set_uint32: dict[str, int] | None = None,  # type: ignore[assignment]
) -> Path:
    """Copy a GGUF with some metadata keys removed or replaced: for broken-model tests."""
    import gguf

    reader = gguf.GGUFReader(src)
    arch = str(reader.fields["general.architecture"].contents())
    writer = gguf.GGUFWriter(out, arch)
    for name, field in reader.fields.items():
        if name in drop or name.startswith("GGUF.") or name == "general.architecture":
            continue
        if set_uint32 and name in set_uint32:
            continue
        vtype = field.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            writer.add_key_value(name, field.contents(), vtype, sub_type=field.types[-1])
        else:
            writer.add_key_value(name, field.contents(), vtype)
    for name, value in (set_uint32 or {}).items():
        writer.add_uint32(name, value)
    for tensor in reader.tensors:
        writer.add_tensor(tensor.name, np.array(tensor.data), raw_dtype=tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out
