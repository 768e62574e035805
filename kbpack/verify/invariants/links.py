"""Verify step 5, **links** (spec/FORMAT.md §3.12): the count in the manifest exactly when the
group is there; rows ordered by (document, from) and apart; each link's text a non-empty range
of its document's canonical text that neither starts nor ends with white space; each target an
``ok`` document of the pack and each target offset inside that document's text. A reader
follows a link to ``target_offset`` of ``target``: a wrong one would open another place."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kbpack.pack import format as F
from kbpack.verify.exam_state import ExamState

_COLUMNS = [F.LINK_DOCUMENT, F.LINK_FROM, F.LINK_TO, F.LINK_TARGET, F.LINK_TARGET_OFFSET]


class LinkInvariants(ExamState):
    """Step 5 on ``/links``."""

    def _check_links(self) -> None:
        if not self._optional_group(F.LINKS, "links", "links"):
            return
        cols = self._same_length(F.LINKS, _COLUMNS)
        anchors = self.raw.get(F.LINK_ANCHOR)
        if cols is None:
            return
        doc, start, end, target, offset = (c.astype(np.int64) for c in cols)
        if anchors is not None and len(anchors) != len(doc):
            self.add("column-lengths", F.LINKS, f"anchor has {len(anchors)} rows, not {len(doc)}")
        self.stats["links"] = len(doc)
        status = self._strs(F.DOC_STATUS)
        if status is None:
            return
        n = len(status)
        for path, col in ((F.LINK_DOCUMENT, doc), (F.LINK_TARGET, target)):
            out = (col < 0) | (col >= n)
            if self._rows("link-document", path, out, _out_of(col, n)):
                return
        not_ok = np.array([status[int(t)] != "ok" for t in target], dtype=bool)
        self._rows(
            "link-target",
            F.LINK_TARGET,
            not_ok,
            lambda i: f"document {target[i]} is {status[int(target[i])]}, not ok",
        )
        prev_doc = np.concatenate([[-1], doc[:-1]])
        prev_end = np.concatenate([[0], end[:-1]])
        disorder = (doc < prev_doc) | ((doc == prev_doc) & (start < prev_end))
        self._rows(
            "link-order",
            F.LINK_FROM,
            disorder,
            lambda i: f"document {doc[i]} [{start[i]}, {end[i]}) is not after the row before",
        )
        lengths = {int(d): self._length(int(d)) for d in np.unique(np.concatenate([doc, target]))}
        bad_mask = np.zeros(len(doc), dtype=bool)
        far = np.zeros(len(doc), dtype=bool)
        for i in range(len(doc)):
            text = self._text(int(doc[i]))
            size = lengths[int(doc[i])]
            a, b = int(start[i]), int(end[i])
            if size is None or text is None:
                continue
            if not 0 <= a < b <= size or text[a].isspace() or text[b - 1].isspace():
                bad_mask[i] = True
            t_size = lengths[int(target[i])]
            if t_size is not None and not 0 <= int(offset[i]) <= t_size:
                far[i] = True
        self._rows(
            "link-range",
            F.LINK_FROM,
            bad_mask,
            lambda i: (
                f"[{start[i]}, {end[i]}) of document {doc[i]} is outside its text or starts "
                "or ends with white space"
            ),
        )
        self._rows(
            "link-target",
            F.LINK_TARGET_OFFSET,
            far,
            lambda i: f"offset {offset[i]} is outside the text of document {target[i]}",
        )

    def _length(self, doc: int) -> int | None:
        text = self._text(doc)
        return None if text is None else len(text)


def _out_of(col: np.ndarray, n: int) -> Callable[[int], str]:
    return lambda i: f"document {col[i]} of {n}"
