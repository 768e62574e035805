"""Embedding models: GGUF identity, the safetensors -> GGUF converter, the default model cache.

Importing this package is cheap: nothing here imports llama.cpp or gguf at module level.
"""

from __future__ import annotations

from kbpack.model.cache import DEFAULT_MODEL_NAME, INSTALL_HINT, default_model_path
from kbpack.model.convert import convert_bert
from kbpack.model.identity import ModelIdentity, identify_gguf, sha256_file
from kbpack.runtime.cache import cache_dir

__all__ = [
    "DEFAULT_MODEL_NAME",
    "INSTALL_HINT",
    "ModelIdentity",
    "cache_dir",
    "convert_bert",
    "default_model_path",
    "identify_gguf",
    "sha256_file",
]
