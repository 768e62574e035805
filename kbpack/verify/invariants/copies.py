"""Verify step 5, **copies** (spec/FORMAT.md §3.10): the count in the manifest exactly when the
group is there; chunk rows in range, each in at most one group; groups numbered 0, 1, ... with
at least two members, chunks ascending within a group; ``exact`` says the truth: 1 exactly when
a member's normalised words equal those of its group's first chunk (re-computed here with
``kbpack.pack.copies.normal_words``). Near copies are the builder's judgement and are not re-judged."""

from __future__ import annotations

import numpy as np

from kbpack.pack import format as F
from kbpack.pack.copies import exact_key, normal_words
from kbpack.verify.exam_state import ExamState


class CopyInvariants(ExamState):
    """Step 5 on ``/copies``."""

    def _check_copies(self) -> None:
        if not self._optional_group(F.COPIES, "copies", "copies"):
            return
        cols = self._same_length(F.COPIES, [F.COPY_GROUP, F.COPY_CHUNK, F.COPY_EXACT])
        if cols is None:
            return
        group, chunk, exact = (c.astype(np.int64) for c in cols)
        self.stats["copies"] = len(chunk)
        c_cols = self._same_length(F.CHUNKS, [F.CHUNK_DOCUMENT, F.CHUNK_FROM, F.CHUNK_TO])
        if c_cols is None:
            return
        m = len(c_cols[0])
        out = (chunk < 0) | (chunk >= m)
        if self._rows("copy-chunk", F.COPY_CHUNK, out, lambda i: f"chunk {chunk[i]} of {m}"):
            return
        _, first_at, counts = np.unique(chunk, return_index=True, return_counts=True)
        again = np.ones(len(chunk), dtype=bool)
        again[first_at[counts == 1]] = False
        again[first_at] &= counts > 1  # the first of a repeated chunk is not flagged itself
        self._rows("copy-chunk", F.COPY_CHUNK, again, lambda i: f"chunk {chunk[i]} in two rows")
        if self._check_group_order(group, chunk):
            return
        self._check_exact(group, chunk, exact, c_cols)

    def _check_group_order(self, group: np.ndarray, chunk: np.ndarray) -> bool:
        """Groups 0, 1, ... without gaps, chunks ascending inside, two members or more.
        True when the layout is broken (the exactness check needs it whole)."""
        if not len(group):
            return False
        step = np.diff(group, prepend=-1)
        bad = (step < 0) | (step > 1) | ((step == 0) & (np.diff(chunk, prepend=-1) <= 0))
        if self._rows(
            "copy-order",
            F.COPY_GROUP,
            bad,
            lambda i: (
                f"group {group[i]}, chunk {chunk[i]} after group {group[i - 1]}, chunk "
                f"{chunk[i - 1]}"
                if i
                else f"the first row is group {group[i]}, not 0"
            ),
        ):
            return True
        sizes = np.bincount(group)
        return self._rows(
            "copy-order",
            F.COPY_GROUP,
            sizes[group] < 2,
            lambda i: f"group {group[i]} has one member (a group has at least two)",
        )

    def _check_exact(
        self, group: np.ndarray, chunk: np.ndarray, exact: np.ndarray, c_cols: list[np.ndarray]
    ) -> None:
        c_doc, c_from, c_to = (c.astype(np.int64) for c in c_cols)

        def key(c: int) -> bytes | None:
            text = self._text(int(c_doc[c]))
            if text is None or not 0 <= c_from[c] <= c_to[c] <= len(text):
                return None  # the chunk checks report it
            words = normal_words(text[c_from[c] : c_to[c]])
            return exact_key(words) if words else b""

        keys = [key(int(c)) for c in chunk]
        first = np.flatnonzero(np.diff(group, prepend=-1))
        lead = first[np.searchsorted(first, np.arange(len(group)), side="right") - 1]
        wrong = np.zeros(len(chunk), dtype=bool)
        for i, k in enumerate(keys):
            if k is None or keys[lead[i]] is None:
                continue
            wrong[i] = k == b"" or exact[i] != int(k == keys[lead[i]])

        def what(i: int) -> str:
            if keys[i] == b"":
                return f"chunk {chunk[i]} has no words: it is nobody's copy"
            same = "equal" if keys[i] == keys[lead[i]] else "differ from"
            return (
                f"chunk {chunk[i]}: exact is {exact[i]}, but its normalised words {same} "
                f"those of chunk {chunk[lead[i]]}, the group's first"
            )

        self._rows("copy-exact", F.COPY_EXACT, wrong, what)
