"""A DOCX whose zip directory lies: declared sizes small, the member's deflate stream inflating
to a gigabyte. The worker must stay within its memory limit and fail the document with a
reason that says what happened."""

from __future__ import annotations

import struct
import zipfile
import zlib
from io import BytesIO
from pathlib import Path

from kbpack.extract import Candidate, Limits, extract_all, extract_file
from tests.paths import REPO_ROOT

DOCS = REPO_ROOT / "fixtures" / "docs"
REAL = DOCS / "sqlite" / "sqlite-null-handling.docx"
INFLATED = 2**30  # what word/document.xml really inflates to
DECLARED = 4096  # what the archive says it inflates to


def _lying_docx(path: Path) -> Path:
    """The real DOCX with word/document.xml replaced by a 1 GiB stream of spaces that the
    local header and the central directory declare as 4 KiB, with the checksum of those first
    4 KiB (so a reader that stops at the declared size finds nothing wrong)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = b" " * 2**24
    stream = b"".join(packer.compress(block) for _ in range(INFLATED // len(block)))
    stream += packer.flush()
    crc = zlib.crc32(b" " * DECLARED)
    out = BytesIO()
    with zipfile.ZipFile(REAL) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            if info.filename != "word/document.xml":
                dst.writestr(info, src.read(info))
        marker = b"\x00" * len(stream)  # placeholder of the right compressed size
        info = zipfile.ZipInfo("word/document.xml")
        info.compress_type = zipfile.ZIP_STORED
        dst.writestr(info, marker)
    data = bytearray(out.getvalue())
    # Patch the member's local header and central directory entry: method deflate, the
    # lying CRC and uncompressed size; the stored placeholder becomes the real stream.
    name = b"word/document.xml"
    local = data.index(b"PK\x03\x04", data.index(name) - 30)
    central = data.index(b"PK\x01\x02", local)
    central = data.index(name, central) - 46
    for at, method_at, crc_at, usize_at in ((local, 8, 14, 22), (central, 10, 16, 24)):
        struct.pack_into("<H", data, at + method_at, 8)
        struct.pack_into("<I", data, at + crc_at, crc)
        struct.pack_into("<I", data, at + usize_at, DECLARED)
    body = local + 30 + len(name) + struct.unpack_from("<H", data, local + 28)[0]
    data[body : body + len(stream)] = stream
    path.write_bytes(bytes(data))
    return path


def test_a_lying_zip_is_read_in_bounded_memory(tmp_path: Path) -> None:
    lying = _lying_docx(tmp_path / "lying.docx")
    assert lying.stat().st_size < 3 * 2**20  # a small file...
    # ...whose member python's zipfile.read() would inflate whole (1 GiB) in one call: the
    # worker's address space is capped well under what that needs on top of the interpreter.
    limits = Limits(max_worker_memory_bytes=1536 * 2**20)
    [doc] = list(extract_all([Candidate(lying, "lying.docx", "docx")], limits))
    # Before: "unreadable DOCX: MemoryError: Unable to allocate output buffer."
    assert (doc.status, doc.stage, doc.reason) == (
        "failed",
        "limits",
        "zip member word/document.xml inflates to over 512.0 MiB, not the 4.0 KiB the archive "
        "declares (a lying zip)",
    )


def test_a_real_docx_still_reads_through_the_copy() -> None:
    doc = extract_file(REAL, REAL.name)
    assert doc.status == "ok" and "NULL" in doc.text


def test_a_member_with_an_empty_name_fails_the_document_in_words(tmp_path: Path) -> None:
    """Found by bench/fuzz.py (docx 7:4987): a NUL in the central directory gave a member with
    an empty name, on which zipfile's is_dir() raised a bare IndexError."""
    out = BytesIO()
    with zipfile.ZipFile(REAL) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info, src.read(info))
        dst.writestr(zipfile.ZipInfo(""), b"x")
    damaged = tmp_path / "damaged.docx"
    damaged.write_bytes(out.getvalue())
    [doc] = list(extract_all([Candidate(damaged, "damaged.docx", "docx")], Limits()))
    assert (doc.status, doc.stage) == ("failed", "extract")
    assert "empty name" in doc.reason and "\n" not in doc.reason
