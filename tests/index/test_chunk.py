"""Chunker invariants (hypothesis over Markdown-ish documents) and the structural rules."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbpack.errors import UsageError
from kbpack.index.chunk import (
    SHORT_CHARS,
    Chunk,
    ChunkConfig,
    ChunkResult,
    chunk_document,
    embedded_text,
    header,
    section_path,
    title_only_sections,
)
from kbpack.text.document import Document, Page, Section

_HEADING = re.compile(r"^(#{1,6})[ \t]+(.*?)[ \t]*\r?$", re.M)


def count(text: str) -> int:
    """A deterministic stand-in tokenizer: words and punctuation marks, plus 2 special tokens."""
    return len(re.findall(r"\w+|[^\w\s]", text)) + 2


def make_doc(text: str, title: str = "Guide", pages: list[Page] | None = None) -> Document:
    """A Document whose sections come from Markdown ATX headings (a test-only parser)."""
    sections = [Section(0, title, 0, len(text), -1)]
    stack = [0]
    for m in _HEADING.finditer(text):
        level = len(m.group(1))
        while sections[stack[-1]].level >= level:
            stack.pop()
        sections.append(Section(level, m.group(2), m.start(), len(text), stack[-1]))
        stack.append(len(sections) - 1)
    # A section ends where the next heading of the same or a higher level starts.
    for i, s in enumerate(sections[1:], 1):
        nxt = next((t.start for t in sections[i + 1 :] if t.level <= s.level), len(text))
        sections[i] = Section(s.level, s.title, s.start, nxt, s.parent)
    return Document(
        name="guide.md",
        source_path="guide.md",
        media_type="text/markdown",
        source_size=len(text),
        source_sha256="0" * 64,
        title=title,
        extractor="md/test 0",
        extractor_version=1,
        text=text,
        sections=sections,
        pages=pages or [],
    )


def own_ranges(doc: Document, idx: int) -> list[tuple[int, int]]:
    """Positions of the section's own text: its span minus its children's spans."""
    sec = doc.sections[idx]
    owned = set(range(sec.start, sec.end))
    for child in doc.sections:
        if child.parent == idx:
            owned -= set(range(child.start, child.end))
    return sorted(owned)  # type: ignore[return-value]


def contents(doc: Document, result: ChunkResult) -> list[str]:
    return [doc.text[c.start : c.end] for c in result.chunks]


def title_only(doc: Document) -> set[int]:
    """Positions of sections whose own text is only their heading: no chunk holds them."""
    return {p for i in title_only_sections(doc) for p in own_ranges(doc, i)}


def check_invariants(doc: Document, result: ChunkResult, window: int | None) -> None:
    text = doc.text
    covered: set[int] = title_only(doc)
    prev_end = 0
    for c in result.chunks:
        content = text[c.start : c.end]
        assert content and content == content.strip(), c
        assert c.start >= prev_end, "chunks overlap or are out of order"
        prev_end = c.end
        owned = set(own_ranges(doc, c.section))
        if not all(p in owned for p in range(c.start, c.end)):
            # issue 32: a short leaf subsection joined with the chunk beside it, inside the
            # section (its parent) that the chunk is filed under
            sec = doc.sections[c.section]
            assert sec.start <= c.start and c.end <= sec.end, f"{c} leaves its section"
            assert any(
                s.parent == c.section
                and not any(t.parent == k for t in doc.sections)
                and len(text[s.start : s.end].strip()) < SHORT_CHARS
                and c.start
                <= s.start + len(text[s.start : s.end]) - len(text[s.start : s.end].lstrip())
                and s.start + len(text[s.start : s.end].rstrip()) <= c.end
                for k, s in enumerate(doc.sections)
            ), f"{c} leaves its section"
        covered.update(range(c.start, c.end))
        embedded = embedded_text(header(doc.title, section_path(doc, c.section)), content)
        assert c.tokens == count(embedded)
        if window is not None:
            assert c.tokens <= window, c
    missing = [i for i, ch in enumerate(text) if not ch.isspace() and i not in covered]
    assert missing == [], f"characters in no chunk: {[text[i] for i in missing[:20]]}"


# -- generated documents ---------------------------------------------------------------------

word = st.sampled_from(
    ["data", "index", "perché", "città", "chunk", "naïve", "🙂", "東京", "x", "retrieval", "é"]
)
sentence = st.builds(
    lambda ws, end: " ".join(ws) + end,
    st.lists(word, min_size=1, max_size=25),
    st.sampled_from([".", "!", "?", "", ":", " …"]),
)
paragraph = st.lists(sentence, min_size=1, max_size=8).map(" ".join)
code = st.lists(st.lists(word, max_size=8).map(" ".join), min_size=1, max_size=12).map(
    lambda lines: "```python\n" + "\n".join(lines) + "\n```"
)
table = st.lists(st.lists(word, min_size=2, max_size=2), min_size=1, max_size=10).map(
    lambda rows: "| a | b |\n|---|---|\n" + "\n".join(f"| {r[0]} | {r[1]} |" for r in rows)
)
heading = st.builds(
    lambda lvl, ws: "#" * lvl + " " + " ".join(ws),
    st.integers(1, 3),
    st.lists(word, min_size=1, max_size=4),
)
unbreakable = st.integers(5, 120).map(lambda n: ".-" * n)
block = st.one_of(paragraph, paragraph, code, table, heading, heading, unbreakable, st.just(""))
document_text = st.builds(
    lambda blocks, sep, nl: sep.join(blocks).replace("\n", nl),
    st.lists(block, max_size=14),
    st.sampled_from(["\n\n", "\n", "\n\n\n", "\n  \n"]),
    st.sampled_from(["\n", "\r\n"]),
)


@settings(max_examples=120, deadline=None)
@given(text=document_text, window=st.sampled_from([24, 40, 64, 256]))
def test_invariants_hold_for_any_document(text: str, window: int) -> None:
    doc = make_doc(text)
    result = chunk_document(doc, count, ChunkConfig(window=window))
    check_invariants(doc, result, window)


@settings(max_examples=60, deadline=None)
@given(text=document_text, max_chars=st.sampled_from([20, 80, 400]))
def test_invariants_hold_without_a_tokenizer(text: str, max_chars: int) -> None:
    doc = make_doc(text)
    result = chunk_document(doc, None, ChunkConfig(window=None, max_chars=max_chars))
    for c in result.chunks:
        assert c.tokens == 0 and c.end - c.start <= max_chars
    covered = {p for c in result.chunks for p in range(c.start, c.end)} | title_only(doc)
    assert all(ch.isspace() or i in covered for i, ch in enumerate(text))


@settings(max_examples=40, deadline=None)
@given(text=document_text, overlap=st.integers(1, 3))
def test_overlap_repeats_units_and_still_covers_everything(text: str, overlap: int) -> None:
    doc = make_doc(text)
    result = chunk_document(doc, count, ChunkConfig(window=48, overlap=overlap))
    covered = {p for c in result.chunks for p in range(c.start, c.end)} | title_only(doc)
    assert all(ch.isspace() or i in covered for i, ch in enumerate(text))
    assert all(c.tokens <= 48 for c in result.chunks)
    starts = [c.start for c in result.chunks]
    assert len(set(starts)) == len(starts)


# -- structure -------------------------------------------------------------------------------


def test_a_heading_alone_before_its_subsections_is_no_chunk() -> None:
    text = (
        "# 2 Applying\n\n## 2.1 Getting started\n\nRead the whole guide before you start.\n\n"
        "## Empty\n\n## 2.2 Mentors\n\nAsk a mentor.\n\n### Sub\n\nDeeper text that goes on for a while."
    )
    doc = make_doc(text)
    result = chunk_document(doc, count, ChunkConfig(window=256))
    assert contents(doc, result) == [
        "## 2.1 Getting started\n\nRead the whole guide before you start.",
        # "## Empty": its heading is all there is of it, which search would never show
        "## 2.2 Mentors\n\nAsk a mentor.",
        "### Sub\n\nDeeper text that goes on for a while.",
    ]
    # "# 2 Applying": its title is in every header; "## Empty" (issue 32): a title alone
    assert title_only_sections(doc) == {1, 3}
    assert section_path(doc, result.chunks[0].section) == ["2 Applying", "2.1 Getting started"]


def test_a_heading_opens_the_first_piece_of_a_paragraph_too_long_to_join() -> None:
    """A heading followed by a paragraph over budget is not a chunk alone: it opens the
    paragraph's first piece (PDF sections whose first paragraph is long did this)."""
    long = " ".join(f"Sentence number {i} says something about the frobnicator." for i in range(12))
    doc = make_doc(f"# Intro\n\nShort.\n\n## 3.3.3 Others\n\n{long}")
    chunks = contents(doc, chunk_document(doc, None, ChunkConfig(window=None, max_chars=200)))
    assert "## 3.3.3 Others" not in chunks
    first = next(c for c in chunks if c.startswith("## 3.3.3 Others"))
    assert first.startswith("## 3.3.3 Others\n\nSentence number 0 says")
    assert all(len(c) >= 40 for c in chunks[1:])


def test_whole_paragraphs_are_packed_and_the_heading_opens_the_first_chunk() -> None:
    text = "# Install\n\nFirst paragraph here.\n\nSecond one.\n\nThird paragraph, longer than the rest."
    doc = make_doc(text)
    # Header "Guide > Install" is 3 tokens + 2 specials; the first two blocks take 6 more.
    result = chunk_document(doc, count, ChunkConfig(window=13))
    assert contents(doc, result) == [
        "# Install\n\nFirst paragraph here.",
        "Second one.",
        "Third paragraph, longer than the rest.",
    ]
    assert [c.section for c in result.chunks] == [1, 1, 1]
    assert result.problems == []


def test_a_long_paragraph_is_cut_at_sentence_ends() -> None:
    sentences = [f"Sentence number {i} says something about retrieval." for i in range(12)]
    doc = make_doc(" ".join(sentences))
    result = chunk_document(doc, count, ChunkConfig(window=30))
    assert len(result.chunks) > 1
    # Every chunk is whole sentences: it starts where one starts and ends where one ends.
    for content in contents(doc, result):
        assert content.startswith("Sentence number") and content.endswith(".")
    check_invariants(doc, result, 30)


def test_a_long_sentence_is_cut_at_words_without_a_problem() -> None:
    text = "intro " + " ".join(f"w{i}" for i in range(200)) + " end"
    doc = make_doc(text)
    result = chunk_document(doc, count, ChunkConfig(window=30))
    words = set(text.split())
    assert all(set(c.split()) <= words for c in contents(doc, result))
    assert result.problems == []
    check_invariants(doc, result, 30)


def test_a_run_without_spaces_is_hard_cut_and_reported() -> None:
    text = "before\n\n" + "a.b" * 100 + "\n\nafter"
    doc = make_doc(text)
    result = chunk_document(doc, count, ChunkConfig(window=40))
    assert len(result.problems) == 1
    assert result.problems[0].startswith("guide.md: 300 characters at [8,308)")
    check_invariants(doc, result, 40)


def test_code_fences_stay_whole_blank_lines_included() -> None:
    fence = "```python\ndef f():\n\n    return 1\n```"
    text = f"# Code\n\nSome intro text.\n\n{fence}\n\nAfter the code."
    doc = make_doc(text)
    result = chunk_document(doc, count, ChunkConfig(window=256, max_chars=40))
    assert fence in contents(doc, result)


def test_an_oversized_code_block_is_split_at_lines_only() -> None:
    lines = [f"x{i} = compute({i}, {i + 1})" for i in range(40)]
    text = "```\n" + "\n".join(lines) + "\n```"
    doc = make_doc(text)
    result = chunk_document(doc, count, ChunkConfig(window=50))
    assert len(result.chunks) > 1
    all_lines = set(text.split("\n"))
    for content in contents(doc, result):
        assert set(content.split("\n")) <= all_lines, "a chunk starts or ends mid-line"
    check_invariants(doc, result, 50)


def test_tables_stay_whole_or_split_at_rows() -> None:
    rows = "\n".join(f"| key{i} | value {i} |" for i in range(30))
    text = f"Intro.\n\n| k | v |\n|---|---|\n{rows}\n\nOutro."
    doc = make_doc(text)
    table = text[text.index("| k") : text.index("\n\nOutro")]
    whole = chunk_document(doc, count, ChunkConfig(window=400))
    assert any(table in c for c in contents(doc, whole))
    split = chunk_document(doc, count, ChunkConfig(window=60))
    table_chunks = [c for c in contents(doc, split) if "|" in c]
    assert len(table_chunks) > 1
    for content in table_chunks:  # whole rows (the short "Outro." joins the last rows' chunk)
        lines = [line for line in content.split("\n") if line not in ("", "Intro.", "Outro.")]
        assert all(line.startswith("|") and line.endswith("|") for line in lines)
    check_invariants(doc, split, 60)
    # Tables as the HTML and DOCX extractors write them: "cell | cell" rows, no rule row.
    plain = "\n".join(f"key {i}. Still key | value {i}. More value" for i in range(30))
    doc = make_doc(plain)
    for content in contents(doc, chunk_document(doc, count, ChunkConfig(window=60))):
        assert set(content.split("\n")) <= set(plain.split("\n")), "cut inside a row"


def test_empty_sections_and_heading_only_documents() -> None:
    text = "# A\n\n## B\n\nbody of b\n\n## C\n"
    doc = make_doc(text)
    result = chunk_document(doc, count, ChunkConfig())
    assert [(c.section, doc.text[c.start : c.end]) for c in result.chunks] == [
        (2, "## B\n\nbody of b"),  # "# A" alone: its title is in the headers below it
        # "## C" alone: a title with nothing under it gets no chunk (issue 32)
    ]
    assert section_path(doc, 2) == ["A", "B"]
    # a document that is nothing but a heading keeps it: it has nothing else to be found by
    assert chunk_document(make_doc("# Only"), count, ChunkConfig()).chunks[0].section == 1
    only = make_doc("# Only\n\n## Empty too\n")
    assert contents(only, chunk_document(only, count, ChunkConfig())) == ["## Empty too"]
    assert chunk_document(make_doc(" \n\t\n"), count, ChunkConfig()).chunks == []


def test_crlf_emoji_and_nfd_offsets_are_code_points() -> None:
    nfd = unicodedata.normalize("NFD", "perché la città è così")
    text = f"# Título 🙂\r\n\r\n{nfd} 👩‍💻 done.\r\n\r\nNext para 🙂.\r\n"
    doc = make_doc(text)
    result = chunk_document(doc, count, ChunkConfig(window=256))
    assert contents(doc, result) == [f"# Título 🙂\r\n\r\n{nfd} 👩‍💻 done.\r\n\r\nNext para 🙂."]
    check_invariants(doc, result, 256)


def test_a_hard_cut_never_separates_a_combining_mark() -> None:
    text = unicodedata.normalize("NFD", "é" * 300)
    doc = make_doc(text)
    result = chunk_document(doc, None, ChunkConfig(window=None, max_chars=51))
    assert len(result.chunks) > 1
    for c in result.chunks:
        assert not unicodedata.combining(doc.text[c.start])


def test_pages_are_the_page_where_a_chunk_starts() -> None:
    text = "Page one text.\n\nMore on one.\n\nPage two starts here.\n\nEnd."
    p2 = text.index("Page two")
    pages = [Page(1, 0, p2), Page(2, p2, len(text))]
    doc = make_doc(text, pages=pages)
    result = chunk_document(doc, count, ChunkConfig(window=9))  # one paragraph per chunk
    assert [(doc.text[c.start : c.end], c.page) for c in result.chunks] == [
        ("Page one text.", 1),
        ("More on one.", 1),
        ("Page two starts here.", 2),
        ("End.", 2),
    ]
    assert all(c.page is None for c in chunk_document(make_doc(text), count, ChunkConfig()).chunks)


def test_header_and_embedded_text_rule() -> None:
    assert header("Guide", ["Install", "On  Linux\n"]) == "Guide > Install > On Linux"
    assert header("", ["A"]) == "A"
    assert header("Options", ["Options", "Flags", "", "Flags"]) == "Options > Flags"
    assert len(header("T" * 500, [])) == 200 and header("T" * 500, []).endswith("…")
    assert embedded_text("Guide > Install", "pip install") == "Guide > Install\n\npip install"
    assert embedded_text("", "text") == "text"


def test_a_header_that_fills_the_window_is_reported() -> None:
    doc = make_doc("# " + " ".join(["word"] * 60) + "\n\nbody text", title="T")
    result = chunk_document(doc, count, ChunkConfig(window=40))
    assert len(result.problems) == 1 and "alone fills the 40-token window" in result.problems[0]
    assert all(isinstance(c, Chunk) for c in result.chunks)


def test_the_budget_is_confirmed_with_the_real_counter() -> None:
    # A counter whose counts are not additive (each text costs extra per 10 words): the
    # estimate is wrong, but every chunk must still fit the window.
    def lumpy(text: str) -> int:
        n = len(text.split())
        return n + n // 10 * 3 + 2

    doc = make_doc("\n\n".join(" ".join(["w"] * k) + "." for k in range(1, 30)))
    result = chunk_document(doc, lumpy, ChunkConfig(window=40))
    h = header(doc.title, [])
    assert all(lumpy(embedded_text(h, doc.text[c.start : c.end])) <= 40 for c in result.chunks)
    assert all(
        c.tokens == lumpy(embedded_text(h, doc.text[c.start : c.end])) for c in result.chunks
    )


def test_failed_documents_and_bad_configs() -> None:
    failed = make_doc("text")
    failed.status = "failed"
    assert chunk_document(failed, count, ChunkConfig()).chunks == []
    with pytest.raises(UsageError, match="window 0"):
        chunk_document(make_doc("x"), count, ChunkConfig(window=0))
    with pytest.raises(UsageError, match="overlap -1"):
        chunk_document(make_doc("x"), count, ChunkConfig(overlap=-1))


@pytest.fixture(scope="module")
def tiny_embedder(tiny_model: Path) -> Iterator[Any]:
    from kbpack.model.embedder import Embedder

    embedder = Embedder(tiny_model)
    yield embedder
    embedder.close() if hasattr(embedder, "close") else None


@settings(max_examples=30, deadline=None)
@given(text=document_text)
def test_every_embedded_text_fits_the_real_model_window(tiny_embedder: Any, text: str) -> None:
    embedder = tiny_embedder
    doc = make_doc(text, title="T")
    for window in (embedder.window, 64):
        result = chunk_document(doc, embedder.count_tokens, ChunkConfig(window=window))
        covered = {p for c in result.chunks for p in range(c.start, c.end)} | title_only(doc)
        assert all(ch.isspace() or i in covered for i, ch in enumerate(text))
        for c in result.chunks:
            h = header(doc.title, section_path(doc, c.section))
            real = embedder.count_tokens(embedded_text(h, doc.text[c.start : c.end]))
            assert c.tokens == real
            if real > window:  # only allowed when the header alone fills the window, reported
                assert any(h[:60] in p and "alone fills" in p for p in result.problems)
                assert embedder.count_tokens(embedded_text(h, "x")) > window


# -- short chunks (issue 32 item 5) ------------------------------------------------------------


def test_a_short_tail_joins_the_chunk_before_it_in_its_section() -> None:
    """Greedy packing can leave a last block of a few characters (a PDF's "Appendix", a code
    block's closing brace) as a chunk of its own: it joins its neighbour when both fit."""
    # over the window: split at sentences, then "See also." is packed on its own
    long = " ".join(f"Sentence {i} explains the option in detail." for i in range(12))
    doc = make_doc(
        f"# Options\n\n{long}\n\nSee also.\n\n## Next\n\nThe next section's own text is here."
    )
    chunks = contents(doc, chunk_document(doc, count, ChunkConfig(window=48)))
    assert all(len(c) >= 40 for c in chunks), chunks
    assert any(c.endswith(f"{long[-40:]}\n\nSee also.") for c in chunks), chunks
    # never across a child's heading: "## Next" keeps its own chunk
    assert chunks[-1] == "## Next\n\nThe next section's own text is here."
    check_invariants(doc, chunk_document(doc, count, ChunkConfig(window=48)), 48)


def test_a_short_chunk_that_fits_nowhere_stays() -> None:
    """Joining never makes a chunk over the budget: a short block beside full chunks stays."""
    full = " ".join(f"word{i}" for i in range(57))  # with its header, the whole window
    doc = make_doc(f"{full}\n\nTail.\n\n{full}")
    chunks = contents(doc, chunk_document(doc, count, ChunkConfig(window=60)))
    assert chunks == [full, "Tail.", full]


def test_a_page_whose_own_text_is_its_title_gets_no_chunk_for_it() -> None:
    """SQLite's pages open with their title above numbered sections that are its siblings,
    not its children: the title alone would be a chunk search never shows, and every chunk's
    header starts with it."""
    doc = make_doc(
        "SQLite Autoincrement\n\n# 1. Summary\n\nAvoid AUTOINCREMENT.",
        title=("SQLite Autoincrement"),
    )
    result = chunk_document(doc, count, ChunkConfig(window=256))
    assert contents(doc, result) == ["# 1. Summary\n\nAvoid AUTOINCREMENT."]
    assert 0 in title_only_sections(doc)
    check_invariants(doc, result, 256)


def test_a_short_leaf_section_joins_the_chunk_before_it_under_their_parent() -> None:
    """PostgreSQL's reference pages end with "See Also" and a command name or two: the leaf
    joins the chunk before it inside the same page, filed under the page (their parent); a
    leaf with no chunk beside it inside its parent stays as it is."""
    body = "pg_dump is a utility for backing up a PostgreSQL database, even while it is in use."
    text = f"# pg_dump\n\n## Description\n\n{body}\n\n## See Also\n\npg_restore, psql"
    doc = make_doc(text)
    result = chunk_document(doc, count, ChunkConfig(window=256))
    assert contents(doc, result) == [f"## Description\n\n{body}\n\n## See Also\n\npg_restore, psql"]
    assert section_path(doc, result.chunks[0].section) == ["pg_dump"]
    check_invariants(doc, result, 256)
    # too long together for the window: each keeps its own chunk and section
    result = chunk_document(doc, count, ChunkConfig(window=30))
    assert contents(doc, result)[-1] == "## See Also\n\npg_restore, psql"
    assert section_path(doc, result.chunks[-1].section) == ["pg_dump", "See Also"]
