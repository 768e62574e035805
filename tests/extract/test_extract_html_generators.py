"""HTML as documentation generators write it (pages shaped like Debian's developers-reference,
Sphinx, and the R manuals, Texinfo): their furniture is dropped, code blocks stay whole, and
unclosed nesting costs linear time and space."""

from __future__ import annotations

from pathlib import Path

from kbpack.extract import extract_file
from kbpack.index.chunk import ChunkConfig, chunk_document, section_path

SPHINX = """<!DOCTYPE html><html><head><title>5. Managing Packages</title></head><body>
<div class="related" role="navigation"><ul><li><a href="index.html">Debian Developer's
Reference</a> &#187;</li><li><a href="pkgs.html">next</a></li></ul></div>
<div class="document"><div class="body" role="main">
<section id="managing-packages"><h1>5. Managing Packages<a class="headerlink"
href="#managing-packages" title="Permalink to this heading">¶</a></h1>
<p>This chapter contains information related to creating, uploading, maintaining, and porting
packages.</p>
<section id="new-packages"><h2>5.1. New packages<a class="headerlink" href="#new-packages">¶</a></h2>
<p>If you want to create a new package for the Debian distribution, check the WNPP list.</p>
<div class="highlight-default notranslate"><div class="highlight"><pre><span></span>hello (1.0-2) unstable; urgency=low

  * Fix the frobnicator.

 -- Jane Doe &lt;jane@example.org&gt;  Mon, 06 Mar 2023 10:00:00 +0100
</pre></div></div>
</section></section></div></div>
<div class="sphinxsidebar" role="navigation"><h3>Table of Contents</h3><ul><li>Scope</li></ul></div>
<div class="footer">&#169; Copyright 2023, Developer's Reference Team.</div>
</body></html>"""

TEXINFO = """<html><head><title>R Installation and Administration</title></head><body>
<div class="top" id="Top"><div class="header"><p>
Next: <a href="#Obtaining-R" accesskey="n" rel="next">Obtaining R</a> &nbsp;
[<a href="#SEC_Contents" title="Table of contents" rel="contents">Contents</a>][<a
href="#Index" title="Index" rel="index">Index</a>]</p></div>
<h1 class="top">R Installation and Administration</h1>
<p>This is a guide to installation and administration for R.</p>
<h2 class="contents-heading">Table of Contents</h2>
<div class="contents"><ul class="no-bullet"><li><a href="#Obtaining-R">1 Obtaining R</a></li></ul></div>
<hr><div class="chapter" id="Obtaining-R"><div class="header"><p>
Next: <a href="#Installing-R">Installing R</a>, Previous: <a href="#Top">R Installation and
Administration</a>, Up: <a href="#Top">R Installation and Administration</a></p></div>
<h2 class="chapter">1 Obtaining R</h2>
<p>Sources, binaries and documentation for R can be obtained via CRAN.<span><code>R_HOME</code><a
href="#index-R_005fHOME" class="copiable-anchor"> &para;</a></span></p>
<h2 class="appendix">Index</h2>
<table class="index-cp" border="0"><tr><td></td><td valign="top"><a href="#x">BLAS library</a>:</td>
<td valign="top"><a href="#y">Linear algebra</a></td></tr></table>
</div></body></html>"""


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_sphinx_permalinks_navigation_and_sidebar_are_dropped(tmp_path: Path) -> None:
    doc = extract_file(_write(tmp_path, "pkgs.html", SPHINX), "pkgs.html")
    assert doc.status == "ok", doc.reason
    assert "¶" not in doc.text
    assert [s.title for s in doc.sections] == [
        "5. Managing Packages",
        "5. Managing Packages",
        "5.1. New packages",
    ]
    for noise in ("next", "Table of Contents", "Copyright", "»"):
        assert noise not in doc.text


def test_pre_keeps_its_blank_lines_and_stays_one_chunk(tmp_path: Path) -> None:
    doc = extract_file(_write(tmp_path, "pkgs.html", SPHINX), "pkgs.html")
    example = (
        "```\nhello (1.0-2) unstable; urgency=low\n\n  * Fix the frobnicator.\n\n"
        " -- Jane Doe <jane@example.org>  Mon, 06 Mar 2023 10:00:00 +0100\n```"
    )
    assert example in doc.text
    # a budget that splits the section: the code block, blank lines and all, is one chunk
    chunks = chunk_document(doc, None, ChunkConfig(window=None, max_chars=150)).chunks
    contents = [doc.text[c.start : c.end] for c in chunks]
    assert example in contents
    code = chunks[contents.index(example)]
    assert section_path(doc, code.section) == ["5. Managing Packages", "5.1. New packages"]


def test_texinfo_navigation_contents_and_index_tables_are_dropped(tmp_path: Path) -> None:
    doc = extract_file(_write(tmp_path, "R-admin.html", TEXINFO), "R-admin.html")
    assert doc.status == "ok", doc.reason
    for noise in ("Next:", "Previous:", "Up:", "[Contents]", "Table of Contents", "¶"):
        assert noise not in doc.text, noise
    assert "BLAS library" not in doc.text  # the index table
    assert "Sources, binaries and documentation for R can be obtained via CRAN." in doc.text
    assert [s.title for s in doc.sections][1:] == [
        "R Installation and Administration",
        "1 Obtaining R",
        "Index",
    ]


def test_unclosed_nesting_is_linear(tmp_path: Path) -> None:
    """1,000 unclosed <ul><li> (9 KB) once became 1,003,005 characters: indentation grew with
    depth. Now the text grows linearly with the input, 5,000 levels included."""
    for levels in (1_000, 5_000):
        page = "<html><body>" + "<ul><li>x" * levels + "</body></html>"
        doc = extract_file(_write(tmp_path, "nested.html", page), "nested.html")
        assert doc.status == "ok", doc.reason
        assert doc.text.count("x") == levels
        assert len(doc.text) <= 25 * levels  # "- x" plus at most 8 levels of indentation
