"""The reader shows a manual as one reads it (issue 33): the search page marks what the question
asked for, not every word sharing a part with it; Markdown code shows as code; a PDF's hard line
breaks do not chop its paragraphs. The canonical text and its offsets are unchanged."""

from __future__ import annotations

import pytest

pytest.importorskip("starlette")

from kbpack.serve.library import Document
from kbpack.serve.web import content_terms, highlight, render_text


def marked(text: str, query: str) -> list[str]:
    html = str(highlight(text, content_terms(query)))
    return [part.split("</mark>")[0] for part in html.split("<mark>")[1:]]


def test_function_words_are_not_marked() -> None:
    assert marked("Open the file with the gzip module.", "open the file with gzip") == [
        "Open",
        "file",
        "gzip",
    ]


def test_an_identifier_is_marked_whole_or_not_at_all() -> None:
    text = "Call gzip.open or catch gzip.BadGzipFile; plain gzip works too."
    assert marked(text, "gzip") == ["gzip"]
    assert marked(text, "gzip.BadGzipFile") == ["gzip.BadGzipFile", "gzip"]


def test_marked_text_stays_escaped() -> None:
    assert (
        str(highlight("<b>pump</b> & co", {"pump"}))
        == "&lt;b&gt;<mark>pump</mark>&lt;/b&gt; &amp; co"
    )


def _doc(kind: str, text: str) -> Document:
    return Document("p.kbpack", f"a.{kind}", "A", kind, text, [], [])


def test_markdown_code_shows_as_code_without_its_fences() -> None:
    text = "Run it:\n\n```sh\nmake test\n```\n\nDone.\n"
    html = str(render_text(_doc("markdown", text), None, (0, len(text))))
    assert '<code class="block">make test\n</code>' in html
    assert (
        '<span class="fence">```sh\n</span>' in html and '<span class="fence">```\n</span>' in html
    )
    assert (
        html.replace('<code class="block">', "")
        .replace("</code>", "")
        .replace('<span class="fence">', "")
        .replace("</span>", "")
        == text
    )  # nothing of the text is lost, only marked up


def test_pdf_line_breaks_inside_a_paragraph_read_as_spaces() -> None:
    text = "The pump seal\nalarm is cleared by hold-\ning reset.\n\nNext paragraph\nhere."
    hit = (text.index("alarm"), text.index("reset") + 5)
    html = str(render_text(_doc("pdf", text), hit, (0, len(text))))
    plain = html.replace("<mark id=hit>", "").replace("</mark>", "")
    assert plain == "The pump seal alarm is cleared by hold-ing reset.\n\nNext paragraph here."
    assert html.count("<mark") == 1  # the hit is still marked where the citation says


def test_other_text_is_shown_as_it_is() -> None:
    text = "line one\nline two\n```\nnot code in a text file\n```\n"
    assert str(render_text(_doc("text", text), None, (0, len(text)))) == text
