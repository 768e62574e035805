"""A word-level diff of two texts with context, as ``git diff --word-diff`` shows it: removed
words as ``[-old-]``, added words as ``{+new+}``, a few unchanged words either side.

Words are runs of non-whitespace; whitespace is shown as one space (a passage reads on one line).
The common head and tail are cut off first, so an edit to one paragraph of a long manual
compares only the paragraph's words.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

_WORD = re.compile(r"\S+")
CONTEXT = 8  # unchanged words shown either side of a change
_JUNK_FREE_LIMIT = 20_000  # words in the changed middle compared exactly (quadratic beyond)


@dataclass(frozen=True)
class Passage:
    """One changed passage: ``text`` in word-diff notation, ``start``/``end`` the characters of
    the new text it covers (its context included), ``old_start`` where it begins in the old
    text and ``at`` where its first change is in the new."""

    text: str
    start: int
    end: int
    old_start: int
    at: int


def _words(text: str) -> list[re.Match[str]]:
    return list(_WORD.finditer(text))


def word_diff(old: str, new: str, context: int = CONTEXT) -> list[Passage]:
    """The changed passages from ``old`` to ``new``, in order; none when the words are equal."""
    a, b = _words(old), _words(new)
    wa, wb = [m.group() for m in a], [m.group() for m in b]
    head = 0
    while head < min(len(wa), len(wb)) and wa[head] == wb[head]:
        head += 1
    tail = 0
    while tail < min(len(wa), len(wb)) - head and wa[-1 - tail] == wb[-1 - tail]:
        tail += 1
    mid_a, mid_b = wa[head : len(wa) - tail], wb[head : len(wb) - tail]
    if not mid_a and not mid_b:
        return []
    big = len(mid_a) + len(mid_b) > _JUNK_FREE_LIMIT
    matcher = difflib.SequenceMatcher(None, mid_a, mid_b, autojunk=big)
    changes = [
        (i1 + head, i2 + head, j1 + head, j2 + head)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes()
        if tag != "equal"
    ]
    # changes closer than twice the context (unchanged words between) make one passage
    hunks: list[list[tuple[int, int, int, int]]] = []
    for change in changes:
        if hunks and change[2] - hunks[-1][-1][3] <= 2 * context:
            hunks[-1].append(change)
        else:
            hunks.append([change])
    passages = []
    for hunk in hunks:
        lo, hi = max(0, hunk[0][2] - context), min(len(wb), hunk[-1][3] + context)
        parts = wb[lo : hunk[0][2]]
        for k, (i1, i2, j1, j2) in enumerate(hunk):
            if k:
                parts += wb[hunk[k - 1][3] : j1]
            removed = "[-" + " ".join(wa[i1:i2]) + "-]" if i2 > i1 else ""
            added = "{+" + " ".join(wb[j1:j2]) + "+}" if j2 > j1 else ""
            parts.append(removed + added)  # adjacent, as git writes a replacement
        parts += wb[hunk[-1][3] : hi]
        start = b[lo].start() if lo < len(b) else len(new)
        end = b[hi - 1].end() if hi > lo else start
        i0, j0 = hunk[0][0], hunk[0][2]
        old_start = a[i0].start() if i0 < len(a) else len(old)
        at = b[j0].start() if j0 < len(b) else len(new)
        passages.append(Passage(" ".join(parts), start, end, old_start, at))
    return passages


__all__ = ["CONTEXT", "Passage", "word_diff"]
