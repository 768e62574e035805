"""The model-hash memo never answers with a stale hash: the hash is the model's identity."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from kbpack.model import identity


def test_memo_follows_the_file(tmp_path: Path) -> None:
    f = tmp_path / "m.gguf"
    f.write_bytes(b"first model")
    assert identity.sha256_file(f) == hashlib.sha256(b"first model").hexdigest()
    f.write_bytes(b"second model, longer")
    assert identity.sha256_file(f) == hashlib.sha256(b"second model, longer").hexdigest()
    st = f.stat()
    f.write_bytes(b"third model, longer!")  # same size as the second
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    identity._MEMO.clear()  # a new process: only the on-disk memo is left
    assert identity.sha256_file(f) == hashlib.sha256(b"third model, longer!").hexdigest()


def test_a_corrupt_memo_is_ignored(tmp_path: Path) -> None:
    f = tmp_path / "m.gguf"
    f.write_bytes(b"model")
    identity.sha256_file(f)
    memo = identity._memo_path(str(f.resolve()))
    memo.write_text("{not json")
    identity._MEMO.clear()
    assert identity.sha256_file(f) == hashlib.sha256(b"model").hexdigest()
