"""What identifies an embedding model: the content hash of its GGUF file, plus the facts that
decide whether two vectors are comparable (architecture, dims, pooling, window, normalisation).
The name is for people; the hash is the identity."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import re
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from kbpack.errors import ModelError
from kbpack.model import keys as K
from kbpack.model.gguf_header import read_gguf_metadata
from kbpack.runtime.memo import FileMemo, FileState

_SHA256 = re.compile(r"[0-9a-f]{64}")
# A GGUF without kbpack's window key gets its context length as window, capped: a 32k-token
# input would need a 32k x 32k attention matrix per head in one llama.cpp batch.
MAX_WINDOW = 8192


@dataclass(frozen=True)
class ModelIdentity:
    name: str
    sha256: str
    architecture: str
    dims: int
    pooling: str  # "mean", "cls", "last"
    window: int  # tokens per input, special tokens included
    normalize: str  # "l2"
    llama_cpp_version: str

    def as_dict(self) -> dict[str, str | int]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ModelIdentity:
        """Parse untrusted stored attributes; raise ModelError naming the bad key."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in d:
                raise ModelError(f"model identity: key {f.name!r} is missing")
            v = d[f.name]
            if isinstance(v, bytes):
                v = v.decode("utf-8", "replace")
            if f.type == "int":
                if isinstance(v, bool) or not isinstance(v, int | np.integer) or v <= 0:
                    raise ModelError(f"model identity: {f.name!r} must be a positive integer")
                v = int(v)
            elif not isinstance(v, str) or not v:
                raise ModelError(f"model identity: {f.name!r} must be a non-empty string")
            values[f.name] = v
        if not _SHA256.fullmatch(values["sha256"]):
            raise ModelError("model identity: 'sha256' must be 64 lowercase hex digits")
        return cls(**values)


def sha256_file(path: Path) -> str:
    """SHA-256 of a file, memoised by (real path, size, mtime): in the process, and in the
    cache folder (one of this machine's memos, kbpack/runtime/memo.py), so that a cold
    ``kbpack query`` does not hash a 46 MB model (twice) every time. Any change to the file
    changes its size or mtime, and so its key."""
    path = Path(path)
    try:
        state = FileState.of(path)
    except OSError as e:
        raise ModelError(f"{path}: cannot read model file ({e.strerror or e})") from e
    if state in _MEMO:
        return _MEMO[state]
    saved = _HASHES.recall(state)
    if isinstance(saved, str) and _SHA256.fullmatch(saved):
        _MEMO[state] = saved
        return saved
    h = hashlib.sha256()
    try:
        with path.open("rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
    except OSError as e:
        raise ModelError(f"{path}: cannot read model file ({e.strerror or e})") from e
    _MEMO[state] = h.hexdigest()
    _HASHES.remember(state, _MEMO[state])  # a read-only cache only costs speed
    return _MEMO[state]


_MEMO: dict[FileState, str] = {}
_HASHES = FileMemo("hashes")


def _memo_path(real_path: str) -> Path:
    return _HASHES.path(real_path)


@functools.cache
def llama_cpp_version() -> str:
    """Installed llama-cpp-python version, without importing it (that costs 0.3 s).

    Read from the ``__version__`` line of the package's ``__init__.py`` (found, not imported):
    ``importlib.metadata`` alone cost a cold ``kbpack query`` ~20 ms (it imports the email
    parser and scans every installed distribution). The distribution metadata is the fallback.
    """
    import importlib.util

    loaded = sys.modules.get("llama_cpp")
    if loaded is not None and isinstance(getattr(loaded, "__version__", None), str):
        return str(loaded.__version__)
    with contextlib.suppress(ImportError, OSError, ValueError):
        spec = importlib.util.find_spec("llama_cpp")
        if spec is not None and spec.origin:
            with open(spec.origin, encoding="utf-8") as f:
                found = _VERSION_LINE.search(f.read())
            if found:
                return found.group(1)
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("llama-cpp-python")
    except PackageNotFoundError:
        return "not installed"


_VERSION_LINE = re.compile(r"""^__version__\s*=\s*["']([^"']+)["']""", re.MULTILINE)


EMBEDDING_POOLINGS = ("mean", "cls", "last")
RERANK_POOLINGS = ("rank",)


def identify_gguf(
    path: Path, *, sha256: str | None = None, poolings: tuple[str, ...] = EMBEDDING_POOLINGS
) -> ModelIdentity:
    """Identity of a GGUF model, from its header; ModelError if its pooling is not one of
    ``poolings`` (an embedding model by default; ``RERANK_POOLINGS`` for a reranker)."""
    meta = read_gguf_metadata(path)
    arch = meta.get(K.ARCHITECTURE)
    if not isinstance(arch, str):
        raise ModelError(f"{path}: GGUF has no {K.ARCHITECTURE}; not a usable model")

    def positive(key: str) -> int:
        v = meta.get(key.format(arch=arch))
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise ModelError(f"{path}: GGUF key {key.format(arch=arch)} is missing or not > 0")
        return v

    dims = positive(K.EMBEDDING_LENGTH)
    positions = positive(K.CONTEXT_LENGTH)
    pooling = K.POOLING_NAMES.get(meta.get(K.POOLING_TYPE.format(arch=arch), 0), "unknown")
    if pooling not in poolings and poolings == RERANK_POOLINGS:
        raise ModelError(
            f"{path}: pooling {pooling!r} ({K.POOLING_TYPE.format(arch=arch)}) is not a "
            "reranker's; pass a cross-encoder GGUF with rank pooling to --rerank"
        )
    if pooling not in poolings:
        why = (
            "is a reranker's, not an embedding"
            if pooling == "rank"
            else "gives no sentence embedding"
        )
        raise ModelError(
            f"{path}: pooling {pooling!r} ({K.POOLING_TYPE.format(arch=arch)}) {why}; "
            "use an embedding model with mean, cls or last pooling"
        )
    window = meta.get(K.KBPACK_WINDOW, min(positions, MAX_WINDOW))
    if not isinstance(window, int) or not 2 < window <= positions:
        raise ModelError(f"{path}: {K.KBPACK_WINDOW} {window!r} must be in 3..{positions}")
    name = meta.get(K.NAME)
    return ModelIdentity(
        name=name if isinstance(name, str) and name else path.stem,
        sha256=sha256 or sha256_file(path),
        architecture=arch,
        dims=dims,
        pooling=pooling,
        window=window,
        normalize="l2",
        llama_cpp_version=llama_cpp_version(),
    )
