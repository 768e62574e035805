"""Canonical text: decoding order, sanitising, NFC, and the section tree builder."""

from __future__ import annotations

import codecs
import unicodedata

import h5py
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kbpack.extract.structure import Heading, TextBuilder, build_sections
from kbpack.text.canonical import canonicalize, decode_text, is_clean


@pytest.mark.parametrize(
    ("data", "text", "decoding"),
    [
        ("héllo".encode(), "héllo", "utf-8"),
        (codecs.BOM_UTF8 + "héllo".encode(), "héllo", "utf-8 (BOM)"),
        ("héllo 😀".encode("utf-16"), "héllo 😀", "utf-16-le (BOM)"),
        (codecs.BOM_UTF16_BE + "héllo".encode("utf-16-be"), "héllo", "utf-16-be (BOM)"),
        ("héllo".encode("utf-32"), "héllo", "utf-32-le (BOM)"),
        ("café 5€".encode("cp1252"), "café 5€", "cp1252 (fallback: not valid UTF-8)"),
        (b"\x81\x8d", "\x81\x8d", "cp1252 (fallback: not valid UTF-8)"),
    ],
)
def test_decoding_order(data: bytes, text: str, decoding: str) -> None:
    decoded = decode_text(data)
    assert (decoded.text, decoded.decoding, decoded.replaced) == (text, decoding, 0)


def test_broken_utf16_is_replaced_and_counted() -> None:
    data = codecs.BOM_UTF16_LE + "ab".encode("utf-16-le") + b"\x00\xd8" + "c".encode("utf-16-le")
    decoded = decode_text(data)
    assert decoded.text == "ab\ufffdc"
    assert decoded.replaced == 1


def test_declared_charset_is_used_only_when_it_decodes() -> None:
    assert decode_text("Grüße".encode("iso8859-15"), "iso-8859-15").decoding == (
        "iso8859-15 (declared)"
    )
    # A wrong declaration falls through to UTF-8.
    assert decode_text("日本".encode(), "shift_jis").decoding == "utf-8"


def test_canonicalize_policy() -> None:
    raw = "\r\n\r\nTitle  \r\nline\x00 two\rthree\t\ncafe\u0301 \ud800 end\n\n\n"
    text, replaced = canonicalize(raw)
    assert text == "Title\nline two\nthree\ncafé \ufffd end"
    assert replaced == 2  # one NUL removed, one lone surrogate replaced
    assert is_clean(text)


def test_canonical_text_is_storable_by_h5py(tmp_path) -> None:  # type: ignore[no-untyped-def]
    text, _ = canonicalize("a\x00b \udc80 c 😀")
    with h5py.File(tmp_path / "t.h5", "w") as f:
        f.create_dataset("t", data=np.array([text], dtype=h5py.string_dtype()))
    with h5py.File(tmp_path / "t.h5", "r") as f:
        assert f["t"][0].decode() == text


@given(st.text())
def test_canonicalize_is_idempotent_and_clean(raw: str) -> None:
    text, _ = canonicalize(raw)
    assert canonicalize(text) == (text, 0)
    assert "\x00" not in text and "\r" not in text
    assert unicodedata.is_normalized("NFC", text)
    text.encode("utf-8")  # no lone surrogates left


@given(st.lists(st.text(), max_size=8), st.sampled_from(["\n", "\n\n"]))
def test_builder_offsets_are_exact(blocks: list[str], separator: str) -> None:
    builder = TextBuilder()
    spans = [(builder.add(block, separator), block) for block in blocks]
    text = builder.text()
    assert len(text) == len(builder)
    for span, block in spans:
        if span is not None:
            assert text[span[0] : span[1]] == canonicalize(block)[0]
    assert canonicalize(text)[0] == text


def test_sections_nest_by_level() -> None:
    headings = [Heading(1, "A", 0), Heading(2, "A.1", 10), Heading(3, "A.1.a", 20),
                Heading(2, "A.2", 30), Heading(1, "B", 40)]  # fmt: skip
    sections = build_sections(50, "Doc", headings)
    got = [(s.level, s.title, s.start, s.end, s.parent) for s in sections]
    assert got == [
        (0, "Doc", 0, 50, -1),
        (1, "A", 0, 40, 0),
        (2, "A.1", 10, 30, 1),
        (3, "A.1.a", 20, 30, 2),
        (2, "A.2", 30, 40, 1),
        (1, "B", 40, 50, 0),
    ]


@st.composite
def heading_lists(draw: st.DrawFn) -> tuple[int, list[Heading]]:
    length = draw(st.integers(0, 500))
    starts = sorted(draw(st.lists(st.integers(0, length), max_size=30)))
    levels = draw(st.lists(st.integers(-2, 12), min_size=len(starts), max_size=len(starts)))
    return length, [
        Heading(lv, f"h{i}", s) for i, (lv, s) in enumerate(zip(levels, starts, strict=True))
    ]


@given(heading_lists())
def test_sections_nest_inside_document_and_parent(case: tuple[int, list[Heading]]) -> None:
    length, headings = case
    sections = build_sections(length, "T", headings)
    root = sections[0]
    assert (root.level, root.start, root.end, root.parent) == (0, 0, length, -1)
    assert len(sections) == len(headings) + 1
    for i, section in enumerate(sections[1:], start=1):
        assert 1 <= section.level <= 9
        assert 0 <= section.start <= section.end <= length
        assert 0 <= section.parent < i
        parent = sections[section.parent]
        assert parent.level < section.level
        assert parent.start <= section.start and section.end <= parent.end
        assert sections[i - 1].start <= section.start  # document order
