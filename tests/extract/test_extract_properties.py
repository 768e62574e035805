"""Properties over generated documents of every structured format: the headings written are
the sections found, sections nest inside the document and their parent, every section starts
at its own heading, and a PDF's page map covers the canonical text in order."""

from __future__ import annotations

import html
import importlib.util
import io
import string
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kbpack.extract import extract_file
from kbpack.text.document import Document
from tests.paths import REPO_ROOT

_spec = importlib.util.spec_from_file_location(
    "make_hostile", REPO_ROOT / "fixtures" / "hostile" / "make.py"
)
assert _spec is not None and _spec.loader is not None
make_hostile = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_hostile)

SETTINGS = settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
words = st.lists(
    st.text(string.ascii_letters + string.digits, min_size=1, max_size=8), min_size=1, max_size=6
).map(" ".join)


def check_tree(doc: Document) -> None:
    assert doc.status == "ok", doc.reason
    root = doc.sections[0]
    assert (root.level, root.start, root.end, root.parent) == (0, 0, len(doc.text), -1)
    for i, section in enumerate(doc.sections[1:], start=1):
        parent = doc.sections[section.parent]
        assert 0 <= section.parent < i and parent.level < section.level
        assert parent.start <= section.start <= section.end <= parent.end
        assert doc.sections[i - 1].start <= section.start


def write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


# -- PDF: page map ---------------------------------------------------------------------------
pages = st.lists(st.one_of(st.none(), st.lists(words, min_size=1, max_size=4)), min_size=1,
                 max_size=6)  # fmt: skip


@SETTINGS
@given(pages)
def test_pdf_page_map_covers_the_text_in_order(tmp_path: Path, content: list) -> None:  # type: ignore[type-arg]
    # Each line names its page and starts and ends with a letter, so no line is furniture (a
    # page number, a line repeated at the top of pages, a number that follows the page's).
    content = [
        None if lines is None else [f"{string.ascii_lowercase[n]}x {line} z" for line in lines]
        for n, lines in enumerate(content)
    ]
    streams = [None if lines is None else make_hostile.text_stream(*lines) for lines in content]
    doc = extract_file(write(tmp_path, "p.pdf", make_hostile.minimal_pdf(streams)), "p.pdf")
    if all(lines is None for lines in content):
        assert doc.reason == (
            f"no extractable text on {len(content)} of {len(content)} pages "
            "(scanned? kbpack does no OCR)"
        )
        return
    check_tree(doc)
    assert [p.number for p in doc.pages] == list(range(1, len(content) + 1))
    position = 0
    for page, lines in zip(doc.pages, content, strict=True):
        assert page.start >= position  # in order, no overlap
        expected = "" if lines is None else "\n".join(lines)
        assert doc.text[page.start : page.end] == expected
        position = page.end
    filled = [p for p in doc.pages if p.end > p.start]
    assert "\n\n".join(doc.text[p.start : p.end] for p in filled) == doc.text
    assert [s.title for s in doc.sections[1:]] == [f"Page {n}" for n in range(1, len(content) + 1)]


# -- Markdown --------------------------------------------------------------------------------
md_block = st.one_of(
    st.tuples(st.just("atx"), st.integers(1, 6), words),
    st.tuples(st.just("setext"), st.integers(1, 2), words),
    st.tuples(st.just("para"), st.just(0), words),
    st.tuples(st.just("fence"), st.integers(1, 6), words),  # a '#' line inside code
)


@SETTINGS
@given(st.lists(md_block, min_size=1, max_size=12))
def test_markdown_headings_are_sections(tmp_path: Path, blocks: list[tuple[str, int, str]]) -> None:
    parts, expected = [], []
    for kind, level, text in blocks:
        if kind == "atx":
            parts.append(f"{'#' * level} {text}")
            expected.append((level, text, f"{'#' * level} {text}"))
        elif kind == "setext":
            parts.append(f"{text}\n{('=' if level == 1 else '-') * 3}")
            expected.append((level, text, f"{text}\n"))
        elif kind == "para":
            parts.append(text)
        else:
            parts.append(f"```sh\n{'#' * level} {text}\n```")
    source = "\n\n".join(parts) + "\n"
    doc = extract_file(write(tmp_path, "d.md", source.encode()), "d.md")
    check_tree(doc)
    assert doc.text == source.rstrip("\n")  # Markdown keeps its own characters
    found = doc.sections[1:]
    assert [(s.level, s.title) for s in found] == [(lv, t) for lv, t, _ in expected]
    for section, (_, _, prefix) in zip(found, expected, strict=True):
        assert doc.text[section.start :].startswith(prefix)


# -- HTML ------------------------------------------------------------------------------------
html_block = st.one_of(
    st.tuples(st.just("h"), st.integers(1, 6), st.lists(words, min_size=1, max_size=1)),
    st.tuples(st.just("p"), st.just(0), st.lists(words, min_size=1, max_size=1)),
    st.tuples(st.just("ul"), st.just(0), st.lists(words, min_size=1, max_size=4)),
    st.tuples(st.just("table"), st.integers(1, 3), st.lists(words, min_size=1, max_size=6)),
    st.tuples(st.just("nav"), st.just(0), st.lists(words, min_size=1, max_size=1)),
)


@SETTINGS
@given(st.lists(html_block, min_size=1, max_size=10))
def test_html_structure_survives(tmp_path: Path, blocks: list[tuple[str, int, list[str]]]) -> None:
    parts, headings, lines = ["<html><head><title>T</title><style>p{}</style></head><body>"], [], []
    for kind, n, texts in blocks:
        if kind == "h":
            parts.append(f"<h{n}>{html.escape(texts[0])}</h{n}>")
            headings.append((n, texts[0]))
            lines.append(texts[0])
        elif kind == "p":
            parts.append(f"<p>{html.escape(texts[0])}</p>")
            lines.append(texts[0])
        elif kind == "ul":
            parts.append("<ul>" + "".join(f"<li>{html.escape(t)}" for t in texts) + "</ul>")
            lines += [f"- {t}" for t in texts]
        elif kind == "table":
            rows = [texts[i : i + n] for i in range(0, len(texts), n)]
            cells = ["<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) for r in rows]
            parts.append("<table>" + "".join(cells) + "</table>")
            lines += [" | ".join(r) for r in rows]
        else:
            parts.append(f"<nav><a href='#'>NAVNOISE {html.escape(texts[0])}</a></nav>")
    parts.append("<script>var NAVNOISE = 1;</script></body></html>")
    doc = extract_file(write(tmp_path, "d.html", "\n".join(parts).encode()), "d.html")
    if not lines:
        assert doc.status == "failed"
        return
    check_tree(doc)
    assert "NAVNOISE" not in doc.text
    assert [line for line in doc.text.split("\n") if line] == lines
    assert [(s.level, s.title) for s in doc.sections[1:]] == headings
    for section in doc.sections[1:]:
        assert doc.text[section.start :].startswith(section.title)


# -- DOCX ------------------------------------------------------------------------------------
docx_block = st.one_of(
    st.tuples(st.just("heading"), st.integers(0, 9), st.lists(words, min_size=1, max_size=1)),
    st.tuples(st.just("para"), st.just(0), st.lists(words, min_size=1, max_size=1)),
    st.tuples(st.just("item"), st.just(0), st.lists(words, min_size=1, max_size=1)),
    st.tuples(st.just("table"), st.integers(1, 3), st.lists(words, min_size=1, max_size=6)),
)


@settings(max_examples=20, deadline=None)
@given(st.lists(docx_block, min_size=1, max_size=8))
def test_docx_paragraphs_tables_and_headings_in_order(
    blocks: list[tuple[str, int, list[str]]],
) -> None:
    import docx

    word = docx.Document()
    headings, lines = [], []
    for kind, n, texts in blocks:
        if kind == "heading":
            word.add_heading(texts[0], level=n)  # level 0 is the Title style
            headings.append((max(n, 1), texts[0]))
            lines.append(texts[0])
        elif kind == "para":
            word.add_paragraph(texts[0])
            lines.append(texts[0])
        elif kind == "item":
            word.add_paragraph(texts[0], style="List Bullet")
            lines.append(f"- {texts[0]}")
        else:
            rows = [texts[i : i + n] for i in range(0, len(texts), n)]
            table = word.add_table(rows=len(rows), cols=n)
            for r, row in enumerate(rows):
                for c in range(n):
                    table.cell(r, c).text = row[c] if c < len(row) else ""
            lines += [" | ".join(row + [""] * (n - len(row))).rstrip() for row in rows]
    buffer = io.BytesIO()
    word.save(buffer)
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "d.docx"
        path.write_bytes(buffer.getvalue())
        doc = extract_file(path, "d.docx")
    check_tree(doc)
    assert [line for line in doc.text.split("\n") if line] == lines
    assert [(s.level, s.title) for s in doc.sections[1:]] == headings
    for section in doc.sections[1:]:
        assert doc.text[section.start :].startswith(section.title)
