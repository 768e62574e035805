"""The kbpack header: magic, manifest and signature, in the HDF5 user block.

Layout of the first ``USERBLOCK_SIZE`` bytes of a pack (HDF5 skips them by design)::

    [0, 8)              MAGIC
    [8, 16)             uint64 LE  M = manifest length
    [16, 16+M)          manifest: canonical JSON (sorted keys, no spaces), UTF-8
    [16+M, 24+M)        uint64 LE  S = signature record length (0 when unsigned)
    [24+M, 24+M+S)      signature record: canonical JSON
    rest                zero bytes (checked: any other byte is damage)

The manifest holds the exact file size and the SHA-256 of every byte after the user block, so
a verifier checks the bytes before HDF5 parses any of them. The signature covers the manifest
bytes exactly, so signing rewrites the user block only, never the HDF5 content.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kbpack.errors import InputError, NewerFormatError, NotAPackError, PackError, UsageError
from kbpack.pack import format as F

READ_BLOCK = 4 * 2**20


@dataclass
class Manifest:
    format_version: int
    file_size: int
    hdf5_sha256: str
    counts: dict[str, int]
    elements: dict[str, str]  # element path (or path + "@attrs") -> SHA-256 hex
    kbpack_version: str
    created: str
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json_bytes(self) -> bytes:
        doc = {
            "magic": "kbpack",
            "format_version": self.format_version,
            "userblock_size": F.USERBLOCK_SIZE,
            "file_size": self.file_size,
            "hdf5_sha256": self.hdf5_sha256,
            "counts": self.counts,
            "elements": self.elements,
            "kbpack_version": self.kbpack_version,
            "created": self.created,
            **self.extra,
        }
        return canonical_json(doc)


@dataclass
class Header:
    """What the user block holds, parsed. ``manifest_bytes`` is what a signature covers."""

    manifest: Manifest
    manifest_bytes: bytes
    signature: dict[str, Any] | None
    padding_clean: bool


def canonical_json(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def not_a_pack(where: str) -> str:
    return (
        f"{where}: not a kbpack pack (no kbpack magic at byte 0); give a file made by kbpack build"
    )


SET_ID = re.compile(r"[0-9a-f]{1,64}")  # spec §2: a hex string; it names backup files


def _check_set(info: Any, where: str) -> None:
    """A set member's ``set`` (spec §2): ``{"id": hex, "index": I, "count": N}``. Its id
    becomes part of a backup file's name (``.STEM-00I.kbpack.set-ID``), so an id outside the
    grammar ('/' in it made verify and query fail with a ValueError) is refused at open; the
    index against the count and the file name is verify's (set-invalid, set-misnamed)."""
    if info is None:
        return
    ok = isinstance(info, dict) and isinstance(info.get("id"), str)
    ok = ok and SET_ID.fullmatch(info["id"]) is not None
    ok = ok and all(
        isinstance(info.get(k), int) and not isinstance(info.get(k), bool) and info[k] >= 0
        for k in ("index", "count")
    )
    if not ok:
        raise PackError(
            f"{where}: manifest 'set' is not {{id: 1-64 lowercase hex digits, index, count}}: "
            "the header is damaged; run kbpack verify"
        )


def parse_header(block: bytes, where: str) -> Header:
    """Parse a user block. Raises PackError naming ``where`` (the file) and the problem."""
    if len(block) < 16 or block[:8] != F.MAGIC:
        raise NotAPackError(not_a_pack(where))
    (m_len,) = struct.unpack_from(F.LEN_FORMAT, block, 8)
    if m_len <= 0 or 16 + m_len + 8 > len(block) or m_len > F.MAX_MANIFEST_BYTES:
        raise PackError(f"{where}: manifest length {m_len} is out of range: the header is damaged")
    manifest_bytes = bytes(block[16 : 16 + m_len])
    manifest = parse_manifest(manifest_bytes, where)
    (s_len,) = struct.unpack_from(F.LEN_FORMAT, block, 16 + m_len)
    s_at = 24 + m_len
    if s_len > F.MAX_SIGNATURE_BYTES or s_at + s_len > len(block):
        raise PackError(f"{where}: signature length {s_len} is out of range: the header is damaged")
    signature = None
    if s_len:
        try:
            signature = json.loads(block[s_at : s_at + s_len])
        except ValueError as e:
            raise PackError(f"{where}: signature record is not JSON: the header is damaged") from e
        if not isinstance(signature, dict):
            raise PackError(f"{where}: signature record is not a JSON object")
    padding = bytes(block[s_at + s_len :])
    # one memcmp with zeros: any() over ~60 KB of padding was 0.5 ms of every open
    padding_clean = padding == bytes(len(padding))
    return Header(manifest, manifest_bytes, signature, padding_clean)


def parse_manifest(raw: bytes, where: str) -> Manifest:
    try:
        doc = json.loads(raw)
    except ValueError as e:
        raise PackError(f"{where}: manifest is not valid JSON: the header is damaged") from e
    if not isinstance(doc, dict) or doc.get("magic") != "kbpack":
        raise PackError(f"{where}: manifest lacks magic 'kbpack': the header is damaged")
    version = _int(doc, "format_version", where)
    if version > F.FORMAT_VERSION:
        raise NewerFormatError(
            f"{where}: format {version} is newer than this kbpack reads ({F.FORMAT_VERSION}). "
            "Upgrade kbpack."
        )
    if version < 1:
        raise PackError(f"{where}: manifest format_version {version} is not a kbpack version")
    if _int(doc, "userblock_size", where) != F.USERBLOCK_SIZE:
        raise PackError(f"{where}: manifest userblock_size is not {F.USERBLOCK_SIZE}")
    sha = doc.get("hdf5_sha256")
    if not isinstance(sha, str) or len(sha) != 64:
        raise PackError(f"{where}: manifest hdf5_sha256 is not a SHA-256 hex digest")
    counts = doc.get("counts")
    elements = doc.get("elements")
    if not isinstance(counts, dict) or not all(
        isinstance(k, str) and isinstance(v, int) and v >= 0 for k, v in counts.items()
    ):
        raise PackError(f"{where}: manifest counts must map names to non-negative integers")
    if not isinstance(elements, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in elements.items()
    ):
        raise PackError(f"{where}: manifest elements must map element paths to digests")
    _check_set(doc.get("set"), where)
    known = {
        "magic",
        "format_version",
        "userblock_size",
        "file_size",
        "hdf5_sha256",
        "counts",
        "elements",
        "kbpack_version",
        "created",
    }
    return Manifest(
        format_version=version,
        file_size=_int(doc, "file_size", where),
        hdf5_sha256=sha,
        counts=counts,
        elements=elements,
        kbpack_version=str(doc.get("kbpack_version", "")),
        created=str(doc.get("created", "")),
        extra={k: v for k, v in doc.items() if k not in known},
    )


def _int(doc: Mapping[str, Any], key: str, where: str) -> int:
    v = doc.get(key)
    if not isinstance(v, int) or isinstance(v, bool):
        raise PackError(f"{where}: manifest {key} must be an integer")
    return v


def count_key_problems(counts: Mapping[str, Any]) -> str | None:
    """What is wrong with the manifest's count names, in words, or None (verify and the reader
    both ask: a damaged key must be one line, never a KeyError deep in a command)."""
    known = set(F.COUNT_KEYS) | set(F.OPTIONAL_COUNT_KEYS)
    missing, unknown = set(F.COUNT_KEYS) - set(counts), set(counts) - known
    if not (missing or unknown):
        return None
    wrong = [f"lack {', '.join(sorted(missing))}"] if missing else []
    wrong += [f"name unknown {', '.join(sorted(unknown))}"] if unknown else []
    return f"counts {'; '.join(wrong)}"


_NOT_REGULAR = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def refuse_non_regular(path: Path, mode: int) -> None:
    """A pack is a regular file: reading a FIFO or a device would block or never end."""
    if stat.S_ISREG(mode):
        return
    kind = next((name for test, name in _NOT_REGULAR if test(mode)), "not a regular file")
    raise UsageError(f"{path}: is {kind}, not a regular file, so not a pack; give a .kbpack file")


def read_header(path: Path, where: str | os.PathLike[str] | None = None) -> Header:
    """Read and parse the user block of ``path`` without touching HDF5; messages name
    ``where`` (default: ``path``; a reader opening a held file by its /proc/self/fd path names
    the pack instead)."""
    if where is not None:
        try:
            return read_header(path)
        except (PackError, UsageError) as e:  # (each keeps its type: its exit code)
            raise type(e)(str(e).replace(str(path), str(where))) from e
    try:
        # O_NONBLOCK: opening a FIFO with no writer would otherwise block right here
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError as e:
        raise NotAPackError(f"{path}: no such file; check the path") from e
    except OSError as e:  # unreadable input: a usage error, like a missing one
        raise InputError(
            f"{path}: cannot read: {e.strerror or e}; check the path and its permissions"
        ) from e
    with os.fdopen(fd, "rb") as f:
        refuse_non_regular(path, os.fstat(fd).st_mode)
        try:
            block = f.read(F.USERBLOCK_SIZE)
        except OSError as e:
            raise InputError(
                f"{path}: cannot read: {e.strerror or e}; check the path and its permissions"
            ) from e
    if len(block) < F.USERBLOCK_SIZE:
        if block[:8] != F.MAGIC:
            raise NotAPackError(not_a_pack(str(path)))
        raise PackError(f"{path}: truncated: {len(block)} bytes, shorter than the kbpack header")
    return parse_header(block, str(path))


def encode_header(manifest_bytes: bytes, signature: Mapping[str, Any] | None = None) -> bytes:
    if len(manifest_bytes) > F.MAX_MANIFEST_BYTES:
        raise PackError(
            f"manifest is {len(manifest_bytes)} bytes, over the {F.MAX_MANIFEST_BYTES} the header holds"
        )
    sig = canonical_json(signature) if signature else b""
    if len(sig) > F.MAX_SIGNATURE_BYTES:
        raise PackError("signature record is too large for the header")
    body = (
        F.MAGIC
        + struct.pack(F.LEN_FORMAT, len(manifest_bytes))
        + manifest_bytes
        + struct.pack(F.LEN_FORMAT, len(sig))
        + sig
    )
    return body + b"\0" * (F.USERBLOCK_SIZE - len(body))


def write_header(path: Path, header: bytes) -> None:
    """Overwrite the user block in place (used by the writer before its atomic rename, and by sign)."""
    assert len(header) == F.USERBLOCK_SIZE
    with open(path, "r+b") as f:
        f.write(header)
        f.flush()


def hash_hdf5_bytes(path: Path) -> tuple[int, str]:
    """(file size, SHA-256 of every byte after the user block)."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb", buffering=0) as f:
        f.seek(F.USERBLOCK_SIZE)
        size = F.USERBLOCK_SIZE
        buf = bytearray(READ_BLOCK)
        view = memoryview(buf)
        while n := f.readinto(buf):
            h.update(view[:n])
            size += n
    return size, h.hexdigest()
