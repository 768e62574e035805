"""PDF page lines -> paragraphs, without the page furniture.

Input: each page's text lines in PDFium's reading order, with the vertical geometry of each
line (from the loose character boxes, which follow the font size rather than the glyph).

* **Running heads and footers, page numbers** are dropped. Only the first two and last two
  lines of a page are candidates, and one of three rules must say so:
  1. the line is only a page number (``13``, ``xiv``, ``- 13 -``, ``Page 13``, ``13 of 200``);
  2. the same line, digits ignored, is the first or last line of at least 3 pages and 20% of
     the pages (``Debian Developer's Reference, Release 12.18``);
  3. its leading or trailing number is the page's printed number: the offset between physical
     and printed numbers that most pages agree on (at least 3 pages and 30% of them), so a
     footer that names the current section (``3.2. Administrative Duties 13``) goes too.
* **Paragraphs**: consecutive lines are one paragraph (kept as lines, joined by ``\\n``)
  unless the step between their baselines is over 1.45 times the document's usual step (its most common), the
  text goes back up (a new column; the same row is not a break), or the font size changes by more than 15% (a heading).
  Paragraphs are separated by a blank line, which is what the chunker packs by.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from itertools import pairwise


@dataclass(frozen=True)
class Line:
    """One line of a page: its text, and its baseline/top in PDF points (0 at the bottom);
    ``size`` is the line's height. Lines without geometry have size 0."""

    text: str
    bottom: float = 0.0
    top: float = 0.0

    @property
    def size(self) -> float:
        return self.top - self.bottom


_PAGE_NUMBER = re.compile(
    r"^(?:page\s+)?[-–—(\[]?\s*(?:\d{1,5}|[ivxlcdm]{1,8})\s*[-–—)\]]?"
    r"(?:\s*(?:of|/)\s*\d{1,5})?$",
    re.I,
)
_LEADING = re.compile(r"^(\d{1,5})\b")
_TRAILING = re.compile(r"\b(\d{1,5})$")
_DIGITS = re.compile(r"\d+")
EDGE = 2  # lines at the top and at the bottom of a page that may be furniture
PARAGRAPH_STEP = 1.45  # a baseline step this many times the usual one starts a paragraph
SIZE_CHANGE = 0.15  # a font size change over this share starts a paragraph (a heading)


def _edges(lines: list[Line]) -> list[int]:
    n = len(lines)
    return sorted({i for i in (*range(min(EDGE, n)), *range(max(n - EDGE, 0), n))})


def _key(text: str) -> str:
    return _DIGITS.sub("#", " ".join(text.lower().split()))


def _numbers(text: str) -> list[int]:
    found = [m.group(1) for m in (_LEADING.search(text), _TRAILING.search(text)) if m]
    return [int(n) for n in found]


def furniture(pages: list[list[Line]]) -> list[set[int]]:
    """Per page, the indexes of lines that are running heads, footers or page numbers."""
    with_text = [lines for lines in pages if lines]
    floor_repeat = max(3, math.ceil(0.2 * len(with_text)))
    floor_offset = max(3, math.ceil(0.3 * len(with_text)))
    repeats: Counter[str] = Counter()
    offsets: Counter[int] = Counter()
    for number, lines in enumerate(pages, start=1):
        if not lines:
            continue
        ends = {lines[0].text, lines[-1].text}
        repeats.update({_key(t) for t in ends})
        offsets.update({number - n for t in ends for n in _numbers(t)})
    offset, agree = offsets.most_common(1)[0] if offsets else (None, 0)
    if agree < floor_offset:
        offset = None
    drop: list[set[int]] = []
    for number, lines in enumerate(pages, start=1):
        gone: set[int] = set()
        for i in _edges(lines):
            text = lines[i].text.strip()
            if (
                _PAGE_NUMBER.match(text)
                or (i in (0, len(lines) - 1) and repeats[_key(text)] >= floor_repeat)
                or (offset is not None and len(text) <= 150 and number - offset in _numbers(text))
            ):
                gone.add(i)
        drop.append(gone)
    return drop


def usual_step(pages: list[list[Line]]) -> float:
    """The document's usual baseline step between consecutive lines of a paragraph: the most
    common step (to half a point; the smaller on a tie) over every page, since one page alone
    may hold too few lines to tell. 0 without geometry."""
    steps = [
        a.bottom - b.bottom
        for lines in pages
        for a, b in pairwise(lines)
        if a.size > 0 and b.size > 0 and 0.3 * a.size <= a.bottom - b.bottom < 3 * a.size
    ]
    if not steps:
        return 0.0
    counts = Counter(round(step * 2) / 2 for step in steps)
    return min(counts, key=lambda step: (-counts[step], step))


def paragraphs(lines: list[Line], usual: float) -> list[str]:
    """The page's lines grouped into paragraphs (see the module docstring)."""
    if not lines:
        return []
    out: list[list[str]] = [[lines[0].text]]
    for a, b in pairwise(lines):
        if _breaks(a, b, usual):
            out.append([])
        out[-1].append(b.text)
    return ["\n".join(p) for p in out]


def _breaks(a: Line, b: Line, usual: float) -> bool:
    if a.size <= 0 or b.size <= 0 or usual <= 0:
        return False  # no geometry: keep the lines together, as PDFium gave them
    step = a.bottom - b.bottom
    if abs(step) < 0.3 * a.size:
        return False  # the same row (table cells, a run in another font)
    if step < 0:
        return True  # back up the page: a new column or a block placed out of order
    if abs(a.size - b.size) > SIZE_CHANGE * max(a.size, b.size):
        return True
    return step > PARAGRAPH_STEP * usual
