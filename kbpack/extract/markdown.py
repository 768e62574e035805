"""Markdown: the canonical text is the file's own text (markup kept, so quotes match the
source); sections come from ATX (``# Title``) and setext (``Title`` over ``===``/``---``)
headings, ignoring lines inside fenced code blocks and YAML front matter.

Title: the first level-1 heading, else the file name stem.
"""

from __future__ import annotations

import re

from kbpack.extract.structure import Heading
from kbpack.text.canonical import one_line

_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*))?$")
_ATX_CLOSE = re.compile(r"(?:^|[ \t]+)#+$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
# A line a setext underline cannot turn into a heading: list item, quote, code, HTML, table.
_NOT_PARAGRAPH = re.compile(
    r"^(?: {4}|\t| {0,3}(?:[-*+](?:[ \t]|$)|\d{1,9}[.)](?:[ \t]|$)|>|<|\|))"
)


def _lines(text: str) -> list[tuple[int, str]]:
    """(start offset, line without its newline) for every line of ``text``."""
    out: list[tuple[int, str]] = []
    pos = 0
    for line in text.split("\n"):
        out.append((pos, line))
        pos += len(line) + 1
    return out


def _front_matter_end(lines: list[tuple[int, str]]) -> int:
    """Index of the first line after a leading YAML front matter block (0 if none)."""
    if not lines or lines[0][1] != "---":
        return 0
    for i in range(1, len(lines)):
        if lines[i][1] in ("---", "..."):
            return i + 1
    return 0


def markdown_headings(text: str) -> list[Heading]:
    """Headings of canonical Markdown text, in document order, each starting at its line."""
    lines = _lines(text)
    headings: list[Heading] = []
    fence: tuple[str, int] | None = None  # (fence character, length) while inside a code block
    paragraph_line: int | None = None  # index of the previous line if it can carry a setext
    for i in range(_front_matter_end(lines), len(lines)):
        start, line = lines[i]
        opened = _FENCE.match(line)
        if fence is not None:
            if (
                opened
                and opened.group(1)[0] == fence[0]
                and len(opened.group(1)) >= fence[1]
                and not opened.group(2).strip()
            ):
                fence = None
            paragraph_line = None
            continue
        if opened and not (opened.group(1)[0] == "`" and "`" in opened.group(2)):
            fence = (opened.group(1)[0], len(opened.group(1)))
            paragraph_line = None
            continue
        atx = _ATX.match(line)
        if atx:
            title = _ATX_CLOSE.sub("", (atx.group(2) or "").strip())
            if title.strip():
                headings.append(Heading(len(atx.group(1)), one_line(title), start))
            paragraph_line = None
            continue
        underline = _SETEXT.match(line)
        if underline and paragraph_line is not None:
            title_start, title = lines[paragraph_line]
            level = 1 if underline.group(1)[0] == "=" else 2
            headings.append(Heading(level, one_line(title), title_start))
            paragraph_line = None
            continue
        paragraph_line = i if line.strip() and not _NOT_PARAGRAPH.match(line) else None
    return headings
