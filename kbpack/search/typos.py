""" "Did you mean": spelling suggestions for query words the pack does not hold.

A query word that is in no chunk (and is not a stopword or a code) gets up to three
suggestions: vocabulary terms within edit distance 1 (words of up to 4 letters) or 2 (longer
words), counting a swap of two neighbouring letters as one edit (optimal string alignment),
that share the word's first letter. Nearer first, then the more chunks a term is in. The query
is never rewritten: the suggestions are shown beside the results, and the user decides.

Why the first letter: the vocabulary is sorted, so words sharing a first letter are one
contiguous range, and a typo in the first letter is the rarest kind; scanning the whole
vocabulary per query would cost too much on a large pack.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kbpack.pack.bm25_store import TermLookup

MAX_SUGGESTIONS = 3
MIN_LENGTH = 3  # shorter words have too many neighbours to suggest anything useful


@dataclass(frozen=True)
class Suggestion:
    term: str  # the query word as tokenized (casefolded)
    did_you_mean: tuple[tuple[str, int, int], ...]  # (term, edit distance, chunks holding it)

    def as_dict(self) -> dict[str, object]:
        return {
            "term": self.term,
            "did_you_mean": [
                {"term": t, "distance": d, "chunks": n} for t, d, n in self.did_you_mean
            ],
        }


def max_edits(word: str) -> int:
    return 1 if len(word) <= 4 else 2


def checkable(word: str) -> bool:
    """Plain words only: a code (digits, joiners, sigils) is typed exactly or not at all, and a
    suggestion for 0x80070006 would be a guess at a different code."""
    return len(word) >= MIN_LENGTH and word.isalpha()


def osa_distance(a: str, b: str, limit: int) -> int:
    """Optimal string alignment distance (Levenshtein plus adjacent transpositions), or
    ``limit + 1`` as soon as it is certain to exceed ``limit``."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        cur = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            v = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                v = min(v, prev2[j - 2] + 1)
            cur[j] = v
        if min(cur) > limit:
            return limit + 1
        prev2, prev = prev, cur
    return prev[-1]


def near_terms(
    word: str, lookup: TermLookup, df: Callable[[int], int]
) -> dict[str, tuple[int, int]]:
    """Vocabulary terms within ``max_edits(word)`` of ``word`` sharing its first letter:
    term -> (distance, chunks holding it). ``df(row)`` gives a row's chunk count."""
    limit = max_edits(word)
    first = word[0].encode("utf-8")
    lo = lookup.lower_bound(first)
    hi = lookup.lower_bound(first[:-1] + bytes([first[-1] + 1]))
    if hi <= lo:
        return {}
    offsets = lookup.offsets[lo : hi + 1]
    lengths = np.diff(offsets)  # UTF-8 bytes; letters of a word are >= 1
    key = word.encode("utf-8")
    # A cheap lower bound first, on whole arrays: one edit of an ASCII word changes its length by
    # at most 1 byte and its byte histogram by at most 2 (a substitution), so a term further off
    # than that cannot be within limit. Bytes are folded into 32 buckets, which keeps the bound
    # valid (merging counts never increases the difference). A character outside ASCII is up to
    # 4 bytes, so for such words or terms one edit may move 4 bytes of length and 8 of histogram.
    data = lookup.blob[offsets[0] : offsets[-1]]
    owner = np.repeat(np.arange(hi - lo), lengths)
    hist = np.bincount(owner * 32 + (data % 32), minlength=(hi - lo) * 32).reshape(hi - lo, 32)
    raw = np.frombuffer(key, dtype=np.uint8)
    want = np.bincount(raw % 32, minlength=32)
    wide = np.bincount(owner, weights=data >= 0x80, minlength=hi - lo) > 0
    per_edit = np.where(wide | bool((raw >= 0x80).any()), 4, 1)
    close = (np.abs(lengths - len(key)) <= per_edit * limit) & (
        np.abs(hist - want).sum(axis=1) <= 2 * per_edit * limit
    )
    rows = lo + np.flatnonzero(close)
    out: dict[str, tuple[int, int]] = {}
    for row in rows.tolist():
        term = lookup.term(row)
        if term == word or not term.isalpha():
            continue
        d = osa_distance(word, term, limit)
        if d <= limit:
            out[term] = (d, df(row))
    return out


def best_suggestions(word: str, near: dict[str, tuple[int, int]]) -> Suggestion | None:
    best = sorted(near.items(), key=lambda kv: (kv[1][0], -kv[1][1], kv[0]))[:MAX_SUGGESTIONS]
    if not best:
        return None
    return Suggestion(word, tuple((t, d, n) for t, (d, n) in best))
