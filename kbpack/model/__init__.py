"""Embedding models: GGUF identity, the safetensors -> GGUF converter, the default model cache,
the llama.cpp embedder and reranker, and which model a pack's dense search uses (``resolve``).

Importing this package is cheap: its names load on first use, so ``kbpack.model.early`` (the
cold query's head start, imported before anything else) does not pay for numpy or the converter.
"""

from __future__ import annotations

import importlib
from typing import Any

_NAMES = {
    "DEFAULT_MODEL_NAME": "kbpack.model.cache",
    "INSTALL_HINT": "kbpack.model.cache",
    "default_model_path": "kbpack.model.cache",
    "cache_dir": "kbpack.runtime.cache",
    "convert_bert": "kbpack.model.convert",
    "ModelIdentity": "kbpack.model.identity",
    "identify_gguf": "kbpack.model.identity",
    "sha256_file": "kbpack.model.identity",
}

__all__ = sorted(_NAMES)


def __getattr__(name: str) -> Any:
    if name in _NAMES:
        return getattr(importlib.import_module(_NAMES[name]), name)
    raise AttributeError(f"module 'kbpack.model' has no attribute {name!r}")
