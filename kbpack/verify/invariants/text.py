"""Verify step 5, **invariants** of the text and its structure: documents, sections, pages,
chunks (offsets inside their document's canonical text, order, nesting). Works on values step 4
already read; the manifest's own checks are in ``manifest.py``.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter

import numpy as np

from kbpack.pack import format as F
from kbpack.verify.exam_state import ExamState


class Invariants(ExamState):
    """Step 5 on the documents, sections, pages and chunks."""

    # documents -----------------------------------------------------------------------------
    def _doc_chars(self) -> np.ndarray | None:
        if "doc_chars" in self.num:
            return self.num["doc_chars"]
        return None

    def _check_documents(self) -> None:
        names = self._strs(F.DOC_NAME)
        status = self._strs(F.DOC_STATUS)
        reasons = self._strs(F.DOC_REASON)
        texts = self.raw.get(F.DOC_TEXT)
        shas = self._strs(F.DOC_TEXT_SHA256)
        present = [c for c in (names, status, texts) if c is not None]
        n = len(present[0]) if present else None
        self.stats["documents"] = n or 0
        for path in (F.DOC_STATUS, F.DOC_REASON, F.DOC_TEXT, F.DOC_TEXT_SHA256):
            col = self.raw.get(path)
            if col is not None and n is not None and len(col) != n:
                self.add("column-lengths", path, f"{len(col)} rows, /documents/name has {n}")
                return
        if names is not None and len(set(names)) != len(names):
            dup = next(x for x, c in Counter(names).items() if c > 1)
            self.add("duplicate-name", F.DOC_NAME, f"{dup!r} appears more than once")
        if status is not None:
            st = np.array(status, dtype=object)
            self._rows(
                "status-invalid",
                F.DOC_STATUS,
                ~np.isin(st, F.STATUSES),
                lambda i: f"{status[i]!r} is not ok, failed or skipped",
            )
            if reasons is not None:
                no_reason = np.array(
                    [
                        s in ("failed", "skipped") and not r.strip()
                        for s, r in zip(status, reasons, strict=True)
                    ],
                    dtype=bool,
                )
                self._rows(
                    "failed-without-reason",
                    F.DOC_REASON,
                    no_reason,
                    lambda i: f"{names[i] if names else i} is {status[i]} but gives no reason",
                )
        if texts is not None:
            chars = np.zeros(len(texts), dtype=np.int64)
            bad_utf8 = np.zeros(len(texts), dtype=bool)
            bad_sha = np.zeros(len(texts), dtype=bool)
            for i, raw in enumerate(texts):
                try:
                    chars[i] = len(raw.decode("utf-8"))
                except UnicodeDecodeError:
                    bad_utf8[i] = True
                if shas is not None and hashlib.sha256(raw).hexdigest() != shas[i]:
                    bad_sha[i] = True
            self.num["doc_chars"] = chars
            self._rows("text-encoding", F.DOC_TEXT, bad_utf8, lambda i: "not valid UTF-8")
            self._rows(
                "text-digest-mismatch",
                F.DOC_TEXT_SHA256,
                bad_sha,
                lambda i: "SHA-256 of the canonical text differs from the stored one",
            )
        warnings = self._strs(F.DOC_WARNINGS)
        if warnings is not None:
            self._rows(
                "warnings-invalid",
                F.DOC_WARNINGS,
                np.array([not _json_str_list(w) for w in warnings], dtype=bool),
                lambda i: "not a JSON array of strings",
            )

    def _offsets(
        self, path: str, doc: np.ndarray, start: np.ndarray, end: np.ndarray, to_path: str
    ) -> np.ndarray:
        """Rows whose [from, to) is not inside their document's canonical text."""
        chars = self._doc_chars()
        n_docs = self.stats.get("documents", 0)
        bad_doc = (doc < 0) | (doc >= n_docs)
        self._rows(
            "reference-out-of-range",
            path,
            bad_doc,
            lambda i: f"document {int(doc[i])} of {n_docs}",
        )
        if chars is None or len(chars) != n_docs:
            return bad_doc
        limit = np.where(bad_doc, 0, chars[np.clip(doc, 0, max(n_docs - 1, 0))]) if n_docs else doc
        bad = ~bad_doc & ((start < 0) | (start > end) | (end > limit))
        self._rows(
            "offset-out-of-range",
            to_path,
            bad,
            lambda i: f"[{int(start[i])}, {int(end[i])}) not inside [0, {int(limit[i])}]",
        )
        return bad_doc | bad

    # sections ------------------------------------------------------------------------------
    def _check_sections(self) -> None:
        cols = self._same_length(
            F.SECTIONS, [F.SEC_DOCUMENT, F.SEC_PARENT, F.SEC_LEVEL, F.SEC_FROM, F.SEC_TO]
        )
        if cols is None:
            return
        doc, parent, level, start, end = (c.astype(np.int64) for c in cols)
        n = len(doc)
        bad = self._offsets(F.SECTIONS, doc, start, end, F.SEC_TO)
        self._rows(
            "section-order",
            F.SEC_DOCUMENT,
            np.r_[False, np.diff(doc) < 0] if n else np.zeros(0, bool),
            lambda i: f"document {int(doc[i])} after {int(doc[i - 1])}",
        )
        rows = np.arange(n)
        root = parent == -1
        bad_parent = ~root & ((parent < 0) | (parent >= rows))
        self._rows(
            "section-parent",
            F.SEC_PARENT,
            bad_parent,
            lambda i: f"parent {int(parent[i])} must be -1 or an earlier row",
        )
        p = np.where(root | bad_parent, 0, parent)
        ok = ~root & ~bad_parent & ~bad
        if n:
            ok &= ~bad[p]
        self._rows(
            "section-parent",
            F.SEC_PARENT,
            ok & (doc[p] != doc),
            lambda i: f"parent {int(parent[i])} belongs to another document",
        )
        ok &= doc[p] == doc
        self._rows(
            "section-nesting",
            F.SEC_FROM,
            ok & ((start < start[p]) | (end > end[p])),
            lambda i: (
                f"[{int(start[i])}, {int(end[i])}) is outside its parent "
                f"[{int(start[p[i]])}, {int(end[p[i]])})"
            ),
        )
        self._rows(
            "section-level",
            F.SEC_LEVEL,
            (root & (level != 0))
            | (~root & ((level < 1) | (level > 9)))
            | (ok & (level <= level[p])),
            lambda i: f"level {int(level[i])} (root 0, headings 1..9 below their parent)",
        )
        n_docs = self.stats.get("documents", 0)
        good_doc = (doc >= 0) & (doc < n_docs)
        roots = np.bincount(doc[root & good_doc], minlength=n_docs)
        self._rows(
            "section-root",
            F.SEC_PARENT,
            roots != 1,
            lambda i: f"document {i} has {int(roots[i])} root sections, needs exactly 1",
        )
        first = np.r_[True, doc[1:] != doc[:-1]] if n else np.zeros(0, bool)
        self._rows(
            "section-root",
            F.SEC_PARENT,
            first & ~root,
            lambda i: f"the first section of document {int(doc[i])} is not its root",
        )
        self.stats["sections"] = n

    # pages ---------------------------------------------------------------------------------
    def _check_pages(self) -> None:
        cols = self._same_length(F.PAGES, [F.PAGE_DOCUMENT, F.PAGE_NUMBER, F.PAGE_FROM, F.PAGE_TO])
        if cols is None:
            return
        doc, number, start, end = (c.astype(np.int64) for c in cols)
        self._offsets(F.PAGES, doc, start, end, F.PAGE_TO)
        self._rows("page-number", F.PAGE_NUMBER, number < 1, lambda i: f"{int(number[i])} < 1")
        if len(doc) > 1:
            same = doc[1:] == doc[:-1]
            bad = np.r_[
                False,
                (doc[1:] < doc[:-1])
                | (same & ((number[1:] <= number[:-1]) | (start[1:] < end[:-1]))),
            ]
            self._rows(
                "page-order",
                F.PAGE_NUMBER,
                bad,
                lambda i: (
                    f"page {int(number[i])} [{int(start[i])}, {int(end[i])}) after page "
                    f"{int(number[i - 1])} [{int(start[i - 1])}, {int(end[i - 1])})"
                ),
            )

    # chunks --------------------------------------------------------------------------------
    def _check_chunks(self) -> None:
        cols = self._same_length(
            F.CHUNKS,
            [
                F.CHUNK_DOCUMENT,
                F.CHUNK_SECTION,
                F.CHUNK_FROM,
                F.CHUNK_TO,
                F.CHUNK_PAGE,
                F.CHUNK_TOKENS,
            ],
        )
        if cols is None:
            return
        doc, sec, start, end, page, tokens = (c.astype(np.int64) for c in cols)
        n = len(doc)
        self.stats["chunks"] = n
        bad = self._offsets(F.CHUNKS, doc, start, end, F.CHUNK_TO)
        if n > 1:
            order = (doc[1:] < doc[:-1]) | ((doc[1:] == doc[:-1]) & (start[1:] < start[:-1]))
            self._rows(
                "chunk-order",
                F.CHUNK_FROM,
                np.r_[False, order],
                lambda i: (
                    f"starts at {int(start[i])}, before the chunk above ({int(start[i - 1])})"
                ),
            )
        self._rows("chunk-tokens", F.CHUNK_TOKENS, tokens < 0, lambda i: f"{int(tokens[i])} < 0")
        status = self._strs(F.DOC_STATUS)
        n_docs = self.stats.get("documents", 0)
        if status is not None and len(status) == n_docs and n_docs:
            not_ok = np.array([s != "ok" for s in status], dtype=bool)
            d = np.clip(doc, 0, n_docs - 1)
            self._rows(
                "chunk-of-failed-document",
                F.CHUNK_DOCUMENT,
                ~bad & not_ok[d],
                lambda i: f"document {int(doc[i])} is {status[int(doc[i])]}",
            )
        sec_cols = self._same_length(F.SECTIONS, [F.SEC_DOCUMENT, F.SEC_FROM, F.SEC_TO])
        if sec_cols is not None:
            s_doc, s_from, s_to = (c.astype(np.int64) for c in sec_cols)
            m = len(s_doc)
            out = (sec < 0) | (sec >= m)
            self._rows(
                "chunk-section", F.CHUNK_SECTION, out, lambda i: f"section {int(sec[i])} of {m}"
            )
            s = np.where(out, 0, sec)
            ok = ~out & ~bad
            if m:
                self._rows(
                    "chunk-section",
                    F.CHUNK_SECTION,
                    ok & ((s_doc[s] != doc) | (start < s_from[s]) | (end > s_to[s])),
                    lambda i: (
                        f"[{int(start[i])}, {int(end[i])}) of document {int(doc[i])} is not "
                        f"inside section {int(sec[i])}"
                    ),
                )
        page_cols = self._same_length(F.PAGES, [F.PAGE_DOCUMENT, F.PAGE_NUMBER])
        if page_cols is not None:
            p_doc, p_num = (c.astype(np.int64) for c in page_cols)
            paged = np.isin(doc, p_doc)
            known = np.isin(doc * 2**32 + page, p_doc * 2**32 + p_num)
            self._rows(
                "chunk-page",
                F.CHUNK_PAGE,
                ~bad & np.where(paged, ~known, page != 0),
                lambda i: f"page {int(page[i])} is not a page of document {int(doc[i])}",
            )


def _json_str_list(s: str) -> bool:
    try:
        v = json.loads(s)
    except ValueError:
        return False
    return isinstance(v, list) and all(isinstance(x, str) for x in v)
