"""Odd and hostile inputs (fixtures/hostile): failures are records with a one-line reason,
odd encodings are decoded, and offsets stay exact code points of the canonical text."""

from __future__ import annotations

import hashlib
import os
import unicodedata
from pathlib import Path

import pytest

from kbpack.extract import Limits, extract_file
from kbpack.text.document import Document
from tests.paths import REPO_ROOT

ROOT = REPO_ROOT / "fixtures"
HOSTILE = ROOT / "hostile"
DOCS = ROOT / "docs"


def extract(name: str, limits: Limits | None = None, folder: Path = HOSTILE) -> Document:
    return extract_file(folder / name, name, limits or Limits())


def assert_failed(doc: Document, stage: str, reason: str) -> None:
    assert (doc.status, doc.stage, doc.reason) == ("failed", stage, reason)
    assert "\n" not in doc.reason
    assert doc.text == "" and doc.pages == []
    assert len(doc.sections) == 1 and doc.sections[0].end == 0
    path = Path(doc.source_path)
    assert doc.source_size == path.stat().st_size
    assert doc.source_sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize(
    ("name", "stage", "reason"),
    [
        ("truncated.pdf", "extract",
         "unreadable PDF (corrupt or truncated?): PDFium: Data format error"),
        ("encrypted.pdf", "extract",
         "encrypted PDF: a password is needed to read it; decrypt it first "
         "(e.g. qpdf --decrypt) and build again"),
        ("not-a-pdf.pdf", "detect", "not a PDF (no %PDF- header); check the file's type"),
        ("scanned.pdf", "extract",
         "no extractable text on 3 of 3 pages (scanned? kbpack does no OCR)"),
        ("vector-only.pdf", "extract",
         "no extractable text on 3 of 3 pages (scanned? kbpack does no OCR)"),
        ("zip-bomb.docx", "limits", "compression ratio 617:1 is over the 200:1 limit (zip bomb?)"),
        ("huge-member.docx", "limits",
         "would decompress to 3.0 GiB (largest member word/document.xml: 3.0 GiB), over the "
         "512.0 MiB limit (zip bomb?); raise the decompressed-size limit if the file is genuine"),
        ("not-a-docx.docx", "detect", "not a DOCX (not a zip archive); check the file's type"),
        ("empty.txt", "read", "empty file"),
        ("whitespace.md", "extract", "no text: the file holds only whitespace"),
    ],
)  # fmt: skip
def test_bad_documents_are_failed_records(name: str, stage: str, reason: str) -> None:
    assert_failed(extract(name), stage, reason)


def test_pdf_with_an_owner_password_only_is_read() -> None:
    doc = extract("owner-only.pdf")
    assert doc.status == "ok"
    assert doc.text == "Mixed document, page one.\nThis page has real text.\n\nSecond page."


def test_page_with_content_but_no_text_is_a_warning() -> None:
    doc = extract("mixed-pages.pdf")
    assert doc.status == "ok"
    assert doc.warnings == [
        "no extractable text on 1 of 4 pages (page 2) although they draw something: images or "
        "vector graphics (kbpack does no OCR)"
    ]
    first, drawing, blank, last = doc.pages
    assert (
        doc.text[first.start : first.end] == "Mixed document, page one.\nThis page has real text."
    )
    assert drawing.start == drawing.end == blank.start == blank.end == first.end
    assert doc.text[last.start : last.end] == "Page four has text again."
    assert [s.title for s in doc.sections] == [
        "mixed-pages",
        "Page 1",
        "Page 2",
        "Page 3",
        "Page 4",
    ]


def test_latin1_falls_back_to_cp1252() -> None:
    doc = extract("latin1.txt")
    assert doc.decoding == "cp1252 (fallback: not valid UTF-8)"
    assert doc.text == (
        "Café crème, naïve façade; price 5€.\nUndefined cp1252 byte: \x81 stays a C1 control."
    )


def test_utf16_with_bom() -> None:
    doc = extract("utf16-bom.txt")
    assert doc.decoding == "utf-16-le (BOM)"
    assert doc.text == "Title in UTF-16\n===============\n\nGrüße aus Köln 😀"
    assert doc.title == "Title in UTF-16"


def test_crlf_and_lone_cr_become_newlines_with_exact_offsets() -> None:
    doc = extract("crlf.md")
    assert "\r" not in doc.text
    assert doc.text.endswith("Old Mac line\nend.")
    second = doc.sections[2]
    assert second.title == "Second section"
    assert doc.text[second.start : second.end] == "## Second section\n\nOld Mac line\nend."


def test_nul_bytes_removed_and_counted() -> None:
    doc = extract("nul-bytes.txt")
    assert doc.replaced == 3
    assert "user=alice action=login\nuser=bob action=logout" in doc.text
    assert "\x00" not in doc.text


def test_emoji_and_nfd_offsets_are_code_points_of_nfc_text() -> None:
    doc = extract("emoji-nfd.md")
    text = doc.text
    assert unicodedata.is_normalized("NFC", text)
    assert doc.title == "Café and naïve (NFD)" and "Café" in text  # composed: 4 code points
    second = doc.sections[2]
    assert text[second.start :].startswith("## Second é\u0301 heading")
    # Offsets count code points: the astral emoji and ZWJ sequences are not UTF-16 pairs.
    rocket = text.index("🚀")
    assert text[rocket : rocket + 2] == "🚀."
    assert text[second.start : second.end].endswith("The end 🚀.")
    family = "👨\u200d👩\u200d👧"
    assert text[text.index(family) : text.index(family) + 5] == family


def test_limits_file_size_pages_and_zip_members() -> None:
    pdf = "reportlab/reportlab-userguide-ch1.pdf"
    too_big = extract(pdf, Limits(max_file_bytes=1000), folder=DOCS)
    assert_failed(
        too_big, "limits", "file is 155.0 KiB, over the 1000 bytes limit; "
        "raise --max-file-mb to include it",
    )  # fmt: skip
    too_long = extract(pdf, Limits(max_pages=5), folder=DOCS)
    assert_failed(
        too_long, "limits", "PDF has 6 pages, over the 5-page limit; pass --max-pages 6 to "
        "include it",
    )  # fmt: skip
    crowded = extract("sqlite/sqlite-isolation.docx", Limits(max_zip_members=5), folder=DOCS)
    assert crowded.status == "failed" and crowded.stage == "limits"
    assert crowded.reason.endswith("members, over the limit of 5 (zip bomb?)")


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.txt"
    os.mkfifo(fifo)
    doc = extract_file(fifo, "pipe.txt")
    assert (doc.status, doc.stage, doc.reason) == ("failed", "read", "not a regular file")


def test_unsupported_type_is_skipped_with_its_identity(tmp_path: Path) -> None:
    path = tmp_path / "data.xyz"
    path.write_bytes(b"\x89binary")
    doc = extract_file(path, "data.xyz")
    assert (doc.status, doc.reason) == ("skipped", "unsupported type .xyz")
    assert doc.source_sha256 == hashlib.sha256(b"\x89binary").hexdigest()


def test_binary_content_in_a_text_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "image.md"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(500) + b"IEND\xaeB`\x82")
    doc = extract_file(path, "image.md")
    assert (doc.status, doc.stage) == ("failed", "detect")
    assert doc.reason.startswith("binary content (")
