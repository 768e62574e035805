"""Plain text (``.txt``, ``.rst``): the canonical text is the file's text; reStructuredText-style
section titles (a line underlined, optionally also overlined, with a run of one punctuation
character at least as long as the title) become sections. Levels follow the order in which
each adornment style first appears, as in reStructuredText.

Title: the first heading of the top level, else the file name stem.
"""

from __future__ import annotations

import re

from kbpack.extract.structure import Heading
from kbpack.text.canonical import one_line

_ADORNMENT = re.compile(r"^([=\-~^\"'`#*+<>:_.])\1{2,}$")


def adornment_headings(text: str) -> list[Heading]:
    """Underlined (and optionally overlined) section titles, in document order."""
    lines = text.split("\n")
    starts = []
    pos = 0
    for line in lines:
        starts.append(pos)
        pos += len(line) + 1
    styles: list[tuple[str, bool]] = []
    headings: list[Heading] = []
    i = 0
    while i + 1 < len(lines):
        title, under = lines[i], lines[i + 1]
        mark = _ADORNMENT.match(under)
        is_title = (
            mark is not None
            and title.strip() != ""
            and not title[0].isspace()
            and not _ADORNMENT.match(title)
            and len(under) >= len(title.rstrip())
        )
        if not is_title or mark is None:
            i += 1
            continue
        over = i > 0 and lines[i - 1] == under
        if i > (1 if over else 0) and lines[i - (2 if over else 1)].strip():
            i += 1  # a title needs a blank line (or the start of the text) before it
            continue
        style = (mark.group(1), over)
        if style not in styles:
            styles.append(style)
        start = starts[i - 1] if over else starts[i]
        headings.append(Heading(styles.index(style) + 1, one_line(title), start))
        i += 2
    return headings
