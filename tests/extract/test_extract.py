"""Extraction of the real documents in fixtures/docs: what a user would check in each."""

from __future__ import annotations

import pytest

from kbpack.extract import EXTRACTOR_VERSIONS, extract_file
from kbpack.text.canonical import is_clean
from kbpack.text.document import Document
from tests.paths import REPO_ROOT

DOCS = REPO_ROOT / "fixtures" / "docs"


def extract(relative: str) -> Document:
    doc = extract_file(DOCS / relative, relative)
    assert doc.status == "ok", doc.reason
    check_invariants(doc)
    return doc


def check_invariants(doc: Document) -> None:
    """What every extracted document promises (document.py), checked the long way."""
    text = doc.text
    assert is_clean(text)
    root = doc.sections[0]
    assert (root.level, root.start, root.end, root.parent, root.title) == (
        0, 0, len(text), -1, doc.title,
    )  # fmt: skip
    for i, section in enumerate(doc.sections[1:], start=1):
        parent = doc.sections[section.parent]
        assert 0 <= section.parent < i and parent.level < section.level <= 9
        assert parent.start <= section.start <= section.end <= parent.end
        assert doc.sections[i - 1].start <= section.start
    if doc.pages:
        assert [p.number for p in doc.pages] == list(range(1, len(doc.pages) + 1))
        rebuilt = "\n\n".join(text[p.start : p.end] for p in doc.pages if p.end > p.start)
        assert rebuilt == text  # pages cover the text, in order, separated by a blank line
    assert len(doc.source_sha256) == 64 and doc.source_size > 0
    assert doc.extractor_version == EXTRACTOR_VERSIONS[doc.kind]


def section_titles(doc: Document) -> list[str]:
    return [s.title for s in doc.sections[1:]]


def flat(text: str) -> str:
    return " ".join(text.split())


def test_pdf_with_outline_sections_start_at_their_titles() -> None:
    doc = extract("reportlab/reportlab-userguide-ch1.pdf")
    assert doc.title == "ReportLab PDF Generation User Guide"
    assert doc.extractor.startswith("pdf/pypdfium2 ")
    assert doc.media_type == "application/pdf"
    assert len(doc.pages) == 6
    titles = section_titles(doc)
    assert titles[0] == "Chapter 1 Introduction"
    assert "1.4 What is Python?" in titles and titles[-1] == "1.10 Goals of the 3.x release series"
    chapter = doc.sections[1]
    for section in doc.sections[2:]:
        assert section.level == 2 and section.parent == 1
        # Each section starts at its own heading, not merely at its page.
        assert doc.text[section.start :].startswith(section.title)
    assert chapter.level == 1 and chapter.end == len(doc.text)
    python = next(s for s in doc.sections if s.title == "1.4 What is Python?")
    assert "Python is an interpreted" in flat(doc.text[python.start : python.end])
    page_of_python = next(p for p in doc.pages if p.start <= python.start < p.end)
    assert page_of_python.number == 3  # physical page index in the excerpt, 1-based


def test_two_column_pdf_keeps_each_column_in_reading_order() -> None:
    doc = extract("latex/ltnews21.pdf")
    assert doc.title == "LATEX News"  # no metadata title: the first page's largest line
    assert len(doc.pages) == 2
    text = flat(doc.text)
    # Sentences that wrap across lines of one column come out whole, not interleaved with
    # the neighbouring column.
    assert (
        "This issue of LATEX News marks the second bug-fix release of LATEX 2ε (standard LATEX) "
        "since shifting to a new build system in 2009." in text
    )
    assert "Thus changing the kernel code would break too many existing documents." in text
    assert "fixltx2e updates" in section_titles(doc)


def test_table_heavy_pdf() -> None:
    doc = extract("reportlab/reportlab-userguide-ch7-tables.pdf")
    assert len(doc.pages) == 7
    assert section_titles(doc) == [
        "Chapter 7 Tables and TableStyles",
        "7.1 Table User Methods",
        "7.2 TableStyle",
        "7.3 TableStyle User Methods",
        "7.4 TableStyle Commands",
    ]
    commands = doc.sections[-1]
    assert "GRID" in doc.text[commands.start : commands.end]
    assert all(p.end > p.start for p in doc.pages)  # every page has text


def test_docx_headings_become_sections() -> None:
    doc = extract("sqlite/sqlite-isolation.docx")
    assert doc.extractor.startswith("docx/python-docx ")
    assert doc.title == "Isolation In SQLite"  # the core title property
    assert [(s.level, s.title) for s in doc.sections[1:]] == [
        (1, "Isolation In SQLite"),  # the Title-styled paragraph
        (2, "Isolation Between Database Connections"),
        (2, "Isolation And Concurrency"),
        (2, "No Isolation Between Operations On The Same Database Connection"),
        (2, "Summary"),
    ]
    assert all(s.parent == 1 for s in doc.sections[2:])
    assert "\n\n" in doc.text and not doc.pages


def test_docx_with_text_only_in_tables_is_not_empty() -> None:
    doc = extract("sqlite/sqlite-null-handling.docx")
    assert doc.title == "sqlite-null-handling"  # no core title, no Title style: file stem
    lines = doc.text.split("\n")
    assert " | SQLite | PostgreSQL | Oracle | Informix | DB2 | MS-SQL | OCELOT" in lines
    assert (
        "nulls are distinct in a UNIQUE column | Yes | Yes | Yes | No | (Note 4) | No | Yes"
        in lines
    )
    assert "Adding anything to null gives null" in doc.text


def test_html_drops_navigation_and_scripts_keeps_headings_lists_tables() -> None:
    doc = extract("sqlite/datatype3.html")
    assert doc.extractor == "html/kbpack" and doc.decoding == "utf-8"
    assert doc.title == "Datatypes In SQLite"  # <title>: the first h1 is numbered ("1. ...")
    for noise in ("toggle_div", "getElementById", "Search Documentation", "Purchase"):
        assert noise not in doc.text
    assert "- NULL. The value is a NULL value." in doc.text.split("\n")
    titles = section_titles(doc)
    assert titles[:3] == ["1. Datatypes In SQLite", "2. Storage Classes and Datatypes",
                          "2.1. Boolean Datatype"]  # fmt: skip
    example = next(s for s in doc.sections if s.title == "3.1.1. Affinity Name Examples")
    assert example.level == 3 and doc.sections[example.parent].level == 2
    # The table of affinity examples: one line per row, cells joined by " | ".
    table_lines = [line for line in doc.text.split("\n") if " | " in line]
    assert any(line.startswith("Example Typenames From The") for line in table_lines)
    assert any("INTEGER" in line and "1" in line for line in table_lines)


def test_markdown_keeps_its_characters() -> None:
    doc = extract("pypdf/README.md")
    source = (DOCS / "pypdf/README.md").read_text(encoding="utf-8")
    assert doc.text == source.strip("\n")  # already canonical: the text is the file
    assert doc.title == "pypdf"
    assert section_titles(doc)[:3] == ["pypdf", "Installation", "Usage"]
    q_and_a = next(s for s in doc.sections if s.title == "Q&A")
    assert q_and_a.level == 3 and doc.text[q_and_a.start :].startswith("### Q&A")


def test_restructuredtext_titles() -> None:
    doc = extract("python-docx/HISTORY.rst")
    assert doc.extractor == "txt/kbpack"
    assert doc.title == "Release History"
    assert doc.sections[1].title == "Release History" and doc.sections[1].level == 1
    release = next(s for s in doc.sections if s.title == "1.2.0 (2025-06-16)")
    assert release.level == 2 and release.parent == 1
    assert "Add support for comments" in doc.text[release.start : release.end]


@pytest.mark.parametrize(
    "relative", sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.*"))
)
def test_every_fixture_document_extracts_cleanly(relative: str) -> None:
    doc = extract(relative)
    assert doc.text.strip()
    assert doc.source_size == (DOCS / relative).stat().st_size
