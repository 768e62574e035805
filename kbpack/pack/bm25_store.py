"""How BM25 postings are laid out in a pack and looked up there (spec §3.7, §3.7.1): the
BM25 parameters written, the sorted-term lookup and the dense rows of common terms.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import numpy as np

K1 = 1.2

B = 0.75

_STRIDE = 32  # TermLookup: one sampled term per 32

# Lookups answered by a plain binary search before the sampled index is made (TermLookup).
_PLAIN_LOOKUPS = 48

# A term held in at least 1/DENSE_SHARE of the chunks (and never more than MAX_DENSE_TF times in
# one) is also stored as a dense tf row (spec §3.7.1): at 100k chunks 97 terms, 9.7 MB, and
# ~90% of a question's postings (bench/RESULTS.md, "First query of a process").
DENSE_SHARE = 8

MAX_DENSE_TF = 255


def dense_terms(indptr: np.ndarray, tf: np.ndarray, n_chunks: int) -> np.ndarray:
    """Vocabulary rows (ascending, int32) of the terms stored as dense rows: held in at least
    1/``DENSE_SHARE`` of the ``n_chunks`` chunks, with every tf <= ``MAX_DENSE_TF``."""
    indptr = np.asarray(indptr, dtype=np.int64)
    df = np.diff(indptr)
    common = np.flatnonzero((df > 0) & (df * DENSE_SHARE >= n_chunks))
    if not len(common):
        return common.astype(np.int32)
    most = np.array([int(np.max(tf[indptr[t] : indptr[t + 1]])) for t in common.tolist()])
    return common[most <= MAX_DENSE_TF].astype(np.int32)


def dense_rows(
    indptr: np.ndarray, chunk: np.ndarray, tf: np.ndarray, n_chunks: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, tf)`` of ``/bm25/dense_terms`` and ``/bm25/dense_tf``: the terms of
    ``dense_terms`` and, for the j-th of them, its tf in chunk c at ``j * n_chunks + c``
    (0 where it is absent), uint8."""
    rows = dense_terms(indptr, tf, n_chunks)
    out = np.zeros(len(rows) * n_chunks, dtype=np.uint8)
    for j, t in enumerate(rows.tolist()):
        lo, hi = int(indptr[t]), int(indptr[t + 1])
        out[j * n_chunks + np.asarray(chunk[lo:hi], dtype=np.int64)] = tf[lo:hi]
    return rows, out


class TermLookup:
    """Term -> row number by binary search over a UTF-8 blob, without a Python list of terms.

    ``blob`` holds the terms' UTF-8 bytes back to back in ascending byte order; term ``i`` is
    ``blob[offsets[i]:offsets[i+1]]``. This is exactly what a pack stores.
    """

    def __init__(self, blob: np.ndarray, offsets: np.ndarray) -> None:
        self.blob = np.asarray(blob, dtype=np.uint8)
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self._bytes = self.blob.tobytes()
        self._sample: list[bytes] | None = None  # made on the _PLAIN_LOOKUPS-th lookup
        self._lookups = 0

    def _sampled(self) -> list[bytes]:
        """Every 32nd term as bytes: bisect (in C) picks the bucket, then <= 5 probes inside it.
        Making it costs ~0.5 ms at 60k terms, ~50 plain binary searches: a query of one
        process looks up ~15 terms, a batch or the spelling suggestions thousands."""
        if self._sample is None:
            starts = self.offsets[:-1:_STRIDE].tolist()
            ends = self.offsets[1::_STRIDE].tolist()
            self._sample = [self._bytes[a:b] for a, b in zip(starts, ends, strict=True)]
        return self._sample

    @classmethod
    def from_terms(cls, terms: Sequence[str]) -> TermLookup:
        """Build from terms already in ascending order (their index is their postings row)."""
        encoded = [t.encode("utf-8") for t in terms]
        for i in range(1, len(encoded)):
            if encoded[i - 1] >= encoded[i]:
                raise ValueError(
                    f"terms must be unique and sorted: {terms[i - 1]!r} >= {terms[i]!r}"
                )
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(e) for e in encoded], out=offsets[1:])
        blob = np.frombuffer(b"".join(encoded), dtype=np.uint8)
        return cls(blob, offsets)

    def __len__(self) -> int:
        return max(0, len(self.offsets) - 1)

    def term(self, row: int) -> str:
        a, b = self.offsets[row : row + 2].tolist()
        return self._bytes[a:b].decode("utf-8")

    def lower_bound(self, key: bytes) -> int:
        """The first row whose term is >= ``key`` (UTF-8 bytes); ``len(self)`` if none is.
        Terms starting with a prefix ``p`` are the rows ``lower_bound(p)`` up to the
        ``lower_bound`` of ``p`` with its last byte incremented."""
        self._lookups += 1
        if self._sample is None and self._lookups <= _PLAIN_LOOKUPS:
            return self._plain_lower_bound(key)
        k = bisect.bisect_left(self._sampled(), key) - 1
        if k < 0:
            return 0
        first = k * _STRIDE
        off = self.offsets[first : first + _STRIDE + 1].tolist()
        data = self._bytes
        lo, hi = 0, len(off) - 1
        while lo < hi:
            mid = (lo + hi) // 2
            if data[off[mid] : off[mid + 1]] < key:
                lo = mid + 1
            else:
                hi = mid
        return first + lo

    def _plain_lower_bound(self, key: bytes) -> int:
        """``lower_bound`` by a binary search over every term (~10 us at 60k terms)."""
        off, data = self.offsets, self._bytes
        lo, hi = 0, len(self)
        while lo < hi:
            mid = (lo + hi) // 2
            if data[int(off[mid]) : int(off[mid + 1])] < key:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def find(self, term: str) -> int | None:
        """Row of ``term`` (already tokenized), or None when no chunk contains it."""
        key = term.encode("utf-8")
        row = self.lower_bound(key)
        if row < len(self):
            a, b = self.offsets[row : row + 2].tolist()
            if self._bytes[a:b] == key:
                return row
        return None

    def problems(self) -> list[str]:
        """Structural defects (for verify): offsets out of order or range, bad UTF-8, terms not
        strictly ascending. Empty when the lookup is sound."""
        out: list[str] = []
        off = self.offsets
        if len(off) == 0 or off[0] != 0:
            return ["offsets must start at 0"]
        if np.any(np.diff(off) < 0):
            return ["offsets must not decrease"]
        if off[-1] != len(self._bytes):
            return [f"offsets end at {int(off[-1])} but the blob holds {len(self._bytes)} bytes"]
        prev: bytes | None = None
        offsets = off.tolist()
        for i in range(len(self)):
            cur = self._bytes[offsets[i] : offsets[i + 1]]
            try:
                cur.decode("utf-8")
            except UnicodeDecodeError:
                out.append(f"term {i} is not valid UTF-8")
            if prev is not None and prev >= cur:
                out.append(f"term {i} is not greater than term {i - 1}")
            prev = cur
            if len(out) >= 10:
                break
        return out
