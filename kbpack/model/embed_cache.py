"""Finished embeddings kept on disk, so an interrupted or killed build loses none of them.

llama.cpp's vectors depend on the other texts of the same ``llama_decode`` call (a text embedded
alone and in a batch differed by up to 1.5e-4 on the default model), so a vector is only reused
where it would come out bit for bit the same: an entry is one whole decode batch, keyed by the
model's SHA-256 and the exact tokens of every sequence in it (the document prefix is in the
tokens). A rerun of the same sources, options and model makes the same batches, takes the
finished ones from here and decodes the rest: its pack equals a clean build's.

Storage: ``cache_dir()/embeddings/<model sha256[:16]>/<ns>-<pid>.kbe``, one append-only journal
per build: a header, then records ``key(32) | n(u32) | n*width float32 | crc32(u32)``, each
written with one ``write`` (so a SIGKILL leaves whole records: the kernel has them) and fsynced
every few seconds and at the end (a power cut loses at most those seconds). A torn or corrupt
record ends a journal's reading; a bad checksum is a miss. The folder is bounded: journals are
removed oldest first (by modification time, refreshed when a journal is read) past
``max_bytes``. Removing the folder costs time, never correctness.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import struct
import time
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from kbpack.runtime.cache import cache_dir

MAGIC = b"KBEMB001"
_HEAD = struct.Struct("<8sI")  # magic, floats per vector
_REC = struct.Struct("<32sI")  # key, vectors in the record
DEFAULT_MAX_BYTES = 2 * 2**30  # ~1.4M vectors of 384 dims
FSYNC_EVERY_S = 2.0
# Test-only: "N" or "N:SIGNAME" -- after the N-th stored batch the process signals itself (a
# kill at a known point of a build, without timing; tests/model/test_embed_cache.py).
TEST_SIGNAL_ENV = "KBPACK_TEST_SIGNAL_AFTER_BATCHES"


def embeddings_dir() -> Path:
    return cache_dir() / "embeddings"


class EmbeddingCache:
    """Decode batches of one model: ``lookup`` before decoding, ``store`` after."""

    def __init__(
        self,
        model_sha256: str,
        width: int,
        max_bytes: int = DEFAULT_MAX_BYTES,
        root: Path | None = None,
        readonly: bool = False,
    ) -> None:
        self.root = (root or embeddings_dir()) / model_sha256[:16]
        self.model = bytes.fromhex(model_sha256)
        self.width = width
        self.max_bytes = max_bytes
        self.hits = 0  # vectors taken from the cache
        self.stored = 0  # batches written
        self._index: dict[bytes, tuple[Path, int, int]] = {}  # key -> (journal, offset, n)
        self._touched: set[Path] = set()
        self._fd: int | None = None
        self._path: Path | None = None
        self._written = 0
        self._synced = time.monotonic()
        self._signal_after = _test_signal()
        self.readonly = readonly  # look, change nothing (build --dry-run)
        with contextlib.suppress(OSError):
            if not readonly:
                prune(self.root.parent, max_bytes)
            self._scan()

    @property
    def batches_kept(self) -> int:
        """Decode batches this model's journals hold (as indexed when the cache was opened)."""
        return len(self._index)

    @property
    def vectors_kept(self) -> int:
        return sum(n for _, _, n in self._index.values())

    def key(self, batch: Sequence[Sequence[int]]) -> bytes:
        h = hashlib.sha256(b"kbpack decode batch 1")
        h.update(self.model + struct.pack("<II", self.width, len(batch)))
        for tokens in batch:
            h.update(struct.pack("<I", len(tokens)))
            h.update(np.asarray(tokens, dtype="<i4").tobytes())
        return h.digest()

    def has(self, batch: Sequence[Sequence[int]]) -> bool:
        return self.key(batch) in self._index

    def lookup(self, batch: Sequence[Sequence[int]]) -> np.ndarray | None:
        """The pooled outputs (len(batch), width) this model gave exactly this batch, or None."""
        where = self._index.get(self.key(batch)) if self._index else None
        if where is None:
            return None
        path, offset, n = where
        size = _REC.size + 4 * n * self.width + 4
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                record = f.read(size)
            if path not in self._touched and not self.readonly:  # recently used: pruned last
                self._touched.add(path)
                os.utime(path)
        except OSError:
            return None
        if len(record) != size or zlib.crc32(record[:-4]) != struct.unpack("<I", record[-4:])[0]:
            return None
        if n != len(batch):
            return None
        self.hits += n
        return np.frombuffer(record, "<f4", n * self.width, _REC.size).reshape(n, self.width)

    def store(self, batch: Sequence[Sequence[int]], pooled: np.ndarray) -> None:
        """Append one decoded batch's pooled outputs (float32 (len(batch), width))."""
        if self.readonly or self.max_bytes <= 0 or self._written > self.max_bytes:
            return
        body = (
            _REC.pack(self.key(batch), len(batch))
            + np.ascontiguousarray(pooled, dtype="<f4").tobytes()
        )
        record = body + struct.pack("<I", zlib.crc32(body))
        try:
            if self._fd is None:
                self._open()
            assert self._fd is not None
            os.write(self._fd, record)
            self._written += len(record)
            if time.monotonic() - self._synced > FSYNC_EVERY_S:
                os.fsync(self._fd)
                self._synced = time.monotonic()
        except OSError:
            self._give_up()  # a full or read-only cache costs time, never the build
            return
        self.stored += 1
        if self._signal_after and self.stored == self._signal_after[0]:
            os.kill(os.getpid(), self._signal_after[1])

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None
        if not self.readonly:
            with contextlib.suppress(OSError):
                prune(self.root.parent, self.max_bytes)

    def __enter__(self) -> EmbeddingCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _open(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self._path = self.root / f"{time.time_ns()}-{os.getpid()}.kbe"
        self._fd = os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        os.write(self._fd, _HEAD.pack(MAGIC, self.width))
        self._written = _HEAD.size

    def _give_up(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
        self._fd = None
        self.max_bytes = 0

    def _scan(self) -> None:
        """Index every whole record of this model's journals (keys only: payloads are skipped)."""
        if not self.root.is_dir():
            return
        for path in sorted(self.root.glob("*.kbe")):
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                head = f.read(_HEAD.size)
                if len(head) < _HEAD.size or _HEAD.unpack(head) != (MAGIC, self.width):
                    continue
                offset = _HEAD.size
                while offset + _REC.size <= size:
                    key, n = _REC.unpack(f.read(_REC.size))
                    length = _REC.size + 4 * n * self.width + 4
                    if offset + length > size:
                        break  # torn tail: a build killed mid-write
                    self._index[key] = (path, offset, n)
                    offset += length
                    f.seek(offset)


def prune(root: Path, max_bytes: int) -> int:
    """Remove journals under ``root`` oldest first until they total at most ``max_bytes``;
    the bytes removed."""
    files = []
    for path in root.glob("*/*.kbe"):
        with contextlib.suppress(OSError):
            st = path.stat()
            files.append((st.st_mtime, st.st_size, path))
    total = sum(f[1] for f in files)
    removed = 0
    for _, size, path in sorted(files):
        if total <= max_bytes:
            break
        with contextlib.suppress(OSError):
            path.unlink()
            total -= size
            removed += size
    return removed


def _test_signal() -> tuple[int, int] | None:
    value = os.environ.get(TEST_SIGNAL_ENV)
    if not value:
        return None
    count, _, name = value.partition(":")
    return int(count), int(getattr(signal, name or "SIGKILL"))


__all__ = ["DEFAULT_MAX_BYTES", "EmbeddingCache", "embeddings_dir", "prune"]
