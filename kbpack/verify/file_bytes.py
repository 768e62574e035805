"""Verify step 1, **bytes**: the user block parses, its padding is zero, the file has the
manifest's exact size and the SHA-256 of every HDF5 byte matches. HDF5 parses nothing here."""

from __future__ import annotations

import os
from pathlib import Path

from kbpack.errors import NewerFormatError, PackError, UsageError
from kbpack.pack import format as F
from kbpack.pack.manifest import Header, count_key_problems, hash_hdf5_bytes, parse_header
from kbpack.pack.structure import Finding
from kbpack.verify.report import HEADER, VerifyReport


def read_user_block(path: Path, report: VerifyReport) -> tuple[Header | None, int]:
    """Step 1a: the user block parses (magic, manifest, signature record, zero padding)."""
    try:
        with open(path, "rb") as f:
            block = f.read(F.USERBLOCK_SIZE)
        actual = os.stat(path).st_size
    except OSError as e:
        raise UsageError(f"{path}: cannot read: {e.strerror or e}") from e
    report.stats["file_size"] = actual
    if block[:8] != F.MAGIC:
        report.add("bytes", [Finding("not-a-pack", HEADER, "no kbpack magic at byte 0")])
        return None, actual
    if len(block) < F.USERBLOCK_SIZE:
        detail = f"{actual} bytes, shorter than the {F.USERBLOCK_SIZE}-byte kbpack header"
        report.add("bytes", [Finding("size-mismatch", HEADER, f"truncated: {detail}")])
        return None, actual
    try:
        header = parse_header(block, str(path))
    except NewerFormatError as e:
        report.add("bytes", [Finding("newer-format", HEADER, _after_where(e, path))])
        return None, actual
    except PackError as e:
        report.add("bytes", [Finding("header-damaged", HEADER, _after_where(e, path))])
        return None, actual
    return header, actual


def check_bytes(path: Path, header: Header, actual: int, report: VerifyReport) -> None:
    """Step 1b: counts are well-formed, the size is exact, the SHA-256 of the bytes matches."""
    findings: list[Finding] = []
    m = header.manifest
    if not header.padding_clean:
        findings.append(
            Finding("header-damaged", HEADER, "bytes after the signature record are not zero")
        )
    problem = count_key_problems(m.counts)
    if problem:
        findings.append(Finding("manifest-invalid", HEADER, problem))
    if actual != m.file_size:
        what = "truncated" if actual < m.file_size else "bytes appended"
        findings.append(
            Finding(
                "size-mismatch",
                HEADER,
                f"{what}: {actual} bytes, the manifest says {m.file_size}; copy the pack again",
            )
        )
        summary = "size differs from the manifest; SHA-256 not computed"
    else:
        size, sha = hash_hdf5_bytes(path)
        report.stats["bytes_hashed"] = size - F.USERBLOCK_SIZE
        if size != m.file_size or sha != m.hdf5_sha256:
            findings.append(
                Finding(
                    "hash-mismatch",
                    HEADER,
                    f"SHA-256 of the HDF5 bytes is {sha[:16]}…, the manifest says "
                    f"{m.hdf5_sha256[:16]}…: the pack is damaged; copy it again",
                )
            )
        summary = f"{actual} bytes, SHA-256 {sha[:16]}… matches the manifest"
    report.add("bytes", findings, summary if not findings else "")


def _after_where(e: Exception, path: Path) -> str:
    msg = str(e)
    prefix = f"{path}: "
    return msg[len(prefix) :] if msg.startswith(prefix) else msg
