"""The search page marks what the question asked for, not every word that shares a part with it
(issue 33: stopwords and any identifier containing a query word lit up)."""

from __future__ import annotations

import pytest

pytest.importorskip("starlette")

from kbpack.serve.web import content_terms, highlight


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
