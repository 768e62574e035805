"""HTML details a reader would notice: spacing, nested lists, messy markup, charsets, titles."""

from __future__ import annotations

from pathlib import Path

from kbpack.extract import extract_file


def extract_html_file(tmp_path: Path, markup: str | bytes) -> tuple[str, str, str]:
    path = tmp_path / "page.html"
    path.write_bytes(markup.encode() if isinstance(markup, str) else markup)
    doc = extract_file(path, "page.html")
    assert doc.status == "ok", doc.reason
    return doc.text, doc.title, doc.decoding


def test_inline_spacing_breaks_and_cells(tmp_path: Path) -> None:
    text, _, _ = extract_html_file(
        tmp_path,
        "<p><b>foo </b> <i> bar</i><br> next  <span>x</span>&nbsp;y</p>"
        "<table><tr><th>a<br>b</th><td> c </td></tr><tr><td>d<td>e</table>",
    )
    assert text == "foo bar\nnext x\xa0y\n\na b | c\nd | e"


def test_nested_and_unclosed_lists(tmp_path: Path) -> None:
    text, _, _ = extract_html_file(
        tmp_path, "<p>Intro</p><ul><li>one<li>two<ul><li>two.a</ul><li>three</ul><p>After"
    )
    assert text == "Intro\n\n- one\n- two\n  - two.a\n- three\n\nAfter"


def test_hidden_and_navigation_elements_are_dropped(tmp_path: Path) -> None:
    text, title, _ = extract_html_file(
        tmp_path,
        "<html><head><title>Page title</title></head><body>"
        "<div class='sidebar'>Side</div><div role='navigation'>Nav</div>"
        "<p hidden>Hidden</p><span aria-hidden='true'>Icon</span>"
        "<header>Top</header><main><h2>Only h2</h2><p>Body</p></main>"
        "<footer>Bottom</footer></body></html>",
    )
    assert text == "Only h2\n\nBody"
    assert title == "Page title"  # no h1: the <title>


def test_declared_charset_is_honoured_when_not_utf8(tmp_path: Path) -> None:
    markup = "<meta charset='iso-8859-15'><h1>Prix : 5 €</h1>".encode("iso-8859-15")
    text, title, decoding = extract_html_file(tmp_path, markup)
    assert (text, title, decoding) == ("Prix : 5 €", "Prix : 5 €", "iso8859-15 (declared)")
