"""BM25 scoring at query time: a query's postings read from the pack, scored, summed.

Postings are stored CSC-style with raw term frequencies and per-chunk lengths, never baked
scores, so chunks can be added or removed later and k1/b changed without re-indexing.

BM25 (Robertson/Sparck Jones, Lucene's idf)::

    idf(t)      = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))          # always > 0
    score(q, c) = sum over DISTINCT terms t of tokenize(q) present in c of
                  idf(t) * tf(t,c) * (k1 + 1) / (tf(t,c) + k1 * (1 - b + b * len(c) / avglen))

N is the number of chunks (empty ones included), df(t) the number of chunks containing t,
tf(t,c) the raw count of t in tokenize(content of c), len(c) = len(tokenize(content of c)) and
avglen the mean of len over all N chunks. A term repeated in the query counts once.
Defaults k1 = 1.2, b = 0.75.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kbpack.pack.bm25_store import K1, B, TermLookup
from kbpack.search.bm25_top import DenseTerm, Term, TermList, summed, top_k_exact
from kbpack.search.bm25_top import (
    top_k as top_k,  # kept importable from here, where it used to live
)
from kbpack.text.analyze import query_terms

_MEMO_TERMS = 100_000  # BM25Index: query terms remembered


def length_norms(
    doc_len: np.ndarray, k1: float = K1, b: float = B, avg_len: float | None = None
) -> np.ndarray:
    """``k1 * (1 - b + b * len(c) / avglen)`` for every chunk: the part of BM25 that depends on
    the chunk alone. Compute it once per pack and pass it to ``bm25_scores(norms=...)``."""
    dl = np.asarray(doc_len, dtype=np.float64)
    avg = float(dl.mean()) if avg_len is None and len(dl) else (avg_len or 0.0)
    if avg <= 0:
        return np.full(len(dl), k1, dtype=np.float64)
    return k1 * (1.0 - b + (b / avg) * dl)


def _empty() -> tuple[np.ndarray, np.ndarray]:
    return np.zeros(0, dtype=np.intp), np.zeros(0, dtype=np.float64)


def _bounds(rows: list[int], indptr: Any) -> list[tuple[int, int]]:
    if isinstance(indptr, np.ndarray):
        r = np.asarray(rows, dtype=np.int64)
        return list(zip(indptr[r].tolist(), indptr[r + 1].tolist(), strict=True))
    return [tuple(int(x) for x in indptr[r : r + 2]) for r in rows]  # type: ignore[misc]


def idf_weights(df: np.ndarray, n: int, k1: float) -> np.ndarray:
    """``idf(t) * (k1 + 1)`` for each document frequency: the factor of every posting of a term.

    Always computed over an array, by this one function, so that a term's weight is the same
    float whether one query reads its postings or ``BM25Index`` bakes them all (numpy's array
    ``log1p`` and Python's ``math.log1p`` may differ in the last bit)."""
    df = np.asarray(df, dtype=np.float64)
    return np.log1p((n - df + 0.5) / (df + 0.5)) * (k1 + 1.0)


def term_scores(
    lo: int,
    hi: int,
    chunk: Any,
    tf: Any,
    n: int,
    norms: np.ndarray,
    k1: float,
    df: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """One term's contribution to each chunk in its postings: (chunk ids, scores).

    ``n`` and ``df`` are collection figures: for several packs searched as one they are the
    sums over the packs (``df`` defaults to this postings list's length)."""
    if hi <= lo:
        return _empty()
    ids = np.asarray(chunk[lo:hi])
    raw = np.asarray(tf[lo:hi])
    _check_counts(raw, tf)
    f = raw.astype(np.float64)
    df = hi - lo if df is None else df
    weight = idf_weights(np.array([df]), n, k1)[0]
    # weight * f / (f + norm), in place: the same float operations as BM25Index's (so the same
    # bits), without three temporaries the size of the postings
    den = norms[ids]
    den += f
    f *= weight
    f /= den
    return ids, f


def accumulate(parts: list[tuple[np.ndarray, np.ndarray]], n: int) -> tuple[np.ndarray, np.ndarray]:
    """Sum per-term contributions per chunk; ids come back ascending.

    Each chunk's contributions are added one by one in the order of ``parts`` (the query's term
    order), from 0.0: the canonical score of ``kbpack.bm25_top``, equal to the last bit
    (``np.add.reduceat`` would not be: it adds pairwise)."""
    parts = [p for p in parts if len(p[0])]
    if not parts:
        return _empty()
    if len(parts) == 1:
        return parts[0][0].astype(np.intp), parts[0][1].copy()  # one term: unique, ascending
    if sum(len(p[0]) for p in parts) * 4 > n:
        # Postings cover much of the collection: a dense accumulator beats sorting them.
        acc = summed([TermList(*p) for p in parts], n)
        hit = np.flatnonzero(acc)  # contributions are > 0
        return hit, acc[hit]
    ids = np.concatenate([p[0] for p in parts])
    order = np.argsort(ids, kind="stable")  # stable: each chunk's terms stay in query order
    ids = ids[order]
    first = np.concatenate(([True], ids[1:] != ids[:-1]))
    group = np.cumsum(first) - 1
    weights = np.concatenate([p[1] for p in parts])[order]
    return ids[first].astype(np.intp), np.bincount(group, weights, minlength=int(first.sum()))


def read_term_lists(
    query: str,
    lookup: TermLookup,
    indptr: Any,
    chunk: Any,
    tf: Any,
    norms: np.ndarray,
    k1: float = K1,
    analyzer_name: str | None = None,
    dense: tuple[np.ndarray, Any] | None = None,
) -> list[Term]:
    """The query's terms held by some chunk, in the query's order, each as a ``TermList``
    (contributions computed from the raw counts). ``indptr``, ``chunk`` and ``tf`` may be numpy
    arrays or h5py datasets: only the slices of the query's terms are read. ``norms`` is
    ``length_norms(doc_len, k1, b)``, one per chunk.

    ``dense``: a pack's ``(/bm25/dense_terms, /bm25/dense_tf)``; the query's terms found there
    are read as ``DenseTerm`` rows (n bytes each, uncompressed) instead of their postings, with
    the same contributions to the bit."""
    n = len(norms)
    rows = [r for r in (lookup.find(t) for t in query_terms(query, analyzer_name)) if r is not None]
    if not rows or n == 0:
        return []
    spans = _bounds(rows, indptr)
    out: list[Term | None] = [None] * len(rows)
    if dense is not None:
        held, rows_tf = dense
        pos = np.searchsorted(held, rows)
        at = [i for i, p in enumerate(pos.tolist()) if p < len(held) and held[p] == rows[i]]
        if at:
            got = _read(rows_tf, [(int(pos[i]) * n, (int(pos[i]) + 1) * n) for i in at])
            for i, row in zip(at, got, strict=True):
                # one df per call, as term_scores computes it (the same bits)
                weight = idf_weights(np.array([spans[i][1] - spans[i][0]]), n, k1)[0]
                out[i] = DenseTerm(row, weight, norms)
    todo = [i for i in range(len(rows)) if out[i] is None]
    some = [spans[i] for i in todo]
    if hasattr(chunk, "read_spans") and hasattr(tf, "read_spans"):
        # a pack's datasets (kbpack.pack.read.CheckedDataset): every span in one read each
        ids, counts = chunk.read_spans(some), tf.read_spans(some)
        _check_chunk_rows(ids, n, chunk)
        for c in counts:
            _check_counts(c, tf)
        lists = [
            TermList(*term_scores(0, len(i), i, c, n, norms, k1))
            for i, c in zip(ids, counts, strict=True)
        ]
    else:
        lists = [TermList(*term_scores(lo, hi, chunk, tf, n, norms, k1)) for lo, hi in some]
    for i, term in zip(todo, lists, strict=True):
        out[i] = term
    return [t for t in out if t is not None]


def _read(ds: Any, spans: list[tuple[int, int]]) -> list[np.ndarray]:
    """Rows ``lo:hi`` of ``ds`` for each span: one HDF5 read for a pack's dataset."""
    if hasattr(ds, "read_spans"):
        parts: list[np.ndarray] = ds.read_spans(spans)
        return parts
    return [np.asarray(ds[lo:hi]) for lo, hi in spans]


def bm25_scores(
    query: str,
    lookup: TermLookup,
    indptr: Any,
    chunk: Any,
    tf: Any,
    doc_len: np.ndarray,
    k1: float = K1,
    b: float = B,
    avg_len: float | None = None,
    norms: np.ndarray | None = None,
    analyzer_name: str | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """BM25 scores of every chunk that shares a term with ``query``: the reference path.

    Returns ``(chunk ids ascending, float64 scores > 0)``. ``indptr``, ``chunk`` and ``tf`` may
    be numpy arrays or h5py datasets: only the slices of the query's terms are read. Passing
    ``norms = length_norms(doc_len, k1, b)`` (same k1 and b) saves recomputing them per query.
    For the best k alone, ``top_k_exact`` over ``read_term_lists`` is faster and equal; for
    many queries on one pack, ``BM25Index``.
    """
    if norms is None:
        norms = length_norms(doc_len, k1, b, avg_len)
    terms = read_term_lists(query, lookup, indptr, chunk, tf, norms, k1, analyzer_name)
    return accumulate([(t.ids, t.contrib) for t in terms], len(norms))


class BM25Index:
    """A pack's BM25 postings held in memory for many queries (batch mode, the Python API).

    At construction every posting's contribution ``idf * tf * (k1 + 1) / (tf + norm)`` is
    computed once from the stored raw counts (12 bytes per posting in memory: an int32 chunk id
    and a float64 score), so a query only sums slices, as engines with baked scores do. Scores
    equal ``bm25_scores`` to the last bit.

    A term held by half the chunks or more (in English text the stopwords: "the", "is", "of")
    is also kept, once a query uses it, as a dense row of its contributions (``TermList.row``):
    a dense add of n floats costs a third of a scatter-add of n/2 postings, and the row (8n
    bytes) is at most 4/3 of the postings it mirrors (12 bytes each). At 100k chunks this
    halved the sums of a question (bench/RESULTS.md, "BM25").
    """

    def __init__(
        self,
        lookup: TermLookup,
        indptr: Any,
        chunk: Any,
        tf: Any,
        doc_len: np.ndarray,
        k1: float = K1,
        b: float = B,
        analyzer_name: str | None = None,
    ) -> None:
        self.lookup = lookup
        self.analyzer_name = analyzer_name
        self.n = len(doc_len)
        self.indptr = np.asarray(indptr[:], dtype=np.int64)
        self.chunk = np.asarray(chunk[:], dtype=np.int32)
        df = np.diff(self.indptr)
        weight = idf_weights(df, self.n, k1)
        raw = np.asarray(tf[:])
        _check_counts(raw, tf)
        f = raw.astype(np.float64)
        norms = length_norms(doc_len, k1, b)
        self.contrib = np.repeat(weight, df) * f / (f + norms[self.chunk])
        self._rows: dict[str, int | None] = {}
        self._dense_df = max(1, (self.n + 1) // 2)  # a term this common gets a dense row
        self._dense: dict[int, np.ndarray] = {}

    def term_lists(self, query: str) -> list[TermList]:
        """The query's terms held by some chunk, in the query's order (slices, no copies)."""
        rows = [r for r in map(self._row, query_terms(query, self.analyzer_name)) if r is not None]
        if not rows or self.n == 0:
            return []
        return [
            TermList(
                self.chunk[lo:hi],
                self.contrib[lo:hi],
                self._dense_row(row, lo, hi) if hi - lo >= self._dense_df else None,
            )
            for row, (lo, hi) in zip(rows, _bounds(rows, self.indptr), strict=True)
        ]

    def _dense_row(self, row: int, lo: int, hi: int) -> np.ndarray:
        """Term ``row``'s contribution to every chunk (0.0 where absent), made on first use."""
        dense = self._dense.get(row)
        if dense is None:
            dense = self._dense[row] = np.zeros(self.n, dtype=np.float64)
            dense[self.chunk[lo:hi]] = self.contrib[lo:hi]
            dense.flags.writeable = False  # shared by every later query
        return dense

    def scores(self, query: str) -> tuple[np.ndarray, np.ndarray]:
        """``(chunk ids ascending, scores > 0)``, as ``bm25_scores``."""
        return accumulate([(t.ids, t.contrib) for t in self.term_lists(query)], self.n)

    def top(
        self, query: str, k: int, mask: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` best chunks (within ``mask``): ``top_k`` of ``scores``, computed by
        ``top_k_exact``."""
        return top_k_exact(self.term_lists(query), self.n, k, mask)

    def _row(self, term: str) -> int | None:
        """``lookup.find`` memoised: query words repeat across queries."""
        try:
            return self._rows[term]
        except KeyError:
            if len(self._rows) >= _MEMO_TERMS:
                self._rows.clear()
            row = self._rows[term] = self.lookup.find(term)
            return row


def _check_counts(counts: np.ndarray, tf: Any) -> None:
    """A posting's term frequency is at least 1 (spec §3.7). Values rewritten with valid
    checksums and restamped digests (bench/fuzz.py packs 70:30117) gave negative scores and an
    internal error in hybrid fusion: one line naming the element instead."""
    if counts.size and int(counts.min()) < 1:
        from kbpack.pack.read import DamagedDataError

        where = getattr(tf, "_where", "the pack")
        element = getattr(tf, "element", "/bm25/tf")
        bad = int(counts[counts < 1][0])
        raise DamagedDataError(where, element, f"a posting's term frequency is {bad}, below 1")


def _check_chunk_rows(ids: list[np.ndarray], n: int, chunk: Any) -> None:
    """Postings read in part (no digest covers a part) must point at chunk rows that exist:
    a pack rewritten with valid HDF5 checksums but wrong ids stops in one line naming the
    element, not in an IndexError where the row is used (bench/fuzz.py packs 32:1919)."""
    for part in ids:
        if part.size and (int(part.min()) < 0 or int(part.max()) >= n):
            from kbpack.pack.read import DamagedDataError

            bad = int(part[(part < 0) | (part >= n)][0])
            where = getattr(chunk, "_where", "the pack")
            raise DamagedDataError(
                where, chunk.element, f"a posting points at chunk row {bad}, outside 0..{n - 1}"
            )
