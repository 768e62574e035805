"""Assemble canonical text block by block, and turn headings into the section tree.

Extractors of structured formats (HTML, DOCX, PDF) never compute an offset by arithmetic on
source positions: each block is canonicalised first, then appended, and its offsets are read
off the text being built. Joining with ``\\n`` keeps canonicalisation exact, because NFC does
not compose across a newline.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from kbpack.text.canonical import canonicalize, one_line
from kbpack.text.document import Document, Section

MAX_LEVEL = 9

# Private-use code points in a heading are icon-font glyphs (U+F0C1, a permalink chain, in
# LibreOffice's DOCX and in HTML themes): no reader sees a word in them, dropped from headings.
_PRIVATE_USE = re.compile("[\ue000-\uf8ff\U000f0000-\U000ffffd\U00100000-\U0010fffd]")


def heading_text(title: str) -> str:
    """A heading's words: private-use code points dropped, white space collapsed."""
    return " ".join(_PRIVATE_USE.sub("", title).split())


@dataclass(frozen=True)
class Heading:
    """A heading found in the canonical text: level 1..9, its title, where it starts."""

    level: int
    title: str
    start: int


class TextBuilder:
    """Canonical text built from blocks: paragraphs are separated by a blank line, lines of one
    list or table by a single newline."""

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._length = 0
        self.replaced = 0
        self.headings: list[Heading] = []

    def __len__(self) -> int:
        return self._length

    def add(self, block: str, separator: str = "\n\n") -> tuple[int, int] | None:
        """Append one block (canonicalised here); returns its [start, end), None if empty."""
        text, replaced = canonicalize(block)
        self.replaced += replaced
        if not text.strip():
            return None
        if self._length:
            self._parts.append(separator)
            self._length += len(separator)
        start = self._length
        self._parts.append(text)
        self._length += len(text)
        return start, self._length

    def add_heading(self, level: int, title: str) -> tuple[int, int] | None:
        """Append a heading block and remember it as the start of a section (private-use
        glyphs dropped: ``heading_text``)."""
        title = heading_text(title)
        span = self.add(title)
        if span is not None:
            level = min(max(level, 1), MAX_LEVEL)
            self.headings.append(Heading(level, one_line(title), span[0]))
        return span

    def text(self) -> str:
        return "".join(self._parts)


def build_sections(text_length: int, title: str, headings: list[Heading]) -> list[Section]:
    """Root section plus one section per heading, in document order.

    A section spans from its heading to the next heading of the same or a higher level (or
    the end of the text); its parent is the nearest open heading of a lower level, else the
    root. Headings are ordered by ``start`` here (stably); levels are clamped to 1..9.
    """
    ordered = sorted(headings, key=lambda h: h.start)  # stable: equal starts keep their order
    levels = [min(max(h.level, 1), MAX_LEVEL) for h in ordered]
    ends = [text_length] * len(ordered)
    parents = [0] * len(ordered)
    open_: list[int] = []  # indexes of headings whose section is still open, levels increasing
    for i, level in enumerate(levels):
        while open_ and levels[open_[-1]] >= level:
            ends[open_.pop()] = ordered[i].start
        parents[i] = open_[-1] + 1 if open_ else 0  # +1: sections[0] is the root
        open_.append(i)
    sections = [Section(level=0, title=title, start=0, end=text_length, parent=-1)]
    for i, heading in enumerate(ordered):
        sections.append(Section(levels[i], heading.title, heading.start, ends[i], parents[i]))
    return sections


def with_text(
    doc: Document, text: str, title: str, headings: list[Heading], **more: Any
) -> Document:
    """What every extractor returns: ``doc`` with its text, its title and the sections its
    headings make (:func:`build_sections`); ``more``: the rest it found (decoding, pages...)."""
    return replace(
        doc, title=title, text=text, sections=build_sections(len(text), title, headings), **more
    )
