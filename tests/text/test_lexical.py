"""BM25 tokenizer, postings and scoring, checked against a naive reference written here."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import h5py
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbpack.index.postings import PostingsBuilder
from kbpack.pack.bm25_store import TermLookup
from kbpack.search.bm25 import BM25Index, bm25_scores, length_norms, top_k
from kbpack.text.analyze import tokenize

IDENTIFIERS = [
    "check_same_thread",
    "ZIP_DEFLATED",
    "-X importtime",
    "%z",
    "EU-WEST-1",
    "0x80070005",
    "SIGKILL",
]


def index(texts: list[str]) -> tuple[TermLookup, object]:
    builder = PostingsBuilder()
    for i, t in enumerate(texts):
        builder.add(i, t)
    postings = builder.finish(len(texts))
    return TermLookup.from_terms(postings.terms), postings


def search(texts: list[str], query: str, k1: float = 1.2, b: float = 0.75) -> dict[int, float]:
    lookup, p = index(texts)
    ids, scores = bm25_scores(query, lookup, p.indptr, p.chunk, p.tf, p.doc_len, k1=k1, b=b)
    got = dict(zip(ids.tolist(), scores.tolist(), strict=True))
    # The precomputed per-chunk norms give the same scores.
    norms = length_norms(p.doc_len, k1, b)
    ids2, scores2 = bm25_scores(
        query, lookup, p.indptr, p.chunk, p.tf, p.doc_len, k1, b, norms=norms
    )
    assert ids2.tolist() == ids.tolist()
    assert np.allclose(scores2, scores, rtol=1e-12, atol=0)
    # So does the in-memory index with precomputed contributions.
    ids3, scores3 = BM25Index(lookup, p.indptr, p.chunk, p.tf, p.doc_len, k1, b).scores(query)
    assert ids3.tolist() == ids.tolist()
    assert np.allclose(scores3, scores, rtol=1e-12, atol=0)
    return got


def naive_bm25(texts: list[str], query: str, k1: float, b: float) -> dict[int, float]:
    """The formula of kbpack.search.bm25's docstring, in plain loops."""
    docs = [tokenize(t) for t in texts]
    n = len(docs)
    avg = sum(len(d) for d in docs) / n
    out: dict[int, float] = {}
    for term in set(tokenize(query)):
        df = sum(1 for d in docs if term in d)
        if df == 0:
            continue
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        for i, d in enumerate(docs):
            tf = d.count(term)
            if tf:
                denom = tf + k1 * (1 - b + b * len(d) / avg)
                out[i] = out.get(i, 0.0) + idf * tf * (k1 + 1) / denom
    return out


# -- tokenizer -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("check_same_thread", ["check_same_thread", "check", "same", "thread"]),
        ("ZIP_DEFLATED", ["zip_deflated", "zip", "deflated"]),
        ("python -X importtime", ["python", "-x", "x", "importtime"]),
        ("strftime('%z')", ["strftime", "%z", "z"]),
        ("EU-WEST-1", ["eu-west-1", "eu", "west", "1"]),
        ("HRESULT 0x80070005.", ["hresult", "0x80070005"]),
        ("kill -s SIGKILL", ["kill", "-s", "s", "sigkill"]),
        ("--strict", ["--strict", "strict"]),
        ("os.path.join(a)", ["os.path.join", "os", "path", "join", "a"]),
    ],
)
def test_identifiers_are_indexed_whole_and_in_parts(text: str, expected: list[str]) -> None:
    assert tokenize(text) == expected


def test_italian_accents_apostrophes_and_unicode_forms() -> None:
    assert tokenize("Perché l’indice è PIÙ veloce") == [
        "perché",
        "l’indice",
        "l",
        "indice",
        "è",
        "più",
        "veloce",
    ]
    # NFD input, full-width letters and ß match their everyday forms.
    assert tokenize("perche\u0301 Ｆｕｌｌ Straße") == ["perché", "full", "strasse"]


def test_cjk_is_indexed_as_characters_and_bigrams() -> None:
    assert tokenize("東京都") == ["東", "東京", "京", "京都", "都"]
    # A script change splits: Latin word, then CJK.
    assert tokenize("Python3を使う") == ["python3", "を", "を使", "使", "使う", "う"]


def test_punctuation_alone_yields_nothing() -> None:
    assert tokenize(" ,;!? — … ") == []


def test_very_long_terms_are_cut_to_64_characters() -> None:
    (term,) = tokenize("a" * 100)
    assert term == "a" * 64


# -- search ----------------------------------------------------------------------------------


def test_identifiers_are_found_as_typed() -> None:
    filler = [
        "The database connection is shared between threads in this example.",
        "Compression of archives uses deflate when configured.",
        "Python can report import times with a command line option.",
        "Time zones are formatted with strftime directives.",
        "Resources live in a European region of the cloud provider.",
        "Access is denied when the account lacks permissions.",
        "The process was terminated by a signal from the kernel.",
    ]
    targets = [
        "Pass check_same_thread=False to share the sqlite3 connection.",
        "Use zipfile.ZIP_DEFLATED to compress members.",
        "Run python -X importtime app.py to see slow imports.",
        "The %z directive prints the UTC offset like +0100.",
        "The bucket lives in EU-WEST-1 for latency.",
        "Error 0x80070005 means access denied.",
        "SIGKILL cannot be caught or ignored.",
    ]
    texts = filler + targets
    for i, ident in enumerate(IDENTIFIERS):
        hits = search(texts, ident)
        ids, _ = top_k(np.array(list(hits)), np.array(list(hits.values())), 1)
        assert ids.tolist() == [len(filler) + i], ident


def test_unknown_terms_return_nothing() -> None:
    ids_scores = search(["alpha beta", "gamma"], "zeta omega!")
    assert ids_scores == {}
    assert search(["alpha beta", "gamma"], "   ") == {}


def test_repeated_query_terms_count_once() -> None:
    texts = ["alpha beta", "beta gamma", "gamma delta"]
    assert search(texts, "beta beta BETA") == search(texts, "beta")


words = st.sampled_from(
    ["alpha", "beta", "gamma", "delta", "eu-west-1", "check_same_thread", "perché", "東京", "x"]
)
texts_strategy = st.lists(st.lists(words, max_size=12).map(" ".join), min_size=1, max_size=25)


@settings(max_examples=150, deadline=None)
@given(
    texts=texts_strategy,
    query=st.lists(words, min_size=1, max_size=4).map(" ".join),
    k1=st.sampled_from([1.2, 0.9, 2.0]),
    b=st.sampled_from([0.75, 0.0, 1.0]),
)
def test_scores_equal_the_naive_reference(
    texts: list[str], query: str, k1: float, b: float
) -> None:
    if all(not tokenize(t) for t in texts):
        assert search(texts, query, k1, b) == {}
        return
    got = search(texts, query, k1, b)
    want = naive_bm25(texts, query, k1, b)
    assert got.keys() == want.keys()
    for i in want:
        assert got[i] == pytest.approx(want[i], rel=1e-9, abs=1e-12)
        assert got[i] > 0


@settings(max_examples=60, deadline=None)
@given(texts=texts_strategy)
def test_postings_hold_raw_term_frequencies(texts: list[str]) -> None:
    lookup, p = index(texts)
    assert p.terms == sorted(p.terms, key=lambda t: t.encode())
    assert len(set(p.terms)) == len(p.terms)
    assert p.indptr.dtype == np.int64 and p.chunk.dtype == np.int32 and p.tf.dtype == np.int32
    assert p.indptr[0] == 0 and p.indptr[-1] == len(p.chunk) == len(p.tf)
    assert p.doc_len.tolist() == [len(tokenize(t)) for t in texts]
    counts = [Counter(tokenize(t)) for t in texts]
    for row, term in enumerate(p.terms):
        ids = p.chunk[p.indptr[row] : p.indptr[row + 1]].tolist()
        assert ids == sorted(ids)
        assert ids == [i for i, c in enumerate(counts) if term in c]
        assert p.tf[p.indptr[row] : p.indptr[row + 1]].tolist() == [counts[i][term] for i in ids]
        assert lookup.find(term) == row
    assert lookup.problems() == []


def test_skipped_chunk_ids_are_empty_chunks() -> None:
    builder = PostingsBuilder()
    builder.add(0, "alpha")
    builder.add(3, "alpha beta")
    p = builder.finish(5)
    assert p.doc_len.tolist() == [1, 0, 0, 2, 0]
    empty = PostingsBuilder().finish(3)
    assert empty.terms == [] and empty.indptr.tolist() == [0] and empty.doc_len.tolist() == [0] * 3
    lookup = TermLookup.from_terms(empty.terms)
    ids, _ = bm25_scores("a", lookup, empty.indptr, empty.chunk, empty.tf, empty.doc_len)
    assert ids.tolist() == [] and lookup.problems() == []
    with pytest.raises(ValueError, match="ascend"):
        b2 = PostingsBuilder()
        b2.add(1, "a")
        b2.add(1, "b")


def test_term_lookup_finds_terms_and_rejects_disorder() -> None:
    terms = sorted(["a", "ab", "b", "é", "東", "zz"])
    lookup = TermLookup.from_terms(terms)
    assert [lookup.find(t) for t in terms] == list(range(len(terms)))
    assert lookup.find("aa") is None and lookup.find("") is None and lookup.find("zzz") is None
    assert lookup.term(4) == terms[4]
    # Enough terms for several sampled buckets: every term and its near misses.
    many = sorted({f"{w}{i}" for w in ("a", "b", "é", "z_") for i in range(300)})
    big = TermLookup.from_terms(many)
    assert [big.find(t) for t in many] == list(range(len(many)))
    assert [big.find(t + "!") for t in many[::7]] == [None] * len(many[::7])
    assert big.find("0") is None and big.find("~") is None and len(big) == len(many)
    with pytest.raises(ValueError, match="sorted"):
        TermLookup.from_terms(["b", "a"])
    damaged = TermLookup(lookup.blob, lookup.offsets[::-1].copy())
    assert damaged.problems() == ["offsets must start at 0"]
    swapped = TermLookup.from_terms(["a", "b"])
    bad = TermLookup(np.frombuffer(b"ba", dtype=np.uint8), swapped.offsets)
    assert bad.problems() == ["term 1 is not greater than term 0"]


def test_term_lookup_lower_bound_is_the_same_before_and_after_sampling() -> None:
    """A lookup answers its first lookups by a plain binary search (one query of a process)
    and later ones through the sampled index (batches, spelling): the same rows either way,
    for terms, near misses and keys outside the vocabulary."""
    import bisect

    many = sorted({f"{w}{i}" for w in ("a", "b", "é", "z_", "東") for i in range(200)})
    encoded = [t.encode("utf-8") for t in many]
    keys = [b"", b"0", b"~", "\uffff".encode()] + [e + b"!" for e in encoded[::3]]
    keys += [e[:-1] for e in encoded[::5]] + encoded[::2]
    want = [bisect.bisect_left(encoded, k) for k in keys]
    fresh = TermLookup.from_terms(many)
    assert [fresh.lower_bound(k) for k in keys] == want  # the first 48 plain, then sampled
    assert fresh._sample is not None
    for k, w in zip(keys, want, strict=True):
        plain = TermLookup.from_terms(many)
        assert plain.lower_bound(k) == w and plain._sample is None


def test_scores_read_from_hdf5_datasets_equal_in_memory(tmp_path: Path) -> None:
    texts = ["alpha beta gamma", "beta beta", "gamma check_same_thread", "", "alpha"]
    lookup, p = index(texts)
    want = bm25_scores("alpha beta check", lookup, p.indptr, p.chunk, p.tf, p.doc_len)
    with h5py.File(tmp_path / "p.h5", "w") as f:
        f["indptr"], f["chunk"], f["tf"] = p.indptr, p.chunk, p.tf
    with h5py.File(tmp_path / "p.h5", "r") as f:
        got = bm25_scores("alpha beta check", lookup, f["indptr"], f["chunk"], f["tf"], p.doc_len)
    assert got[0].tolist() == want[0].tolist()
    assert np.allclose(got[1], want[1], rtol=1e-12)


def test_top_k_breaks_ties_by_chunk_id() -> None:
    ids = np.array([9, 3, 7, 1, 5])
    scores = np.array([1.0, 2.0, 1.0, 1.0, 0.5])
    got_ids, got_scores = top_k(ids, scores, 3)
    assert got_ids.tolist() == [3, 1, 7]
    assert got_scores.tolist() == [2.0, 1.0, 1.0]
    assert top_k(ids, scores, 10)[0].tolist() == [3, 1, 7, 9, 5]
    assert top_k(ids, scores, 0)[0].tolist() == []
