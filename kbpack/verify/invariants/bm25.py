"""Verify step 5, **BM25**: parameters, vocabulary, postings and document lengths for every chunk,
the common terms' dense rows against the postings (``bm25_dense.py``), and the postings of (a
sample of) chunks against their content re-tokenised.

Re-tokenising costs ~0.2 s per MB of text, so by default a random sample of chunks is
re-tokenised (``ExamState.bm25_sample``; every chunk in smaller packs or with --deep).
"""

from __future__ import annotations

import itertools
import secrets
from collections import Counter
from collections.abc import Callable
from typing import Any, Literal

import numpy as np

from kbpack.pack import format as F
from kbpack.text.analyze import ANALYZERS
from kbpack.verify.exam_state import MAX_ROWS_SHOWN
from kbpack.verify.invariants.bm25_dense import DenseRowInvariants


class Bm25Invariants(DenseRowInvariants):
    """Step 5 on the BM25 parameters, vocabulary and postings."""

    def _check_bm25(self) -> None:
        a = self.attrs.get(F.BM25)
        if a is not None:
            k1: Any = a.get(F.BM25_K1)
            b: Any = a.get(F.BM25_B)
            if not (_num(k1) and _num(b) and k1 > 0 and 0 <= b <= 1):
                self.add("bm25-params", F.BM25, f"k1={k1!r}, b={b!r}: need k1 > 0, 0 <= b <= 1")
            if a.get(F.BM25_TOKENIZER) != F.TOKENIZER_ID:
                self.add(
                    "bm25-tokenizer",
                    F.BM25,
                    f"tokenizer {a.get(F.BM25_TOKENIZER)!r} is not {F.TOKENIZER_ID}; "
                    "this kbpack cannot check the postings",
                )
                return
            fields = a.get(F.BM25_FIELDS)
            if fields is not None and fields != F.HEADER_CONTENT:
                self.add(
                    "bm25-tokenizer",
                    F.BM25,
                    f"fields {fields!r} is not {F.HEADER_CONTENT!r}; "
                    "this kbpack cannot check the postings",
                )
                return
            name = a.get(F.BM25_ANALYZER)
            if name is not None and name not in ANALYZERS:
                self.add(
                    "bm25-tokenizer",
                    F.BM25,
                    f"analyzer {name!r} is not one of {', '.join(ANALYZERS)}; "
                    "this kbpack cannot check or query the postings",
                )
                return
        blob, offsets = self._col(F.BM25_TERMS_BLOB), self._col(F.BM25_TERMS_OFFSETS)
        indptr, chunk, tf = self._col(F.BM25_INDPTR), self._col(F.BM25_CHUNK), self._col(F.BM25_TF)
        doc_len = self._col(F.BM25_DOC_LEN)
        if any(x is None for x in (blob, offsets, indptr, chunk, tf, doc_len)):
            return
        assert blob is not None and offsets is not None and indptr is not None
        assert chunk is not None and tf is not None and doc_len is not None
        terms = self._check_terms(blob, offsets.astype(np.int64))
        n_terms = len(offsets) - 1
        indptr = indptr.astype(np.int64)
        n_chunks = self.stats.get("chunks", len(doc_len))
        if len(indptr) != n_terms + 1 or len(chunk) != len(tf):
            self.add(
                "bm25-postings",
                F.BM25_INDPTR,
                f"{len(indptr)} indptr entries for {n_terms} terms, {len(chunk)} chunk ids, {len(tf)} tf",
            )
            return
        if len(indptr) == 0 or indptr[0] != 0 or indptr[-1] != len(chunk):
            self.add(
                "bm25-postings", F.BM25_INDPTR, "must start at 0 and end at the postings count"
            )
            return
        steps = np.diff(indptr)
        if self._rows(
            "bm25-postings",
            F.BM25_INDPTR,
            steps <= 0,
            lambda i: "a term with no postings (indptr must increase)",
        ):
            return
        if self._rows(
            "bm25-postings",
            F.BM25_CHUNK,
            (chunk < 0) | (chunk >= n_chunks),
            lambda i: f"chunk {int(chunk[i])} of {n_chunks}",
        ):
            return
        starts = np.zeros(len(chunk), dtype=bool)
        starts[indptr[:-1]] = True
        self._rows(
            "bm25-postings",
            F.BM25_CHUNK,
            np.r_[False, np.diff(chunk) <= 0] & ~starts if len(chunk) else starts,
            lambda i: "chunk ids must ascend within a term",
        )
        self._rows("bm25-postings", F.BM25_TF, tf < 1, lambda i: f"tf {int(tf[i])} < 1")
        if len(doc_len) != n_chunks:
            self.add(
                "bm25-doc-len", F.BM25_DOC_LEN, f"{len(doc_len)} lengths for {n_chunks} chunks"
            )
            return
        total = np.bincount(chunk, weights=tf, minlength=n_chunks).astype(np.int64)
        if self._rows(
            "bm25-doc-len",
            F.BM25_DOC_LEN,
            total != doc_len,
            lambda i: f"{int(doc_len[i])} tokens, but its postings sum to {int(total[i])}",
        ):
            return
        self._check_dense(indptr, chunk, tf, n_chunks)
        self._retokenise(terms, indptr, chunk, tf, doc_len)

    def _check_terms(self, blob: np.ndarray, offsets: np.ndarray) -> list[bytes] | None:
        path = F.BM25_TERMS_OFFSETS
        if len(offsets) == 0 or offsets[0] != 0 or offsets[-1] != len(blob):
            self.add("bm25-terms", path, f"offsets must run from 0 to {len(blob)}")
            return None
        if self._rows(
            "bm25-terms",
            path,
            np.r_[False, np.diff(offsets) <= 0],
            lambda i: "empty or decreasing term",
        ):
            return None
        data = blob.tobytes()
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as e:
            self.add("bm25-terms", F.BM25_TERMS_BLOB, f"not valid UTF-8 at byte {e.start}")
            return None
        cut = (blob[offsets[:-1]] & 0xC0) == 0x80
        if self._rows("bm25-terms", path, cut, lambda i: "starts inside a UTF-8 character"):
            return None
        off = offsets.tolist()
        terms = [data[off[i] : off[i + 1]] for i in range(len(off) - 1)]
        unsorted = np.array([a >= b for a, b in itertools.pairwise(terms)], dtype=bool)
        if self._rows(
            "bm25-terms",
            F.BM25_TERMS_BLOB,
            np.r_[False, unsorted],
            lambda i: f"term {terms[i]!r} is not after {terms[i - 1]!r}",
        ):
            return None
        self.stats["terms"] = len(terms)
        return terms

    def _retokenise(
        self,
        terms: list[bytes] | None,
        indptr: np.ndarray,
        chunk: np.ndarray,
        tf: np.ndarray,
        doc_len: np.ndarray,
    ) -> None:
        """Postings of (a sample of) chunks equal the tokenizer's counts of their content, and
        of their header first when ``/bm25`` says ``fields = "header+content"`` (spec 3.7)."""
        from kbpack.text.analyze import analyzer

        a = self.attrs.get(F.BM25) or {}
        name = a.get(F.BM25_ANALYZER)
        terms_of = analyzer(None if name is None else str(name)).terms
        with_headers = a.get(F.BM25_FIELDS) == F.HEADER_CONTENT
        # read the section columns only when needed: a content-only pack's mismatch alone
        headers: Callable[[int, int], str] | None = None
        if with_headers:
            found = self._headers()
            if found is False:
                return  # a section or title column is missing or refused: already a finding
            headers = found

        cols = self._same_length(F.CHUNKS, [F.CHUNK_DOCUMENT, F.CHUNK_FROM, F.CHUNK_TO])
        if terms is None or cols is None:
            return
        doc, start, end = cols
        n = len(doc)
        sample = _sample_chunks(n, self.bm25_sample)
        sel = _postings_of(sample, chunk, n)
        sel_chunk = chunk[sel]
        term_of = np.searchsorted(indptr, sel, side="right") - 1
        tf_of = tf[sel]
        first = np.searchsorted(sel_chunk, sample, side="left")
        last = np.searchsorted(sel_chunk, sample, side="right")
        bad: list[str] = []
        n_bad = 0
        # mismatches that the other reading of `fields` explains: the attribute is wrong
        n_other = 0
        for c, lo, hi in zip(sample.tolist(), first.tolist(), last.tolist(), strict=True):
            text = self._text(int(doc[c]))
            if text is None:
                continue
            content = terms_of(text[int(start[c]) : int(end[c])])
            tokens = content
            if headers is not None and with_headers:
                tokens = terms_of(headers(c, int(doc[c]))) + content
            stored = {
                terms[t].decode("utf-8"): f
                for t, f in zip(term_of[lo:hi].tolist(), tf_of[lo:hi].tolist(), strict=True)
            }
            counted = dict(Counter(tokens))
            if len(tokens) != doc_len[c] or stored != counted:
                n_bad += 1
                if headers is None:
                    found = self._headers()
                    headers = found if found is not False else (lambda _c, _d: "")
                other = content if with_headers else terms_of(headers(c, int(doc[c]))) + content
                n_other += (
                    other != tokens and len(other) == doc_len[c] and stored == dict(Counter(other))
                )
                if len(bad) < MAX_ROWS_SHOWN:
                    diff = sorted(set(stored.items()) ^ set(counted.items()))[:1]
                    bad.append(
                        f"chunk {c}: {len(tokens)} tokens (stored {int(doc_len[c])})"
                        + (f", term {diff[0][0]!r}" if diff else "")
                    )
        self.stats["bm25_retokenised"] = len(sample)
        if n_bad and n_other == n_bad:
            self.add(
                "bm25-fields",
                F.BM25,
                (
                    "fields says the postings count each chunk's header, but they count its "
                    "content only"
                    if with_headers
                    else f"the postings count each chunk's header, but fields "
                    f"{F.HEADER_CONTENT!r} is missing"
                )
                + f" ({n_bad} chunks; spec 3.7)",
            )
        elif n_bad:
            more = f" (and {n_bad - len(bad)} more)" if n_bad > len(bad) else ""
            self.add(
                "bm25-content-mismatch",
                F.BM25_CHUNK,
                "postings differ from the re-tokenised chunk content: " + "; ".join(bad) + more,
            )

    def _headers(self) -> Callable[[int, int], str] | Literal[False]:
        """Chunk row, document row -> the chunk's header (spec 3.4), from the stored titles,
        parents and levels; False when a column it needs is missing or refused."""
        from kbpack.index.chunk import header

        section = self._col(F.CHUNK_SECTION)
        cols = self._same_length(F.SECTIONS, [F.SEC_PARENT, F.SEC_LEVEL])
        titles, doc_titles = self._strs(F.SEC_TITLE), self._strs(F.DOC_TITLE)
        if section is None or cols is None or titles is None or doc_titles is None:
            return False
        parent, level = (c.tolist() for c in cols)
        n = len(titles)
        if len(parent) != n:
            return False

        def header_of(chunk: int, doc: int) -> str:
            path: list[str] = []
            s = int(section[chunk]) if chunk < len(section) else -1
            for _ in range(n):  # bounded: a malformed parent chain cannot loop
                if not 0 <= s < n or level[s] == 0:
                    break
                path.append(titles[s])
                s = parent[s]
            title = doc_titles[doc] if 0 <= doc < len(doc_titles) else ""
            return header(title, path[::-1])

        return header_of


def _sample_chunks(n: int, size: int | None) -> np.ndarray:
    """The chunk rows re-tokenised, ascending: every one of ``n``, or ``size`` of them at random
    (``size`` None: every chunk)."""
    if size is None or n <= size:
        return np.arange(n)
    rng = np.random.default_rng(secrets.randbits(64))
    return np.sort(rng.choice(n, size, replace=False))


def _postings_of(sample: np.ndarray, chunk: np.ndarray, n: int) -> np.ndarray:
    """The posting rows of the ``sample``'s chunks (of ``n``), grouped by chunk ascending."""
    if len(sample) == n:
        return np.argsort(chunk, kind="stable")  # every posting, grouped by chunk
    # only the sample's postings: no sort of all of them
    mark = np.zeros(n, dtype=bool)
    mark[sample] = True
    sel = np.flatnonzero(mark[chunk])
    return sel[np.argsort(chunk[sel], kind="stable")]


def _num(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and bool(np.isfinite(x))
