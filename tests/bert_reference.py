"""A numpy forward pass of a BERT encoder, written from the Hugging Face definition
(transformers' modeling_bert.py), to check what llama.cpp computes from kbpack's GGUF files.

It reads the *source* safetensors weights (float32), not the GGUF (float16 matrices), so a
mistake in the converter's tensor mapping shows as a mismatch, not as agreement. Token ids come
from the model's tokenizer as llama.cpp applies it: this checks the forward pass and the
pooling, not the tokenizer (the default model's tokenizer is checked against
sentence-transformers' vectors in tests/model/test_embed_reference.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from kbpack.model.safetensors import read_safetensors


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


def _gelu(x: np.ndarray) -> np.ndarray:
    """BERT's GELU (erf form), through the tanh approximation that ggml also uses; the two
    differ by < 1e-3 and the tests' tolerance is in the output, not here."""
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


class BertReference:
    """The weights of one sentence-transformers / BertForSequenceClassification folder."""

    def __init__(self, folder: Path) -> None:
        self.config = json.loads((folder / "config.json").read_text())
        tensors = read_safetensors(folder / "model.safetensors")
        self.w = {k.removeprefix("bert."): v.astype(np.float64) for k, v in tensors.items()}
        self.eps = float(self.config.get("layer_norm_eps", 1e-12))
        self.heads = int(self.config["num_attention_heads"])
        self.layers = int(self.config["num_hidden_layers"])

    def hidden_states(self, ids: list[int], token_types: list[int] | None = None) -> np.ndarray:
        """The last layer's (n_tokens, hidden) states for one sequence."""
        w, n = self.w, len(ids)
        types = np.asarray(token_types or [0] * n)
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][:n]
            + w["embeddings.token_type_embeddings.weight"][types]
        )
        x = _layer_norm(
            x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], self.eps
        )
        d = x.shape[1] // self.heads
        for i in range(self.layers):
            p = f"encoder.layer.{i}."

            def lin(x: np.ndarray, name: str, p: str = p) -> np.ndarray:
                return x @ w[p + name + ".weight"].T + w[p + name + ".bias"]

            q, k, v = (
                lin(x, f"attention.self.{m}").reshape(n, self.heads, d).transpose(1, 0, 2)
                for m in ("query", "key", "value")
            )
            scores = q @ k.transpose(0, 2, 1) / np.sqrt(d)
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            attn = scores / scores.sum(-1, keepdims=True)
            ctx = (attn @ v).transpose(1, 0, 2).reshape(n, -1)
            x = _layer_norm(
                x + lin(ctx, "attention.output.dense"),
                w[p + "attention.output.LayerNorm.weight"],
                w[p + "attention.output.LayerNorm.bias"],
                self.eps,
            )
            ffn = lin(_gelu(lin(x, "intermediate.dense")), "output.dense")
            x = _layer_norm(
                x + ffn, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], self.eps
            )
        return x

    def sentence_vector(self, ids: list[int], pooling: str) -> np.ndarray:
        """The unit sentence vector: mean of every token's state, or the first ([CLS]) one."""
        h = self.hidden_states(ids)
        v = h.mean(0) if pooling == "mean" else h[0]
        return v / np.linalg.norm(v)

    def relevance(self, ids: list[int], token_types: list[int] | None = None) -> float:
        """BertForSequenceClassification with one label: classifier(tanh(pooler([CLS])))."""
        w = self.w
        cls = self.hidden_states(ids, token_types)[0]
        pooled = np.tanh(cls @ w["pooler.dense.weight"].T + w["pooler.dense.bias"])
        return float((pooled @ w["classifier.weight"].T + w["classifier.bias"])[0])
