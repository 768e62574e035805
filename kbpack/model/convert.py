"""Convert a BERT-family safetensors folder (sentence-transformers layout) to a GGUF file.

Needs only numpy and the ``gguf`` package. The output is deterministic: the same weights and
the same converter give the same bytes, hence the same SHA-256 -- the model's identity in a
pack -- on every machine that converts them.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kbpack.errors import ModelError
from kbpack.model import keys as K
from kbpack.model.identity import sha256_file
from kbpack.model.safetensors import read_safetensors

CONVERTER_VERSION = 1
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
_SUPPORTED_MODULES = {"Transformer", "Pooling", "Normalize"}
_POOLING_MODES = {  # sentence-transformers Pooling config key -> llama.cpp pooling type
    "pooling_mode_mean_tokens": 1,
    "pooling_mode_cls_token": 2,
    "pooling_mode_lasttoken": 3,
}
_EMBEDDINGS = {
    "embeddings.word_embeddings": "token_embd",
    "embeddings.position_embeddings": "position_embd",
    "embeddings.token_type_embeddings": "token_types",
    "embeddings.LayerNorm": "token_embd_norm",
}
_LAYER = {
    "attention.self.query": "attn_q",
    "attention.self.key": "attn_k",
    "attention.self.value": "attn_v",
    "attention.output.dense": "attn_output",
    "attention.output.LayerNorm": "attn_output_norm",
    "intermediate.dense": "ffn_up",
    "output.dense": "ffn_down",
    "output.LayerNorm": "layer_output_norm",
}
_LAYER_RE = re.compile(r"encoder\.layer\.(\d+)\.(.+)\.(weight|bias|gamma|beta)$")
# A cross-encoder's head (BertForSequenceClassification): llama.cpp's rank pooling computes
# cls.output(tanh(cls([CLS] state))), which is transformers' classifier(tanh(pooler.dense(.))).
_HEAD = {"pooler.dense": "cls", "classifier": "cls.output"}
RANK_POOLING = 4  # llama.cpp's LLAMA_POOLING_TYPE_RANK


@dataclass(frozen=True)
class BertFolder:
    """What the converter reads from a model folder, parsed and checked."""

    config: dict[str, Any]
    vocab: list[str]
    weights: Path
    window: int
    pooling: int  # RANK_POOLING for a cross-encoder (reranker)

    @property
    def reranker(self) -> bool:
        return self.pooling == RANK_POOLING


def convert_bert(
    folder: Path, out: Path, *, name: str | None = None, window: int | None = None
) -> Path:
    """Write ``out`` (F16 matrices, F32 norms and biases) atomically; return it.

    ``window`` overrides the token window recorded under ``kbpack.token_window``
    (default: sentence-transformers' ``max_seq_length``, else the model's positions).
    """
    import gguf  # lazy: only the converter needs it

    src = read_bert_folder(folder)
    cfg = src.config
    positions = int(cfg["max_position_embeddings"])
    window = window if window is not None else src.window
    if not 2 < window <= positions:
        raise ModelError(f"{folder}: token window {window} must be in 3..{positions}")
    tensors = _map_tensors(src.weights, int(cfg["num_hidden_layers"]), head=src.reranker)
    n_vocab = tensors["token_embd.weight"].shape[0]
    if n_vocab != len(src.vocab):
        raise ModelError(
            f"{folder}/vocab.txt: {len(src.vocab)} tokens but the weights have {n_vocab}"
        )

    arch = "bert"
    w = gguf.GGUFWriter(None, arch)  # type: ignore[arg-type]
    w.add_string(K.NAME, name or folder.name)
    w.add_uint32(K.CONTEXT_LENGTH.format(arch=arch), positions)
    w.add_uint32(K.EMBEDDING_LENGTH.format(arch=arch), int(cfg["hidden_size"]))
    w.add_uint32(K.FEED_FORWARD_LENGTH.format(arch=arch), int(cfg["intermediate_size"]))
    w.add_uint32(K.BLOCK_COUNT.format(arch=arch), int(cfg["num_hidden_layers"]))
    w.add_uint32(K.HEAD_COUNT.format(arch=arch), int(cfg["num_attention_heads"]))
    w.add_float32(K.LAYER_NORM_EPS.format(arch=arch), float(cfg.get("layer_norm_eps", 1e-12)))
    w.add_bool(K.CAUSAL.format(arch=arch), False)
    w.add_uint32(K.POOLING_TYPE.format(arch=arch), src.pooling)
    w.add_uint32(K.FILE_TYPE, int(gguf.LlamaFileType.MOSTLY_F16))
    w.add_string(K.TOKENIZER_MODEL, "bert")
    w.add_array(K.TOKENS, [_phantom(t) for t in src.vocab])
    control, normal = int(gguf.TokenType.CONTROL), int(gguf.TokenType.NORMAL)
    w.add_array(K.TOKEN_TYPES, [control if t in SPECIAL_TOKENS else normal for t in src.vocab])
    w.add_uint32(K.TOKEN_TYPE_COUNT, int(cfg.get("type_vocab_size", 2)))
    index = {t: i for i, t in enumerate(src.vocab)}
    for key, token in (
        (K.PAD_ID, "[PAD]"),
        (K.UNK_ID, "[UNK]"),
        (K.BOS_ID, "[CLS]"),  # without it llama.cpp assumes id 101 and aborts if absent
        (K.CLS_ID, "[CLS]"),
        (K.SEP_ID, "[SEP]"),
        (K.MASK_ID, "[MASK]"),
    ):
        if token not in index:
            raise ModelError(f"{folder}/vocab.txt: special token {token} is missing")
        w.add_uint32(key, index[token])
    w.add_uint32(K.KBPACK_WINDOW, window)
    w.add_string(K.KBPACK_SOURCE_SHA256, sha256_file(src.weights))
    w.add_string(K.KBPACK_CONVERTER, f"kbpack-bert-safetensors {CONVERTER_VERSION}")
    if src.reranker:  # one relevance score per (query, passage) pair
        w.add_array(K.CLASSIFIER_LABELS.format(arch=arch), ["relevance"])
    for tname, array in tensors.items():
        # llama.cpp adds token_types row 0 to F32 activations: keep it (and 1-D norms) F32.
        wide = array.ndim == 1 or tname == "token_types.weight"
        w.add_tensor(tname, array if wide else array.astype(np.float16))
    _write_atomically(w, out)
    return out


def read_bert_folder(folder: Path) -> BertFolder:
    """Parse and check ``config.json``, ``vocab.txt``, ``model.safetensors`` and the optional
    sentence-transformers files; raise ModelError naming the file and what to fix."""
    if not folder.is_dir():
        raise ModelError(f"{folder}: not a folder; pass a folder with config.json and weights")
    config = _read_json(folder / "config.json", required=True)
    model_type = config.get("model_type")
    if model_type != "bert":
        raise ModelError(
            f"{folder}/config.json: model_type {model_type!r} is not supported by the converter "
            "(only 'bert'); convert it with llama.cpp's convert_hf_to_gguf.py and pass the GGUF"
        )
    for key in (
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "max_position_embeddings",
    ):
        if not isinstance(config.get(key), int) or config[key] <= 0:
            raise ModelError(f"{folder}/config.json: {key} must be a positive integer")
    tok_cfg = _read_json(folder / "tokenizer_config.json", required=False)
    if tok_cfg.get("do_lower_case") is False:
        raise ModelError(
            f"{folder}/tokenizer_config.json: do_lower_case is false, but llama.cpp's BERT "
            "tokenizer always lowercases; this cased model cannot be converted faithfully"
        )
    vocab_path = folder / "vocab.txt"
    try:
        vocab = vocab_path.read_text(encoding="utf-8").split("\n")
    except (OSError, UnicodeDecodeError) as e:
        raise ModelError(f"{vocab_path}: cannot read the WordPiece vocabulary ({e})") from e
    if vocab and vocab[-1] == "":
        vocab.pop()
    weights = folder / "model.safetensors"
    if not weights.is_file():
        raise ModelError(f"{weights}: missing; only safetensors weights can be converted")
    _check_modules(folder)
    st_cfg = _read_json(folder / "sentence_bert_config.json", required=False)
    window = st_cfg.get("max_seq_length", config["max_position_embeddings"])
    if not isinstance(window, int):
        raise ModelError(f"{folder}/sentence_bert_config.json: max_seq_length must be an integer")
    window = min(window, config["max_position_embeddings"])
    if "BertForSequenceClassification" in config.get("architectures", []):
        _check_cross_encoder(folder, config)
        return BertFolder(config, vocab, weights, window, RANK_POOLING)
    return BertFolder(config, vocab, weights, window, _pooling(folder))


def _check_cross_encoder(folder: Path, config: dict[str, Any]) -> None:
    """What llama.cpp's rank pooling can reproduce: one output label, one token type."""
    labels = config.get("id2label", {"0": "LABEL_0"})
    if not isinstance(labels, dict) or len(labels) != 1:
        raise ModelError(
            f"{folder}/config.json: a reranker must have one output label (a relevance score), "
            f"this one has {len(labels) if isinstance(labels, dict) else labels!r}"
        )
    if int(config.get("type_vocab_size", 2)) != 1:
        # transformers gives the passage token type 1; llama.cpp adds type 0 to every token,
        # so the scores would silently differ from the model's.
        raise ModelError(
            f"{folder}/config.json: type_vocab_size {config.get('type_vocab_size', 2)}: this "
            "cross-encoder reads the passage as token type 1, which llama.cpp cannot feed; "
            "only single-type rerankers (bge-reranker, XLM-RoBERTa style) score faithfully"
        )


def _phantom(token: str) -> str:
    """WordPiece -> llama.cpp's form: word starts get U+2581, ``##x`` continuations lose the
    prefix, bracketed specials stay as they are (as llama.cpp's convert_hf_to_gguf.py does)."""
    if token.startswith("[") and token.endswith("]"):
        return token
    if token.startswith("##"):
        return token[2:]
    return "\u2581" + token


def _map_tensors(weights: Path, n_layers: int, *, head: bool = False) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for hf_name, array in read_safetensors(weights).items():
        name = hf_name.removeprefix("bert.")
        stem, _, kind = name.rpartition(".")
        if head and stem in _HEAD:
            out[f"{_HEAD[stem]}.{kind}"] = array
            continue
        if name.startswith("pooler.") or name == "embeddings.position_ids":
            continue  # pooler: unused by sentence embeddings; position_ids: a constant buffer
        gguf_name = _gguf_name(name, n_layers)
        if gguf_name is None:
            raise ModelError(f"{weights}: unexpected tensor {hf_name!r} for a BERT model")
        out[gguf_name] = array
    needed = ["token_embd.weight", "position_embd.weight", "token_embd_norm.weight"]
    if head:
        needed += [f"{t}.{k}" for t in _HEAD.values() for k in ("weight", "bias")]
    for required in needed:
        if required not in out:
            raise ModelError(f"{weights}: tensor for {required} is missing")
    return out


def _gguf_name(name: str, n_layers: int) -> str | None:
    stem, _, kind = name.rpartition(".")
    kind = {"gamma": "weight", "beta": "bias"}.get(kind, kind)
    if stem in _EMBEDDINGS:
        return f"{_EMBEDDINGS[stem]}.{kind}"
    m = _LAYER_RE.match(name)
    if m and int(m.group(1)) < n_layers and m.group(2) in _LAYER:
        return f"blk.{m.group(1)}.{_LAYER[m.group(2)]}.{kind}"
    return None


def _check_modules(folder: Path) -> None:
    path = folder / "modules.json"
    if not path.exists():
        return
    modules = _read_json(path, required=True, kind=list)
    for module in modules:
        kind = str(module.get("type", "")).rsplit(".", 1)[-1] if isinstance(module, dict) else ""
        if kind not in _SUPPORTED_MODULES:
            raise ModelError(
                f"{path}: module {kind or module!r} is not supported "
                f"(only {', '.join(sorted(_SUPPORTED_MODULES))})"
            )


def _pooling(folder: Path) -> int:
    cfg = _read_json(folder / "1_Pooling" / "config.json", required=False)
    chosen = [mode for key, mode in _POOLING_MODES.items() if cfg.get(key)]
    others = [
        k for k, v in cfg.items() if k.startswith("pooling_mode") and v and k not in _POOLING_MODES
    ]
    if others or len(chosen) > 1:
        raise ModelError(f"{folder}/1_Pooling/config.json: pooling {others or chosen} unsupported")
    return chosen[0] if chosen else 1


def _read_json(path: Path, *, required: bool, kind: type = dict) -> Any:
    if not path.exists() and not required:
        return kind()
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ModelError(f"{path}: cannot read JSON ({e})") from e
    if not isinstance(value, kind):
        raise ModelError(f"{path}: expected a JSON {kind.__name__}")
    return value


def _write_atomically(writer: Any, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    os.close(fd)
    try:
        writer.write_header_to_file(Path(tmp))
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
