"""Verify step 5, **row digests** (spec/FORMAT.md §3.11): the four columns come together, and
each row's stored digest is that of its string row (re-computed from the bytes read in step 4).
A reader trusts a row digest instead of the whole column's digest, so a wrong one would make a
damaged title pass (or a sound one fail) in every query."""

from __future__ import annotations

from collections.abc import Callable

from kbpack.pack import format as F
from kbpack.pack.digest import row_digests
from kbpack.verify.exam_state import ExamState


class RowDigestInvariants(ExamState):
    """Step 5 on ``/row_digests``."""

    def _check_row_digests(self) -> None:
        held = [p for p in F.ROW_DIGEST_OF.values() if p in self.readable]
        if not held:
            return
        if len(held) != len(F.ROW_DIGEST_OF):
            missing = sorted(set(F.ROW_DIGEST_OF.values()) - set(held))
            self.add("row-digests", F.ROW_DIGESTS, f"incomplete: {', '.join(missing)} missing")
        for column, path in F.ROW_DIGEST_OF.items():
            stored, raw = self._col(path), self.raw.get(column)
            if stored is None or raw is None:
                continue
            if len(stored) != len(raw):
                self.add("row-digests", path, f"{len(stored)} rows, {column} has {len(raw)}")
                continue
            wrong = stored != row_digests(raw)
            self._rows("row-digests", path, wrong, _not_the_digest_of(column))


def _not_the_digest_of(column: str) -> Callable[[int], str]:
    return lambda _row: f"not the digest of {column}'s row"
