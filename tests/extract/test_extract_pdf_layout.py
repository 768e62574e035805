"""PDF page furniture and paragraphs, on real PDFs written here: running heads, footers that
carry the printed page number, bare page numbers; paragraphs from line spacing and font size."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from kbpack.extract import extract_file
from kbpack.extract.pdf_layout import Line, furniture, paragraphs
from tests.paths import REPO_ROOT

_spec = importlib.util.spec_from_file_location(
    "make_hostile", REPO_ROOT / "fixtures" / "hostile" / "make.py"
)
assert _spec is not None and _spec.loader is not None
make_hostile = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_hostile)


def _text(x: int, y: int, size: int, line: str) -> bytes:
    return b"BT /F1 %d Tf %d %d Td (%s) Tj ET " % (size, x, y, line.encode("latin-1"))


def _page(head: str | None, body: list[list[str]], foot: str | None) -> bytes:
    """A page: a small running head at the top, paragraphs of 11 pt lines 13 pt apart with
    an empty line's space between paragraphs, a small footer at the bottom."""
    out = _text(72, 760, 8, head) if head else b""
    y = 700
    for paragraph in body:
        for line in paragraph:
            out += _text(72, y, 11, line)
            y -= 13
        y -= 13
    return out + (_text(300, 40, 8, foot) if foot else b"")


def test_running_heads_footers_and_page_numbers_are_dropped(tmp_path: Path) -> None:
    pages = []
    for n in range(1, 7):
        printed = n + 10  # the printed number runs ahead of the physical one (front matter)
        chapter = "Chapter 1: Basics" if n <= 3 else "Chapter 2: Widgets"
        foot = f"{chapter} {printed}" if n % 2 else f"{printed}"
        body = [
            [f"Paragraph one of page {n} starts here and", "wraps onto a second line."],
            [f"Paragraph two of page {n} is a single line."],
        ]
        pages.append(_page("The Widget Handbook, Release 2.1", body, foot))
    path = tmp_path / "handbook.pdf"
    path.write_bytes(make_hostile.minimal_pdf(pages))
    doc = extract_file(path, path.name)
    assert doc.status == "ok", doc.reason
    assert "Widget Handbook" not in doc.text and "Chapter" not in doc.text
    third = doc.pages[2]
    assert doc.text[third.start : third.end] == (
        "Paragraph one of page 3 starts here and\nwraps onto a second line.\n\n"
        "Paragraph two of page 3 is a single line."
    )
    for page in doc.pages:  # nothing is left of the footers, not even the bare numbers
        assert not doc.text[page.start : page.end].rstrip().endswith(str(page.number + 10))


def test_short_documents_keep_lines_that_merely_repeat(tmp_path: Path) -> None:
    """Two pages cannot establish a running head: a line repeated on both stays."""
    pages = [_page("Overview", [[f"Body text of page {n}."]], None) for n in (1, 2)]
    path = tmp_path / "two.pdf"
    path.write_bytes(make_hostile.minimal_pdf(pages))
    doc = extract_file(path, path.name)
    assert doc.text.count("Overview") == 2


def test_paragraphs_follow_spacing_and_font_size() -> None:
    body = [
        Line("1.2 Installing", 700, 716),  # a heading: larger type
        Line("First line of a paragraph", 680, 691),
        Line("and its second line.", 667, 678),
        Line("A new paragraph after a gap.", 641, 652),
        Line("Cell A", 628, 639),
        Line("Cell B", 628, 639),  # same row: no break
    ]
    assert paragraphs(body, usual=13.0) == [
        "1.2 Installing",
        "First line of a paragraph\nand its second line.",
        "A new paragraph after a gap.\nCell A\nCell B",
    ]
    assert paragraphs([Line("no geometry"), Line("at all")], usual=0.0) == ["no geometry\nat all"]


def test_furniture_needs_agreement_across_pages() -> None:
    pages = [[Line("Description"), Line(f"text {n}"), Line(f"{n + 4}")] for n in range(1, 9)]
    pages[2] = [Line("Usage"), Line("xiv")]  # a bare (roman) page number on a short page
    gone = furniture(pages)
    # 'Description' heads 7 of 8 pages: a running head. The trailing numbers agree on an
    # offset of -4: the printed page number.
    assert gone[0] == {0, 2} and gone[2] == {1}
