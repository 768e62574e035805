"""Copies of one passage: chunks whose normalised words are identical or nearly so.

The same manual is often shipped more than once (HTML, single-page HTML, PDF, ``.rst.txt``);
without this, one passage fills the top results four times. At build time every chunk gets a
*fingerprint*: its normalised words (``normal_words``), their hash (identical copies) and a
MinHash signature over word shingles (near copies: the PDF copy differs by hyphenation, page
furniture and whitespace). ``CopyFinder`` groups the chunks; the writer stores the groups in
``/copies`` (spec/FORMAT.md 3.10) and search shows one result per group, listing the others.

Rules (spec/FORMAT.md 3.10 states them for an independent reader):

* Normalisation: NFKC, soft hyphens removed, a hyphen at the end of a line between two word
  characters joined (``pack-\\nage`` -> ``package``), casefolded; the words are the maximal runs
  of Python ``re`` ``\\w`` characters (letters, numbers, underscore).
* Identical copies: equal non-empty word lists, anywhere in the pack.
* Near copies: chunks of *different documents*, each with at least ``MIN_SHINGLES`` shingles of
  ``SHINGLE`` words, whose MinHash estimate of the shingle sets' Jaccard similarity is at least
  ``NEAR_THRESHOLD``. Only across documents: sections of one manual with the same boilerplate
  are different passages (measured in bench/RESULTS.md "Copies at build time").
* Groups are the connected components of those pairs; a group's first row is its lowest chunk.

The MinHash is kbpack's own (numpy, no dependency): each word is hashed once with BLAKE2b, a
shingle's hash mixes its words' hashes, and permutation ``i`` is the multiply-shift hash
``((x ^ A[i]) * B[i]) >> 32`` with constants derived from SHA-256, so a build is reproducible
on every machine and numpy version.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

SHINGLE = 3  # words per shingle
NUM_PERM = 64  # MinHash permutations: 256 bytes per chunk while building
BANDS = 16  # LSH: 16 bands of 4 rows; a pair at Jaccard 0.7 is a candidate with p = 0.99
ROWS = NUM_PERM // BANDS
NEAR_THRESHOLD = 0.6  # estimated Jaccard of word 3-gram sets (chosen with bench/copies.py)
MIN_SHINGLES = 8  # shorter chunks are grouped only when identical: too few words to judge
BUCKET_PEERS = 4  # each chunk is compared with at most this many earlier chunks per LSH bucket
RULE = (
    f"kbpack-copies-1: NFKC, soft hyphens dropped, end-of-line hyphens between word characters "
    f"joined, casefold, words = re \\w+ runs; identical = equal word lists; near = different "
    f"documents, >= {MIN_SHINGLES} shingles of {SHINGLE} words, MinHash ({NUM_PERM} "
    f"permutations) Jaccard >= {NEAR_THRESHOLD}"
)

_WORD = re.compile(r"\w+")
_LINE_HYPHEN = re.compile(r"(?<=\w)-[ \t]*\n\s*(?=\w)")
_SOFT_HYPHEN = "\u00ad"
_MASK64 = (1 << 64) - 1


def _constants(label: str, n: int, odd: bool = False) -> np.ndarray:
    """``n`` uint64 constants from SHA-256 (the same on every machine and numpy version)."""
    out = []
    for i in range(n):
        v = int.from_bytes(
            hashlib.sha256(f"kbpack-copies/{label}/{i}".encode()).digest()[:8], "little"
        )
        out.append(v | 1 if odd else v)
    return np.array(out, dtype=np.uint64)


_PERM_XOR = _constants("xor", NUM_PERM)
_PERM_MUL = _constants("mul", NUM_PERM, odd=True)
_MIX = _constants("mix", SHINGLE, odd=True)


def normal_words(text: str) -> list[str]:
    """The words two copies of a passage share whatever their format (see the module rules)."""
    t = unicodedata.normalize("NFKC", text).replace(_SOFT_HYPHEN, "")
    t = _LINE_HYPHEN.sub("", t).casefold()
    return _WORD.findall(t)


def exact_key(words: Sequence[str]) -> bytes:
    """The hash of a word list: equal keys = identical normalised text (up to 2**-128)."""
    return hashlib.blake2b("\x1f".join(words).encode("utf-8"), digest_size=16).digest()


@dataclass(frozen=True)
class Fingerprint:
    """What grouping needs of one chunk: its identity hash and (long enough) its signature."""

    key: bytes | None  # None: no words at all (a rule of dashes), never a copy
    signature: np.ndarray | None  # uint32 (NUM_PERM,), None below MIN_SHINGLES shingles


class WordHashes:
    """BLAKE2b of each word, memoised: a pack's vocabulary is far smaller than its text."""

    def __init__(self) -> None:
        self._memo: dict[str, int] = {}

    def __call__(self, words: Sequence[str]) -> np.ndarray:
        memo = self._memo
        out = np.empty(len(words), dtype=np.uint64)
        for i, w in enumerate(words):
            h = memo.get(w)
            if h is None:
                h = int.from_bytes(
                    hashlib.blake2b(w.encode("utf-8"), digest_size=8).digest(), "little"
                )
                if len(memo) < 2_000_000:  # bounded: a hostile text of unique words
                    memo[w] = h
            out[i] = h
        return out


def signature(word_hashes: np.ndarray) -> np.ndarray | None:
    """MinHash of the word-``SHINGLE`` shingle set, or None with fewer than MIN_SHINGLES."""
    n = word_hashes.size - SHINGLE + 1
    if n < MIN_SHINGLES:
        return None
    with np.errstate(over="ignore"):  # uint64 arithmetic wraps by design
        s = np.zeros(n, dtype=np.uint64)
        for j in range(SHINGLE):
            s = (s ^ word_hashes[j : j + n]) * _MIX[j]
        s = np.unique(s)  # a set of shingles: repeats do not weigh more
        h = ((s[:, None] ^ _PERM_XOR[None, :]) * _PERM_MUL[None, :]) >> np.uint64(32)
    return h.min(axis=0).astype(np.uint32)


def fingerprint(text: str, hashes: WordHashes) -> Fingerprint:
    words = normal_words(text)
    if not words:
        return Fingerprint(None, None)
    return Fingerprint(exact_key(words), signature(hashes(words)))


def similarity(a: np.ndarray, b: np.ndarray) -> float:
    """MinHash estimate of the Jaccard similarity of two shingle sets."""
    return float(np.count_nonzero(a == b)) / a.size


@dataclass(frozen=True)
class CopyGroups:
    """The groups as stored: ``group[i]`` and ``chunk[i]`` for each member, groups numbered from
    0 in order of their first chunk, chunks ascending within a group; ``exact[i]`` is 1 when the
    member's normalised words equal those of its group's first chunk."""

    group: np.ndarray  # int32
    chunk: np.ndarray  # int32
    exact: np.ndarray  # int8

    @property
    def n_groups(self) -> int:
        return int(self.group[-1]) + 1 if self.group.size else 0

    def members(self) -> list[list[int]]:
        """Chunk rows of each group, in order."""
        cuts = np.flatnonzero(np.diff(self.group)) + 1
        return [part.tolist() for part in np.split(self.chunk, cuts)] if self.chunk.size else []

    @classmethod
    def empty(cls) -> CopyGroups:
        return cls(np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0, np.int8))


class CopyFinder:
    """Collects chunk fingerprints document by document, then groups them (``groups``)."""

    def __init__(
        self, threshold: float = NEAR_THRESHOLD, across_documents_only: bool = True
    ) -> None:
        self.threshold = threshold
        self.across_documents_only = across_documents_only
        self._hashes = WordHashes()
        self._keys: list[bytes | None] = []
        self._docs: list[int] = []
        self._sig_rows: list[int] = []
        self._sigs: list[np.ndarray] = []

    def __len__(self) -> int:
        return len(self._keys)

    def add(self, doc: int, texts: Iterable[str]) -> None:
        """The chunks of document ``doc`` (pack rows follow on from those added before)."""
        for text in texts:
            fp = fingerprint(text, self._hashes)
            if fp.signature is not None:
                self._sig_rows.append(len(self._keys))
                self._sigs.append(fp.signature)
            self._keys.append(fp.key)
            self._docs.append(doc)

    def pairs(self) -> list[tuple[int, int, bool]]:
        """(a, b, identical) for a < b: the links groups are made of (each group spanned once)."""
        out: list[tuple[int, int, bool]] = []
        first: dict[bytes, int] = {}
        for row, key in enumerate(self._keys):
            if key is None:
                continue
            at = first.setdefault(key, row)
            if at != row:
                out.append((at, row, True))
        if not self._sigs:
            return out
        sigs = np.stack(self._sigs)
        rows = np.asarray(self._sig_rows)
        docs = np.asarray(self._docs)
        keys = self._keys
        seen: set[tuple[int, int]] = set()
        for band in range(BANDS):
            part = np.ascontiguousarray(sigs[:, band * ROWS : (band + 1) * ROWS])
            buckets: dict[bytes, list[int]] = {}
            for i, b in enumerate(part.view(f"V{part.shape[1] * 4}").ravel()):
                peers = buckets.setdefault(b.tobytes(), [])
                for j in peers:
                    a, c = int(rows[j]), int(rows[i])
                    if (a, c) in seen or keys[a] == keys[c]:  # identical ones are linked above
                        continue
                    if self.across_documents_only and docs[a] == docs[c]:
                        continue
                    seen.add((a, c))
                    if similarity(sigs[j], sigs[i]) >= self.threshold:
                        out.append((a, c, False))
                if len(peers) < BUCKET_PEERS:
                    peers.append(i)
        return out

    def groups(self) -> CopyGroups:
        n = len(self._keys)
        parent = list(range(n))

        def find(x: int) -> int:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        for a, b, _ in self.pairs():
            ra, rb = find(a), find(b)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)  # the root is the group's lowest row
        by_root: dict[int, list[int]] = {}
        for row in range(n):
            root = find(row)
            if root != row:
                by_root.setdefault(root, [root]).append(row)
        if not by_root:
            return CopyGroups.empty()
        group, chunk, exact = [], [], []
        for g, root in enumerate(sorted(by_root)):
            for row in by_root[root]:
                group.append(g)
                chunk.append(row)
                exact.append(int(self._keys[row] == self._keys[root]))
        return CopyGroups(
            np.asarray(group, np.int32), np.asarray(chunk, np.int32), np.asarray(exact, np.int8)
        )


__all__ = [
    "RULE",
    "CopyFinder",
    "CopyGroups",
    "Fingerprint",
    "WordHashes",
    "exact_key",
    "fingerprint",
    "normal_words",
    "signature",
    "similarity",
]
