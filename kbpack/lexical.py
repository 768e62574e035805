"""Lexical search: the tokenizer, BM25 postings (build) and BM25 scoring (query).

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

import bisect
import re
import unicodedata
from array import array
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kbpack.bm25_top import DenseTerm, Term, TermList, summed, top_k_exact
from kbpack.bm25_top import top_k as top_k  # kept importable from here, where it used to live

K1 = 1.2
B = 0.75
MAX_TOKEN_CHARS = 64
_STRIDE = 32  # TermLookup: one sampled term per 32
# Lookups answered by a plain binary search before the sampled index is made (TermLookup).
_PLAIN_LOOKUPS = 48
# A term held in at least 1/DENSE_SHARE of the chunks (and never more than MAX_DENSE_TF times in
# one) is also stored as a dense tf row (spec §3.7.1): at 100k chunks 97 terms, 9.7 MB, and
# ~90% of a question's postings (bench/RESULTS.md, "First query of a process").
DENSE_SHARE = 8
MAX_DENSE_TF = 255
_MEMO_TERMS = 100_000  # BM25Index: query terms remembered

# Han (incl. extensions and compatibility ideographs), Hiragana, Katakana (without the middle
# dot U+30FB), Hangul jamo and syllables. These scripts are written without spaces between
# words, so they are indexed as characters and character bigrams instead of words.
_CJK = (
    "\u1100-\u11ff\u3040-\u30fa\u30fc-\u30ff\u3130-\u318f\u31f0-\u31ff\u3400-\u4dbf"
    "\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0003ffff"
)
_WORD = rf"[^\W_{_CJK}]"  # a letter or number (str.isalnum) that is not CJK
_JOIN = r"[_\-./:'’@\\]"
_TOKEN_RE = re.compile(
    rf"(?P<cjk>[{_CJK}]+)|(?P<sigil>--?|[%$#@])?(?P<word>{_WORD}+(?:{_JOIN}+{_WORD}+)*)"
)
_RUN_RE = re.compile(rf"{_WORD}+")


def normalize(text: str) -> str:
    """NFKC, then casefold, then NFKC again (casefold can leave text that is not NFKC)."""
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())


def tokenize(text: str) -> list[str]:
    """Split text into BM25 terms, in order of appearance (duplicates kept).

    1. ``t = NFKC(casefold(NFKC(text)))``.
    2. Scan ``t`` left to right with this regular expression (Python ``re`` syntax; at each
       position the leftmost alternative that matches wins, matches never overlap)::

           (?P<cjk>[C]+) | (?P<sigil>--?|[%$#@])? (?P<word>W+(?:J+W+)*)

       where ``W`` is a letter or number (a code point whose general category is L*, or that has
       a Unicode Numeric_Type; Python's ``str.isalnum``) that is not in ``C``; ``J`` is a
       joiner, one of ``_ - . / : ' ’ @ \\``; ``C`` is the CJK set: U+1100-11FF, U+3040-30FA,
       U+30FC-30FF, U+3130-318F, U+31F0-31FF, U+3400-4DBF, U+4E00-9FFF, U+AC00-D7AF,
       U+F900-FAFF, U+20000-3FFFF. Everything else (spaces, other punctuation) separates.
    3. For a ``word`` match (a compound such as ``check_same_thread``, ``eu-west-1``,
       ``os.path.join``, ``dell'indice``): emit ``sigil + word`` if a sigil matched (so ``-x``,
       ``--strict``, ``%z``, ``$home`` are findable as typed), then ``word``, then, when the word
       holds more than one ``W+`` run, each run in order (``check``, ``same``, ``thread``).
    4. For a ``cjk`` run of n characters: emit, in order, each character followed by the bigram
       it starts (``東京都`` -> ``東``, ``東京``, ``京``, ``京都``, ``都``).
    5. Every emitted term longer than 64 code points is cut to its first 64.

    No stemming and no stopwords: identifiers, codes and Italian or English words are matched as
    written, up to case and Unicode compatibility forms.
    """
    out: list[str] = []
    for m in _TOKEN_RE.finditer(normalize(text)):
        cjk = m.group("cjk")
        if cjk is not None:
            for i, ch in enumerate(cjk):
                out.append(ch)
                if i + 1 < len(cjk):
                    out.append(cjk[i : i + 2])
            continue
        word = m.group("word")
        sigil = m.group("sigil")
        if sigil:
            out.append((sigil + word)[:MAX_TOKEN_CHARS])
        out.append(word[:MAX_TOKEN_CHARS])
        runs = _RUN_RE.findall(word)
        if len(runs) > 1:
            out.extend(r[:MAX_TOKEN_CHARS] for r in runs)
    return out


PLAIN = "plain"  # the CLI's name for "no analyzer attribute": tokenize() alone
STEM_MARK = "~"  # never part of a tokenize() term (not a letter, number, joiner or sigil)
SNOWBALL_ENGLISH = "snowball-english-1"
ANALYZERS = (PLAIN, SNOWBALL_ENGLISH)
# A word left as a surface term only: mixed case (camelCase, NTFS, iPhone) marks a name or code.
_RAW_WORD_RE = re.compile(rf"{_WORD}+")


class Analyzer:
    """The text -> BM25 terms rule a pack records in ``/bm25`` attribute ``analyzer``.

    ``plain`` (the attribute absent): ``tokenize`` alone. ``snowball-english-1``: every
    ``tokenize`` term, and after each standalone plain word (a ``word`` match without sigil or
    joiner, letters only, written in lower case or with one initial capital) also
    ``"~" + its Snowball English stem``. Surface terms stay, so identifiers, codes and exact
    words match as typed and did-you-mean (which only looks at terms starting with a letter)
    never suggests a stem; the ``~`` terms let "orphan" find "orphaning".
    """

    def __init__(self, name: str | None) -> None:
        if name in (None, PLAIN):
            self.name: str | None = None
            self._stem: Any = None
        elif name == SNOWBALL_ENGLISH:
            import snowballstemmer  # pure Python; only stemmed packs need it

            self.name = name
            self._stem = snowballstemmer.stemmer("english")
        else:
            raise ValueError(
                f"unknown BM25 analyzer {name!r}: this kbpack knows {', '.join(ANALYZERS)}"
            )
        self._memo: dict[str, str] = {}

    @property
    def label(self) -> str:
        return self.name or PLAIN

    def terms(self, text: str) -> list[str]:
        """BM25 terms of ``text`` in order of appearance (duplicates kept)."""
        if self._stem is None:
            return tokenize(text)
        names = {normalize(w) for w in _RAW_WORD_RE.findall(text) if w[1:] != w[1:].lower()}
        out: list[str] = []
        for m in _TOKEN_RE.finditer(normalize(text)):
            start = len(out)
            out.extend(tokenize(m.group()))
            word = m.group("word")
            if (
                word is not None
                and not m.group("sigil")
                and word.isalpha()
                and len(out) - start == 1
                and word not in names
            ):
                out.append(STEM_MARK + self._stem_of(word[:MAX_TOKEN_CHARS]))
        return out

    def _stem_of(self, word: str) -> str:
        stem = self._memo.get(word)
        if stem is None:
            if len(self._memo) >= _MEMO_TERMS:
                self._memo.clear()
            stem = self._memo[word] = str(self._stem.stemWord(word))
        return stem


_ANALYZERS: dict[str | None, Analyzer] = {}


def analyzer(name: str | None) -> Analyzer:
    """The analyzer a pack records (None or absent: plain); ValueError names an unknown one."""
    key = None if name in (None, PLAIN) else name
    if key not in _ANALYZERS:
        _ANALYZERS[key] = Analyzer(key)
    return _ANALYZERS[key]


@dataclass
class Postings:
    """BM25 postings in CSC layout: the postings of ``terms[i]`` are rows
    ``indptr[i]:indptr[i+1]`` of ``chunk`` (ascending chunk ids) and ``tf`` (raw counts)."""

    terms: list[str]  # sorted by UTF-8 bytes (= code point order), unique
    indptr: np.ndarray  # int64, len(terms) + 1
    chunk: np.ndarray  # int32
    tf: np.ndarray  # int32
    doc_len: np.ndarray  # int32, one per chunk, len(tokenize(content))
    analyzer: str | None = None  # recorded as /bm25 attribute "analyzer"; None: plain


class PostingsBuilder:
    """Streams chunks into postings; memory grows with the number of postings, not with text.

    Each chunk contributes one (term id, chunk id, tf) triple per distinct term, kept in compact
    typed arrays (12 bytes per posting); ``finish`` sorts them into CSC order once.
    """

    def __init__(self, analyzer_name: str | None = None) -> None:
        self._analyzer = analyzer(analyzer_name)
        self._vocab: dict[str, int] = {}
        self._term = array("i")
        self._chunk = array("i")
        self._tf = array("i")
        self._doc_len = array("i")
        self._finished = False

    def add(self, chunk_id: int, text: str) -> None:
        """Index one chunk's content. Chunk ids must ascend (0, 1, 2, ...); a skipped id is an
        empty chunk."""
        if self._finished:
            raise ValueError("PostingsBuilder.add after finish")
        if chunk_id < len(self._doc_len):
            raise ValueError(
                f"chunk ids must ascend: got {chunk_id} after {len(self._doc_len) - 1}"
            )
        self._doc_len.extend([0] * (chunk_id - len(self._doc_len)))
        tokens = self._analyzer.terms(text)
        self._doc_len.append(len(tokens))
        vocab = self._vocab
        counts = Counter(tokens)
        for term in counts:
            tid = vocab.get(term)
            if tid is None:
                tid = vocab[term] = len(vocab)
            self._term.append(tid)
        self._chunk.extend([chunk_id] * len(counts))
        self._tf.extend(counts.values())

    def finish(self, n_chunks: int) -> Postings:
        """Return the postings of chunks ``0..n_chunks-1`` (those never added are empty)."""
        if n_chunks < len(self._doc_len):
            raise ValueError(f"n_chunks={n_chunks} but chunk {len(self._doc_len) - 1} was added")
        self._finished = True
        self._doc_len.extend([0] * (n_chunks - len(self._doc_len)))
        terms = sorted(self._vocab)  # str order is code point order, which is UTF-8 byte order
        rank = np.empty(len(terms), dtype=np.int64)
        rank[[self._vocab[t] for t in terms]] = np.arange(len(terms), dtype=np.int64)
        self._vocab = {}
        # A build's memory peaks here (85M postings at 1M chunks): ranks are int32 and every
        # array is dropped once used, ~4 bytes per posting less at the peak (~0.35 GB at 1M).
        term_rank = rank.astype(np.int32)[np.frombuffer(self._term, dtype=np.int32)]
        self._term = array("i")
        # Chunk ids were appended in ascending order, so a stable sort by term keeps them sorted.
        order = np.argsort(term_rank, kind="stable")
        counts = np.bincount(term_rank, minlength=len(terms))
        del term_rank
        indptr = np.zeros(len(terms) + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr[1:])
        chunk = np.frombuffer(self._chunk, dtype=np.int32)[order]
        self._chunk = array("i")
        tf = np.frombuffer(self._tf, dtype=np.int32)[order]
        self._tf = array("i")
        del order
        doc_len = np.frombuffer(self._doc_len, dtype=np.int32).copy()
        self._doc_len = array("i")
        return Postings(
            terms=terms,
            indptr=indptr,
            chunk=chunk,
            tf=tf,
            doc_len=doc_len,
            analyzer=self._analyzer.name,
        )


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


def query_terms(query: str, analyzer_name: str | None = None) -> list[str]:
    """Distinct terms of a query under the pack's analyzer, in first-seen order (a repeated
    term counts once)."""
    return list(dict.fromkeys(analyzer(analyzer_name).terms(query)))


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
