"""PDF with PDFium (pypdfium2): one text block per physical page, a page map, and sections.

Why PDFium and not pypdf: on developers-reference.pdf pypdf's text glued words together
(22 runs of 20+ letters per 1000 words, ``Alistofpackagesinneedofanewmaintainer...``, so BM25
could not find them), while PDFium places spaces from glyph positions as poppler's
``pdftotext`` does (0.32 per 1000 words for both), and reads the page ten times faster.
``bench/corpora.py`` measures it.

* Canonical text: each page's lines in PDFium's reading order, without running heads,
  footers and page numbers, grouped into paragraphs (blank line between paragraphs, ``\n``
  between lines of one): see ``pdf_layout``. Pages are separated by a blank line. An empty
  page gets an empty range at the position where its text would have been, so the page map
  always lists every page.
* Sections: with an outline (bookmarks), each entry is a section at its nesting depth (1..9)
  starting where its title first appears on its destination page, else at that page's start;
  entries whose destination cannot be resolved are left out (and counted in a warning).
  Without an outline, each page is a level-1 section titled ``Page N``.
* Failures: not a PDF (no ``%PDF-`` in the first KiB), encrypted with a password, unreadable
  (corrupt, truncated), more pages than the limit, or no text on any page (scanned).
  A page that draws something but yields no text while other pages do is a warning.

Title: the metadata ``/Title`` unless it is blank or a placeholder (``untitled``, a file name,
``Microsoft Word - x.docx``), else the first page's largest line when it stands out (1.3 times
the usual line height), else the file name stem.
"""

from __future__ import annotations

import re
import statistics
from typing import Any

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_raw

from kbpack.errors import ExtractionError
from kbpack.extract.limits import Limits
from kbpack.extract.pdf_layout import Line, furniture, paragraphs, usual_step
from kbpack.extract.structure import Heading, TextBuilder, with_text
from kbpack.text.canonical import canonicalize, one_line
from kbpack.text.document import Document, Page

MAX_WARNINGS = 10
MAX_OUTLINE_DEPTH = 9
_PLACEHOLDER_TITLE = re.compile(
    r"^(untitled( document)?|microsoft (word|powerpoint|excel) - .*|.*\.(pdf|docx?|odt|rtf|txt|tex|dvi|ps|indd|pptx?|xlsx?))$",
    re.I,
)
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
# PDFium joins a word the typesetter hyphenated at a line end and marks where the hyphen
# was with U+FFFE: removing the mark gives the word whole ("man-agers" -> "managers").
_SOFT_HYPHEN = "\ufffe"


def _metadata_title(pdf: Any) -> str | None:
    try:
        raw = pdf.get_metadata_dict().get("Title")
    except Exception:  # broken metadata must not fail the document
        return None
    title = one_line(str(raw)) if raw else ""
    if not title or _PLACEHOLDER_TITLE.match(title):
        return None
    return title


def _outline(pdf: Any, count: int) -> tuple[list[tuple[int, str, int]], int]:
    """Flattened outline: (depth 1.., title, 0-based page index), and the count left out."""
    entries: list[tuple[int, str, int]] = []
    dropped = 0
    try:
        for item in pdf.get_toc(max_depth=MAX_OUTLINE_DEPTH):  # cycles are cut by pypdfium2
            dest = item.get_dest()
            index = dest.get_index() if dest is not None else None
            title = one_line(item.get_title() or "")
            if index is None or not 0 <= index < count or not title:
                dropped += 1
            else:
                entries.append((item.level + 1, title, index))
    except Exception:  # a broken outline tree: fall back to page sections
        return [], 0
    return entries, dropped


def _title_position(text: str, title: str, start: int, end: int) -> int | None:
    """Where ``title`` first appears in ``text[start:end]``, whitespace- and case-insensitive."""
    words = title.split()
    if not words:
        return None
    pattern = re.compile(r"\s+".join(re.escape(w) for w in words), re.I)
    found = pattern.search(text, start, end)
    return found.start() if found else None


def _page_lines(page: Any) -> tuple[list[Line], bool]:
    """The page's non-blank lines with their geometry, and whether it draws anything."""
    textpage = page.get_textpage()
    try:
        n = textpage.count_chars()
        text = textpage.get_text_range(0, n) if n > 0 else ""
        # Geometry needs text index == character index (true unless PDFium merged characters).
        exact = len(text) == n
        lines: list[Line] = []
        at = 0
        for piece in _LINE_BREAK.split(text):
            begin, at = at, at + len(piece)
            at += 2 if text.startswith("\r\n", at) else 1
            if not piece.strip():
                continue
            words = piece.replace(_SOFT_HYPHEN, "")
            if not exact:
                lines.append(Line(words))
                continue
            # the line's height and baseline: medians over up to 5 of its characters, so
            # one inline code span or symbol does not make it look like a heading
            inked = [begin + k for k, ch in enumerate(piece) if not ch.isspace()]
            picks = {inked[round(j * (len(inked) - 1) / 4)] for j in range(5)}
            boxes = [textpage.get_charbox(i, loose=True) for i in sorted(picks)]
            bottom = statistics.median(b[1] for b in boxes)
            top = statistics.median(b[3] for b in boxes)
            lines.append(Line(words, bottom, top) if top > bottom else Line(words))
    finally:
        textpage.close()
    return lines, pdfium_raw.FPDFPage_CountObjects(page) > 0


def _open(data: bytes) -> Any:
    try:
        return pdfium.PdfDocument(data)
    except pdfium.PdfiumError as e:
        if "password" in str(e).lower():
            raise ExtractionError(
                "encrypted PDF: a password is needed to read it; decrypt it first "
                "(e.g. qpdf --decrypt) and build again",
                "extract",
            ) from e
        detail = str(e).removeprefix("Failed to load document ").strip("().")
        raise ExtractionError(f"unreadable PDF (corrupt or truncated?): {detail}", "extract") from e


def extract_pdf(data: bytes, doc: Document, limits: Limits) -> Document:
    """Fill ``doc`` from the bytes of a PDF, or raise ExtractionError."""
    if b"%PDF-" not in data[:1024]:
        raise ExtractionError("not a PDF (no %PDF- header); check the file's type", "detect")
    pdf = _open(data)
    try:
        count = len(pdf)
        if count == 0:
            raise ExtractionError("PDF has no pages", "extract")
        if count > limits.max_pages:
            raise ExtractionError(
                f"PDF has {count} pages, over the {limits.max_pages}-page limit; "
                f"pass --max-pages {count} to include it",
                "limits",
            )
        page_lines: list[list[Line]] = []
        drawn: list[bool] = []
        failed_pages: list[str] = []
        for index in range(count):
            try:
                page = pdf[index]
                try:
                    lines, draws = _page_lines(page)
                finally:
                    page.close()
            except Exception as e:  # one damaged page is that page's loss, not the document's
                failed_pages.append(f"page {index + 1}: text extraction failed ({e})")
                lines, draws = [], False
            page_lines.append(lines)
            drawn.append(draws)
        outline, dropped = _outline(pdf, count)
        title = _metadata_title(pdf)
    finally:
        pdf.close()
    builder = TextBuilder()
    pages: list[Page] = []
    blank_with_content: list[int] = []
    kept_lines = [
        [line for i, line in enumerate(lines) if i not in gone]
        for lines, gone in zip(page_lines, furniture(page_lines), strict=True)
    ]
    step = usual_step(kept_lines)
    for number, (lines, kept) in enumerate(zip(page_lines, kept_lines, strict=True), 1):
        span = builder.add("\n\n".join(paragraphs(kept, step)))
        if span is None:
            pages.append(Page(number, len(builder), len(builder)))
            if drawn[number - 1] and not lines:
                blank_with_content.append(number)
        else:
            pages.append(Page(number, span[0], span[1]))
    text = builder.text()
    if not text.strip():
        raise ExtractionError(
            f"no extractable text on {count} of {count} pages (scanned? kbpack does no OCR)",
            "extract",
        )
    headings = _outline_headings(text, pages, outline) if outline else _page_headings(pages)
    doc_warnings = list(failed_pages)
    if blank_with_content:
        doc_warnings.append(
            f"no extractable text on {len(blank_with_content)} of {count} pages "
            f"({_page_list(blank_with_content)}) although they draw something: images or "
            "vector graphics (kbpack does no OCR)"
        )
    if dropped:
        doc_warnings.append(f"{dropped} outline entries point nowhere and were left out")
    title = title or _display_title(page_lines[0]) or doc.title
    return with_text(
        doc,
        text,
        title,
        headings,
        pages=pages,
        replaced=builder.replaced,
        decoding="pdf",
        warnings=_cap(doc_warnings),
    )


# What may precede an outline title on its line: its number ("2.1", "3.2.", "A.1", "B").
_NUMBER_PREFIX = re.compile(r"(?:\d+|[A-Z])(?:\.\d+)*\.?[ \t]+$")


def _with_number(text: str, found: int, floor: int) -> int:
    """``found`` moved back over the heading's own number on the same line ("2.1 Getting
    started" is titled "Getting started" in the outline), so the number is not left behind as
    a chunk of the parent section."""
    line_start = max(text.rfind("\n", 0, found) + 1, floor)
    before = text[line_start:found]
    return line_start if before and _NUMBER_PREFIX.fullmatch(before) else found


def _display_title(lines: list[Line]) -> str | None:
    """The first page's largest line, when it stands out (at least 1.3 times the page's usual
    line height): the title as printed, for PDFs whose metadata has none."""
    sized = [line for line in lines if line.size > 0]
    if len(sized) < 2:
        return None
    usual = statistics.median(line.size for line in sized)
    biggest = max(sized, key=lambda line: line.size)
    title = one_line(biggest.text)
    return title if biggest.size >= 1.3 * usual and 0 < len(title) <= 200 else None


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
        start = _with_number(text, found, start_from) if found is not None else start_from
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
