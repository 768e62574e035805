"""Read a GGUF file's metadata (key/value section) without llama.cpp, bounds-checked.

llama.cpp aborts or misbehaves on some malformed files; parsing the header here first turns
"not a GGUF", "truncated" and "unsupported version" into one-line ModelErrors. Arrays are
skipped (only their length is kept), so a 30k-token vocabulary costs a few milliseconds.
"""

from __future__ import annotations

import contextlib
import struct
from pathlib import Path
from typing import Any, BinaryIO

from kbpack.errors import ModelError
from kbpack.runtime.memo import FileMemo, FileState

MAGIC = b"GGUF"
VERSIONS = (2, 3)
MAX_KEY_BYTES = 1 << 16
MAX_STRING_BYTES = 1 << 24
MAX_KV = 1 << 16

# GGUF value types -> struct format of the scalar.
_SCALARS = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
_STRING, _ARRAY = 8, 9
_U64 = struct.Struct("<Q")


class ArrayInfo:
    """An array value that was skipped: its element type and length."""

    def __init__(self, element_type: int, length: int) -> None:
        self.element_type = element_type
        self.length = length

    def __repr__(self) -> str:
        return f"<array of {self.length}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ArrayInfo) and (other.element_type, other.length) == (
            self.element_type,
            self.length,
        )

    def __hash__(self) -> int:
        return hash((self.element_type, self.length))


# (path, size, mtime_ns) -> metadata: a query process identifies the model and then loads it,
# and each wanted the header; walking a 30k-token vocabulary twice cost ~25 ms of a cold query
_PARSED: dict[FileState, dict[str, Any]] = {}


def read_gguf_metadata(path: Path) -> dict[str, Any]:
    """The key/value metadata of ``path``; arrays come back as ArrayInfo. Parsed once per
    process for an unchanged file (same size and modification time), and remembered in the
    user cache (``gguf-headers/``) under the same key: walking the 30k-token vocabulary of the
    default model cost every cold ``kbpack query`` ~10 ms of CPU (~40 ms on a loaded machine).
    A file that changes gets a new key and is parsed (and checked) again."""
    try:
        state = FileState.of(path)
        if state not in _PARSED:
            remembered = _recall(state)
            if remembered is None:
                with path.open("rb") as f:
                    remembered = _read(f, path, state.size)
                _remember(state, remembered)
            _PARSED[state] = remembered
        return dict(_PARSED[state])
    except OSError as e:
        raise ModelError(f"{path}: cannot read model file ({e.strerror or e})") from e


MEMO_FOLDER = "gguf-headers"
_ARRAY_MARK = "__gguf_array__"  # an ArrayInfo in the memo's JSON: {mark: [type, length]}


_HEADERS = FileMemo(MEMO_FOLDER)  # one of this machine's memos (kbpack/runtime/memo.py)


def _memo_file(real_path: str) -> Path:
    return _HEADERS.path(real_path)


def _recall(state: FileState) -> dict[str, Any] | None:
    """The metadata remembered for this file state, or None (none, or unreadable: parse)."""
    saved = _HEADERS.recall(state)
    if not isinstance(saved, dict):
        return None
    meta: dict[str, Any] = {}
    with contextlib.suppress(ValueError, TypeError, KeyError):
        for k, v in saved.items():
            if isinstance(v, dict):
                etype, n = v[_ARRAY_MARK]
                v = ArrayInfo(int(etype), int(n))
            elif not isinstance(v, (str, int, float)):
                return None
            meta[str(k)] = v
        return meta
    return None


def _remember(state: FileState, meta: dict[str, Any]) -> None:
    """Remember the metadata; a read-only cache only costs the next parse."""
    plain = {
        k: {_ARRAY_MARK: [v.element_type, v.length]} if isinstance(v, ArrayInfo) else v
        for k, v in meta.items()
    }
    _HEADERS.remember(state, plain)


def _read(f: BinaryIO, path: Path, size: int) -> dict[str, Any]:
    return _header(f, path, size)[0]


def _header(f: BinaryIO, path: Any, size: int) -> tuple[dict[str, Any], int, _Reader]:
    """(metadata, tensor count, a reader positioned at the tensor infos) from ``f``'s start."""
    magic = f.read(4)
    if magic != MAGIC:
        raise ModelError(f"{path}: not a GGUF model file (starts with {magic!r}, not b'GGUF')")
    r = _Reader(f, path, size)
    version = r.scalar("<I")
    if version not in VERSIONS:
        raise ModelError(f"{path}: GGUF version {version} is not supported (only 2 and 3)")
    n_tensors = r.scalar("<Q")  # bounded by _tensors, the one reader of the tensor infos
    n_kv = r.scalar("<Q")
    if n_kv > MAX_KV:
        raise ModelError(f"{path}: GGUF header claims {n_kv} metadata keys; the file is damaged")
    meta: dict[str, Any] = {}
    for _ in range(n_kv):
        key = r.string(MAX_KEY_BYTES)
        meta[key] = r.value(r.scalar("<I"))
    return meta, n_tensors, r


class _Reader:
    def __init__(self, f: BinaryIO, path: Path, size: int) -> None:
        self.f, self.path, self.size = f, path, size

    def take(self, n: int) -> bytes:
        if self.f.tell() + n > self.size:
            raise ModelError(f"{self.path}: GGUF header is truncated; the file is damaged")
        return self.f.read(n)

    def scalar(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self, limit: int = MAX_STRING_BYTES) -> str:
        n = self.scalar("<Q")
        if n > limit:
            raise ModelError(f"{self.path}: GGUF string of {n} bytes; the file is damaged")
        try:
            return self.take(n).decode("utf-8")
        except UnicodeDecodeError as e:
            raise ModelError(f"{self.path}: GGUF string is not UTF-8; the file is damaged") from e

    def value(self, vtype: int) -> Any:
        if vtype in _SCALARS:
            return self.scalar(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            etype, n = self.scalar("<I"), self.scalar("<Q")
            if etype in _SCALARS:
                self.f.seek(self.f.tell() + n * struct.calcsize(_SCALARS[etype]))
                if self.f.tell() > self.size:
                    raise ModelError(f"{self.path}: GGUF array is truncated; the file is damaged")
            elif etype == _STRING:
                self._skip_strings(n)
            else:
                raise ModelError(f"{self.path}: GGUF array of type {etype}; the file is damaged")
            return ArrayInfo(etype, n)
        raise ModelError(f"{self.path}: GGUF value type {vtype} is unknown; the file is damaged")

    def _skip_strings(self, n: int) -> None:
        """Skip ``n`` length-prefixed strings. The lengths are walked in 1 MiB blocks: one
        seek + read per string made a 30k-token vocabulary cost ~0.2 s per parse."""
        pos = self.f.tell()
        buf, base = b"", pos  # base: the file offset of buf[0]
        for _ in range(n):
            if pos + 8 > self.size:
                raise ModelError(f"{self.path}: GGUF header is truncated; the file is damaged")
            if pos + 8 > base + len(buf):
                self.f.seek(pos)
                buf, base = self.f.read(1 << 20), pos
            (length,) = _U64.unpack_from(buf, pos - base)
            pos += 8 + length
            if pos > self.size:
                raise ModelError(f"{self.path}: GGUF string is truncated; the file is damaged")
        self.f.seek(pos)


# -- hyperparameters against tensors (issue 30: a model from a pack is checked before llama.cpp
# sees it; bert.block_count 0 made llama.cpp abort: GGML_ASSERT(n_layer_all > 0), exit 134)
MAX_TENSORS = 1 << 16
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_BLOCKS = 1024
MAX_WIDTH = 1 << 16  # embedding length, heads, feed-forward length
MAX_CONTEXT = 1 << 20


def read_gguf_tensors(path: Path) -> dict[str, tuple[int, ...]]:
    """The tensor infos of ``path`` (name -> dims, llama.cpp's order: ne[0] first),
    bounds-checked like the metadata."""
    try:
        with path.open("rb") as f:
            return _tensors(f, path, path.stat().st_size)[1]
    except OSError as e:
        raise ModelError(f"{path}: cannot read model file ({e.strerror or e})") from e


def _tensors(f: BinaryIO, where: Any, size: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """(metadata, tensor infos) read from ``f`` at its start, in one walk of the header."""
    meta, n_tensors, r = _header(f, where, size)
    if n_tensors > MAX_TENSORS:
        raise ModelError(f"{where}: GGUF header claims {n_tensors} tensors; the file is damaged")
    tensors: dict[str, tuple[int, ...]] = {}
    for _ in range(n_tensors):
        name = r.string(MAX_KEY_BYTES)
        n_dims = r.scalar("<I")
        if not 1 <= n_dims <= MAX_DIMS:
            raise ModelError(f"{where}: GGUF tensor {name!r} has {n_dims} dimensions; damaged")
        tensors[name] = tuple(r.scalar("<Q") for _ in range(n_dims))
        r.scalar("<I")  # type
        r.scalar("<Q")  # offset
    return meta, tensors


def check_gguf_bytes(head: bytes, where: str) -> None:
    """``check_hyperparameters`` on a GGUF's first bytes (verify's child holds them in memory:
    it may write no file)."""
    import io

    meta, tensors = _tensors(io.BytesIO(head), where, len(head))
    _check(meta, tensors, where)


CHECKED_FOLDER = "gguf-checked"  # file states whose hyperparameters passed _check
_CHECKED = FileMemo(CHECKED_FOLDER)


def check_hyperparameters(path: Path) -> None:
    """ModelError (one line) unless the header's hyperparameters are positive, bounded and
    agree with the tensors they describe: llama.cpp asserts on some of these (an abort no
    Python code can catch) and trusts others to size its buffers. A file state (path, size,
    modification time) that passed is remembered in the user cache as the metadata is: the
    tensor walk re-reads the whole header (~12 ms for the default model) on every cold query."""
    try:
        state = FileState.of(path)
    except OSError as e:
        raise ModelError(f"{path}: cannot read model file ({e.strerror or e})") from e
    if _CHECKED.recall(state) is True:
        return
    _check(read_gguf_metadata(path), read_gguf_tensors(path), path)
    _CHECKED.remember(state, True)  # a read-only cache only costs the next check


def _check(meta: dict[str, Any], tensors: dict[str, Any], path: Any) -> None:
    arch = meta.get("general.architecture")
    if not isinstance(arch, str):
        raise ModelError(f"{path}: GGUF has no general.architecture; not a usable model")

    def bounded(key: str, top: int, required: bool = True) -> int | None:
        name = f"{arch}.{key}"
        v = meta.get(name)
        if v is None and not required:
            return None
        if not isinstance(v, int) or isinstance(v, bool) or not 0 < v <= top:
            raise ModelError(f"{path}: GGUF {name} is {v!r}, not in 1..{top}; the model is damaged")
        return v

    blocks = bounded("block_count", MAX_BLOCKS)
    width = bounded("embedding_length", MAX_WIDTH)
    bounded("context_length", MAX_CONTEXT)
    heads = bounded("attention.head_count", MAX_WIDTH, required=False)
    bounded("feed_forward_length", MAX_WIDTH * 4, required=False)
    assert blocks is not None and width is not None
    found = {int(n.split(".")[1]) for n in tensors if n.startswith("blk.") and _block_no(n)}
    if found != set(range(blocks)):
        raise ModelError(
            f"{path}: GGUF {arch}.block_count is {blocks}, the file holds {len(found)} blocks "
            "of tensors; the model is damaged"
        )
    if heads is not None and width % heads:
        raise ModelError(
            f"{path}: GGUF {arch}.embedding_length {width} is not a multiple of "
            f"{arch}.attention.head_count {heads}; the model is damaged"
        )
    embd = tensors.get("token_embd.weight")
    if embd is None or embd[0] != width:
        raise ModelError(
            f"{path}: GGUF token_embd.weight is {embd!r}, not {width} wide "
            f"({arch}.embedding_length); the model is damaged"
        )


def _block_no(name: str) -> bool:
    parts = name.split(".")
    return len(parts) > 2 and parts[1].isdigit() and len(parts[1]) <= 6
