"""Read a GGUF file's metadata (key/value section) without llama.cpp, bounds-checked.

llama.cpp aborts or misbehaves on some malformed files; parsing the header here first turns
"not a GGUF", "truncated" and "unsupported version" into one-line ModelErrors. Arrays are
skipped (only their length is kept), so a 30k-token vocabulary costs a few milliseconds.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import struct
from pathlib import Path
from typing import Any, BinaryIO

from kbpack.errors import ModelError

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
_PARSED: dict[tuple[str, int, int], dict[str, Any]] = {}


def read_gguf_metadata(path: Path) -> dict[str, Any]:
    """The key/value metadata of ``path``; arrays come back as ArrayInfo. Parsed once per
    process for an unchanged file (same size and modification time), and remembered in the
    user cache (``gguf-headers/``) under the same key: walking the 30k-token vocabulary of the
    default model cost every cold ``kbpack query`` ~10 ms of CPU (~40 ms on a loaded machine).
    A file that changes gets a new key and is parsed (and checked) again."""
    try:
        st = path.stat()
        key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
        if key not in _PARSED:
            remembered = _recall(key)
            if remembered is None:
                with path.open("rb") as f:
                    remembered = _read(f, path, st.st_size)
                _remember(key, remembered)
            _PARSED[key] = remembered
        return dict(_PARSED[key])
    except OSError as e:
        raise ModelError(f"{path}: cannot read model file ({e.strerror or e})") from e


MEMO_FOLDER = "gguf-headers"
_ARRAY_MARK = "__gguf_array__"  # an ArrayInfo in the memo's JSON: {mark: [type, length]}


def _memo_file(real_path: str) -> Path:
    from kbpack.runtime.cache import cache_dir  # imported when used: cache imports the converter

    name = hashlib.sha256(real_path.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return cache_dir() / MEMO_FOLDER / f"{name}.json"


def _recall(key: tuple[str, int, int]) -> dict[str, Any] | None:
    """The metadata remembered for this file state, or None (none, or unreadable: parse)."""
    with contextlib.suppress(OSError, ValueError, TypeError, KeyError, UnicodeError):
        saved = json.loads(_memo_file(key[0]).read_text(encoding="utf-8"))
        if [saved["path"], saved["size"], saved["mtime_ns"]] != list(key):
            return None
        meta: dict[str, Any] = {}
        for k, v in saved["metadata"].items():
            if isinstance(v, dict):
                etype, n = v[_ARRAY_MARK]
                v = ArrayInfo(int(etype), int(n))
            elif not isinstance(v, (str, int, float)):
                return None
            meta[str(k)] = v
        return meta
    return None


def _remember(key: tuple[str, int, int], meta: dict[str, Any]) -> None:
    """Write the memo atomically; a read-only cache only costs the next parse."""
    plain = {
        k: {_ARRAY_MARK: [v.element_type, v.length]} if isinstance(v, ArrayInfo) else v
        for k, v in meta.items()
    }
    with contextlib.suppress(OSError, ValueError, TypeError):
        memo = _memo_file(key[0])
        memo.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo.with_name(f"{memo.name}.{os.getpid()}.tmp")
        record = {"path": key[0], "size": key[1], "mtime_ns": key[2], "metadata": plain}
        tmp.write_text(json.dumps(record), encoding="utf-8")
        os.replace(tmp, memo)


def _read(f: BinaryIO, path: Path, size: int) -> dict[str, Any]:
    magic = f.read(4)
    if magic != MAGIC:
        raise ModelError(f"{path}: not a GGUF model file (starts with {magic!r}, not b'GGUF')")
    r = _Reader(f, path, size)
    version = r.scalar("<I")
    if version not in VERSIONS:
        raise ModelError(f"{path}: GGUF version {version} is not supported (only 2 and 3)")
    r.scalar("<Q")  # tensor count: llama.cpp checks the tensors themselves
    n_kv = r.scalar("<Q")
    if n_kv > MAX_KV:
        raise ModelError(f"{path}: GGUF header claims {n_kv} metadata keys; the file is damaged")
    meta: dict[str, Any] = {}
    for _ in range(n_kv):
        key = r.string(MAX_KEY_BYTES)
        meta[key] = r.value(r.scalar("<I"))
    return meta


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
