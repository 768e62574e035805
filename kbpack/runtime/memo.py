"""This machine's memos: small facts kbpack found out once and keeps in the user cache
(``kbpack.runtime.cache``), so that the next process need not find them out again.

Every memo of kbpack lives here, one folder each: packs parsed safely in the pre-flight child
(``parsed-packs``, kbpack/pack/preflight.py), verified or written here (``verified``,
kbpack/pack/verified.py), the model a pack's cold query loads early (``pack-models``,
kbpack/model/early.py), model files' SHA-256 (``hashes``) and GGUF headers (``gguf-headers``,
``gguf-checked``, kbpack/model/), models loaded safely once (``loaded-models``).

The rules, the same for all:

* a memo is a file named by a key: the caller's digest of what the fact depends on (a file's
  state: its real path, size and modification time, and more where more matters), so a changed
  file is another key, never a stale answer; :class:`FileMemo` is the common case, a fact
  about one file's state;
* reading never fails: a missing, unreadable or corrupt memo reads as None, and the caller finds
  the fact out again;
* writing never fails (a read-only cache, a full disk, a sandboxed child that may write no file
  cost only time) and is atomic: a hidden temp file renamed into place, so a reader never sees
  half a memo.

Nothing in a memo is needed to read a pack: removing the cache costs time, never correctness.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path
from typing import Any, NamedTuple

from kbpack.runtime.cache import cache_dir


def digest(*parts: object) -> str:
    """A key from the parts a fact depends on (SHA-256 of their JSON, hex)."""
    return hashlib.sha256(json.dumps(parts).encode("utf-8", "surrogatepass")).hexdigest()


class Memo:
    """One folder of memos, ``cache_dir()/folder``. ``fan_out``: the memos sit in
    subfolders named by the key's first two characters (for folders that grow with every pack
    met); ``suffix``: the file names' ending."""

    def __init__(self, folder: str, *, fan_out: bool = False, suffix: str = "") -> None:
        self.folder = folder
        self.fan_out = fan_out
        self.suffix = suffix

    def path(self, key: str) -> Path:
        base = cache_dir() / self.folder
        if self.fan_out:
            base = base / key[:2]
        return base / f"{key}{self.suffix}"

    def has(self, key: str) -> bool:
        try:
            return self.path(key).is_file()
        except OSError:
            return False

    def read(self, key: str) -> bytes | None:
        try:
            return self.path(key).read_bytes()
        except OSError:
            return None

    def read_json(self, key: str) -> Any:
        """The memo's JSON value; None if it is missing or not JSON."""
        data = self.read(key)
        if data is None:
            return None
        try:
            return json.loads(data)
        except (ValueError, UnicodeError):
            return None

    def write(self, key: str, data: bytes) -> bool:
        """Store ``data`` under ``key`` atomically; False (silently) if it cannot be."""
        with contextlib.suppress(OSError):
            path = self.path(key)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
            try:
                tmp.write_bytes(data)
                os.replace(tmp, path)
            finally:
                with contextlib.suppress(OSError):
                    tmp.unlink()  # only left where the write or the rename failed
            return True
        return False

    def write_json(self, key: str, value: Any) -> bool:
        try:
            data = json.dumps(value).encode("utf-8", "surrogatepass")
        except (TypeError, ValueError, UnicodeError):
            return False
        return self.write(key, data)


class FileState(NamedTuple):
    """A file as a memo knows it: a write changes its size or modification time."""

    real_path: str
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, path: Path) -> FileState:
        """The state of ``path`` now (OSError if it cannot be stat'ed)."""
        st = path.stat()
        return cls(str(path.resolve()), st.st_size, st.st_mtime_ns)


class FileMemo:
    """A fact about one file, kept for its state: one memo per file (named by its real path),
    holding the state it was found for; a file whose state changed reads as None until the
    fact is remembered again (and replaces the old memo)."""

    def __init__(self, folder: str) -> None:
        self.memo = Memo(folder, suffix=".json")

    def path(self, real_path: str) -> Path:
        name = hashlib.sha256(real_path.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        return self.memo.path(name)

    def recall(self, state: FileState) -> Any:
        """The value remembered for this very state, or None."""
        try:
            saved = json.loads(self.path(state.real_path).read_bytes())
        except (OSError, ValueError, UnicodeError):
            return None
        if isinstance(saved, dict) and saved.get("state") == list(state):
            return saved.get("value")
        return None

    def remember(self, state: FileState, value: Any) -> bool:
        name = self.path(state.real_path).name.removesuffix(self.memo.suffix)
        return self.memo.write_json(name, {"state": list(state), "value": value})


__all__ = ["FileMemo", "FileState", "Memo", "digest"]
