"""PDF with pypdf: one text block per physical page, a page map, and sections.

* Canonical text: each page's extracted text (pypdf's plain mode, content-stream order),
  canonicalised; pages are separated by a blank line. An empty page gets an empty range at
  the position where its text would have been, so the page map always lists every page.
* Sections: with an outline (bookmarks), each entry is a section at its nesting depth (1..9)
  starting where its title first appears on its destination page, else at that page's start;
  entries whose destination cannot be resolved are left out (and counted in a warning).
  Without an outline, each page is a level-1 section titled ``Page N``.
* Failures: not a PDF (no ``%PDF-`` in the first KiB), encrypted with a password, unreadable
  (corrupt, truncated), more pages than the limit, or no text on any page (scanned).
  A page that has content but yields no text while other pages do is a warning, and so is
  every limit pypdf reports while decompressing.

Title: the metadata ``/Title`` unless it is blank or a placeholder (``untitled``, a file name,
``Microsoft Word - x.docx``), else the file name stem.
"""

from __future__ import annotations

import logging
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from io import BytesIO
from typing import Any

from kbpack.document import Document, Page
from kbpack.errors import ExtractionError
from kbpack.extract.limits import Limits
from kbpack.extract.structure import Heading, TextBuilder, build_sections
from kbpack.text import canonicalize, one_line

MAX_WARNINGS = 10
_PLACEHOLDER_TITLE = re.compile(
    r"^(untitled( document)?|microsoft (word|powerpoint|excel) - .*|.*\.(pdf|docx?|odt|rtf|txt|tex|dvi|ps|indd|pptx?|xlsx?))$",
    re.I,
)


class _Collect(logging.Handler):
    """Collects what pypdf logs (it reports recoverable damage and limits only this way)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = " ".join(record.getMessage().split())
        if message not in self.messages:
            self.messages.append(message)


@contextmanager
def _pypdf_messages() -> Iterator[_Collect]:
    logger = logging.getLogger("pypdf")
    handler = _Collect()
    logger.addHandler(handler)
    propagate = logger.propagate
    logger.propagate = False  # library code never prints: messages go on the document
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield handler
        for warning in caught:
            handler.messages.append(" ".join(str(warning.message).split()))
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


def _has_content(page: Any) -> bool:
    """True when the page has a non-empty content stream (something is drawn on it)."""
    try:
        contents = page.get_contents()
        return contents is not None and len(contents.get_data()) > 0
    except Exception:  # a stream pypdf cannot decode is still content
        return "/Contents" in page


def _metadata_title(reader: Any) -> str | None:
    try:
        raw = reader.metadata.title if reader.metadata else None
    except Exception:  # broken metadata must not fail the document
        return None
    title = one_line(str(raw)) if raw else ""
    if not title or _PLACEHOLDER_TITLE.match(title):
        return None
    return title


def _outline(reader: Any) -> tuple[list[tuple[int, str, int]], int]:
    """Flattened outline: (depth 1.., title, 0-based page index), and the count left out."""
    entries: list[tuple[int, str, int]] = []
    dropped = 0

    def walk(items: list[Any], depth: int) -> None:
        nonlocal dropped
        for item in items:
            if isinstance(item, list):
                walk(item, depth + 1)
                continue
            try:
                page = reader.get_destination_page_number(item)
                title = one_line(str(item.title or ""))
            except Exception:
                page, title = None, ""
            if page is None or page < 0 or not title:
                dropped += 1
            else:
                entries.append((depth, title, page))

    try:
        walk(reader.outline, 1)
    except Exception:  # a broken outline tree: fall back to page sections
        return [], 0
    return entries, dropped


def _decrypt_without_password(reader: Any) -> int:
    """Try the empty user password (owner-password-only PDFs open that way); 0 = not."""
    try:
        return int(reader.decrypt(""))
    except Exception as e:  # an algorithm pypdf cannot handle
        raise ExtractionError(f"encrypted PDF that pypdf cannot decrypt: {e}", "extract") from e


def _title_position(text: str, title: str, start: int, end: int) -> int | None:
    """Where ``title`` first appears in ``text[start:end]``, whitespace- and case-insensitive."""
    words = title.split()
    if not words:
        return None
    pattern = re.compile(r"\s+".join(re.escape(w) for w in words), re.I)
    found = pattern.search(text, start, end)
    return found.start() if found else None


def extract_pdf(data: bytes, doc: Document, limits: Limits) -> Document:
    """Fill ``doc`` from the bytes of a PDF, or raise ExtractionError."""
    if b"%PDF-" not in data[:1024]:
        raise ExtractionError("not a PDF (no %PDF- header); check the file's type", "detect")
    from pypdf import PdfReader

    with _pypdf_messages() as log:
        try:
            reader = PdfReader(BytesIO(data), strict=False)
            if reader.is_encrypted and _decrypt_without_password(reader) == 0:
                raise ExtractionError(
                    "encrypted PDF: a password is needed to read it; decrypt it first "
                    "(e.g. qpdf --decrypt) and build again",
                    "extract",
                )
            count = len(reader.pages)
        except ExtractionError:
            raise
        except Exception as e:
            raise ExtractionError(f"unreadable PDF (corrupt or truncated?): {e}", "extract") from e
        if count == 0:
            raise ExtractionError("PDF has no pages", "extract")
        if count > limits.max_pages:
            raise ExtractionError(
                f"PDF has {count} pages, over the {limits.max_pages}-page limit; "
                f"pass --max-pages {count} to include it",
                "limits",
            )
        builder = TextBuilder()
        pages: list[Page] = []
        blank_with_content: list[int] = []
        failed_pages: list[str] = []
        for number, page in enumerate(reader.pages, start=1):
            try:
                raw = page.extract_text() or ""
            except Exception as e:
                failed_pages.append(f"page {number}: text extraction failed ({e})")
                raw = ""
            span = builder.add(raw)
            if span is None:
                pages.append(Page(number, len(builder), len(builder)))
                if _has_content(page):
                    blank_with_content.append(number)
            else:
                pages.append(Page(number, span[0], span[1]))
        text = builder.text()
        if not text.strip():
            raise ExtractionError(
                f"no extractable text on {count} of {count} pages (scanned? kbpack does no OCR)",
                "extract",
            )
        outline, dropped = _outline(reader)
        title = _metadata_title(reader)
    headings = _outline_headings(text, pages, outline) if outline else _page_headings(pages)
    doc_warnings = list(failed_pages)
    if blank_with_content:
        doc_warnings.append(
            f"no extractable text on {len(blank_with_content)} of {count} pages "
            f"({_page_list(blank_with_content)}) although they have content: images, or "
            "streams pypdf could not decompress"
        )
    if dropped:
        doc_warnings.append(f"{dropped} outline entries point nowhere and were left out")
    doc_warnings += [f"pypdf: {m}" for m in log.messages]
    title = title or doc.title
    return replace(
        doc,
        title=title,
        text=text,
        pages=pages,
        sections=build_sections(len(text), title, headings),
        replaced=builder.replaced,
        decoding="pdf",
        warnings=_cap(doc_warnings),
    )


def _page_headings(pages: list[Page]) -> list[Heading]:
    return [Heading(1, f"Page {page.number}", page.start) for page in pages]


def _outline_headings(
    text: str, pages: list[Page], outline: list[tuple[int, str, int]]
) -> list[Heading]:
    headings: list[Heading] = []
    floor: dict[int, int] = {}  # page index -> where the previous heading on it starts
    for depth, title, index in outline:
        if index >= len(pages):
            continue
        page = pages[index]
        start_from = max(page.start, floor.get(index, page.start))
        found = _title_position(text, title, start_from, page.end)
        start = found if found is not None else start_from
        floor[index] = start
        headings.append(Heading(depth, canonicalize(title)[0], start))
    return headings


def _page_list(numbers: list[int]) -> str:
    shown = ", ".join(str(n) for n in numbers[:10])
    more = f" and {len(numbers) - 10} more" if len(numbers) > 10 else ""
    return f"page {shown}{more}" if len(numbers) == 1 else f"pages {shown}{more}"


def _cap(messages: list[str]) -> list[str]:
    if len(messages) <= MAX_WARNINGS:
        return messages
    rest = len(messages) - MAX_WARNINGS + 1
    return [*messages[: MAX_WARNINGS - 1], f"... and {rest} more warnings"]
