"""The pruned top-k (kbpack.search.bm25_top) returns exactly what scoring every chunk returns.

"Exactly": the same ids in the same order with the same float64 scores, compared with ``==``,
against ``top_k`` over ``bm25_scores`` (every matching chunk scored, the reference path), which
tests/text/test_lexical.py checks against the formula written out in loops.
"""

from __future__ import annotations

import random
from pathlib import Path

import h5py
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbpack.index.postings import PostingsBuilder
from kbpack.pack.bm25_store import DENSE_SHARE, TermLookup, dense_rows
from kbpack.search.bm25 import BM25Index, bm25_scores, length_norms, read_term_lists, top_k
from kbpack.search.bm25_top import DenseTerm, TermList, _top_k_pruned, scores_at, top_k_exact
from kbpack.text.analyze import SNOWBALL_ENGLISH, analyzer
from tests.paths import REPO_ROOT


def build(texts: list[str], analyzer_name: str | None = None) -> tuple[TermLookup, object]:
    builder = PostingsBuilder(analyzer_name)
    for i, t in enumerate(texts):
        builder.add(i, t)
    p = builder.finish(len(texts))
    return TermLookup.from_terms(p.terms), p


def reference(
    texts_index: tuple[TermLookup, object],
    query: str,
    k: int,
    k1: float,
    b: float,
    mask: np.ndarray | None,
    analyzer_name: str | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Every matching chunk scored, masked, then the k best."""
    lookup, p = texts_index
    ids, scores = bm25_scores(
        query, lookup, p.indptr, p.chunk, p.tf, p.doc_len, k1, b, analyzer_name=analyzer_name
    )
    if mask is not None:
        keep = mask[ids]
        ids, scores = ids[keep], scores[keep]
    return top_k(ids, scores, k)


def assert_same(got: tuple[np.ndarray, np.ndarray], want: tuple[np.ndarray, np.ndarray]) -> None:
    assert got[0].tolist() == want[0].tolist()
    assert got[1].tolist() == want[1].tolist()  # bit for bit, not approximately


def check_all_paths(
    texts: list[str],
    query: str,
    k: int,
    k1: float = 1.2,
    b: float = 0.75,
    mask: np.ndarray | None = None,
    analyzer_name: str | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    idx = build(texts, analyzer_name)
    lookup, p = idx
    want = reference(idx, query, k, k1, b, mask, analyzer_name)
    baked = BM25Index(lookup, p.indptr, p.chunk, p.tf, p.doc_len, k1, b, analyzer_name)
    assert_same(baked.top(query, k, mask), want)
    norms = length_norms(p.doc_len, k1, b)
    read = read_term_lists(query, lookup, p.indptr, p.chunk, p.tf, norms, k1, analyzer_name)
    assert_same(top_k_exact(read, len(texts), k, mask), want)
    # The scores of any chunks, as a hybrid query asks for its dense candidates'.
    every = bm25_scores(
        query, lookup, p.indptr, p.chunk, p.tf, p.doc_len, k1, b, None, None, analyzer_name
    )
    some = np.arange(len(texts))[::2]
    full = np.zeros(len(texts))
    full[every[0]] = every[1]
    assert scores_at(baked.term_lists(query), some).tolist() == full[some].tolist()
    assert scores_at(read, some).tolist() == full[some].tolist()
    # The common terms read as dense rows (what a pack's /bm25/dense_tf holds), and any other
    # choice of terms held dense: the same ids and scores, to the bit.
    n = len(texts)
    rule = dense_rows(p.indptr, p.chunk, p.tf, n)
    every_term = np.arange(len(p.indptr) - 1)
    for held in (rule[0], every_term, every_term[::2]):
        rows, tf = _dense_of(p, n, held)
        read = read_term_lists(
            query, lookup, p.indptr, p.chunk, p.tf, norms, k1, analyzer_name, dense=(rows, tf)
        )
        assert_same(top_k_exact(read, n, k, mask), want)
        assert scores_at(read, some).tolist() == full[some].tolist()
        ids, scores = bm25_scores(
            query, lookup, p.indptr, p.chunk, p.tf, p.doc_len, k1, b, None, None, analyzer_name
        )
        assert (ids.tolist(), scores.tolist()) == (every[0].tolist(), every[1].tolist())
    return want


def _dense_of(p: object, n: int, held: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Dense tf rows of the terms ``held`` (vocabulary rows), laid out as /bm25/dense_tf."""
    tf = np.zeros(len(held) * n, dtype=np.uint8)
    for j, t in enumerate(held.tolist()):
        lo, hi = int(p.indptr[t]), int(p.indptr[t + 1])  # type: ignore[attr-defined]
        tf[j * n + p.chunk[lo:hi]] = p.tf[lo:hi]  # type: ignore[attr-defined]
    return np.asarray(held, dtype=np.int64), tf


words = st.sampled_from(
    ["the", "the", "the", "of", "of", "alpha", "beta", "gamma", "eu-west-1", "perché", "東京"]
)
texts_strategy = st.lists(st.lists(words, max_size=12).map(" ".join), min_size=1, max_size=30)


@settings(max_examples=200, deadline=None)
@given(
    texts=texts_strategy,
    dup=st.integers(0, 3),
    query=st.lists(
        st.sampled_from(["the", "of", "alpha", "beta", "gamma", "東京", "zeta", "-"]), max_size=6
    ).map(" ".join),
    k=st.integers(0, 12),
    k1=st.sampled_from([1.2, 0.9, 2.0]),
    b=st.sampled_from([0.75, 0.0, 1.0]),
    masked=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_pruned_top_k_equals_scoring_every_chunk(
    texts: list[str], dup: int, query: str, k: int, k1: float, b: float, masked: bool, seed: int
) -> None:
    """Random small corpora with duplicated chunks (ties), empty and unknown-term queries
    ("zeta", "-"), k from 0 to more than the chunks, masks (query filters)."""
    texts = texts + texts[:dup]  # the same text twice: equal scores, ordered by id
    rng = np.random.default_rng(seed)
    mask = rng.random(len(texts)) < 0.6 if masked else None
    check_all_paths(texts, query, k, k1, b, mask)


@settings(max_examples=60, deadline=None)
@given(
    texts=st.lists(
        st.lists(
            st.sampled_from(
                ["orphan", "orphaning", "orphaned", "Orphans", "NTFS", "the", "runs", "running"]
            ),
            max_size=10,
        ).map(" ".join),
        min_size=1,
        max_size=20,
    ),
    query=st.sampled_from(["orphans running", "the orphaned run", "NTFS", "ran", ""]),
    k=st.integers(1, 6),
)
def test_stemmed_packs_rank_alike(texts: list[str], query: str, k: int) -> None:
    pytest.importorskip("snowballstemmer")
    analyzer(SNOWBALL_ENGLISH)
    check_all_paths(texts, query, k, analyzer_name=SNOWBALL_ENGLISH)


def zipf_corpus(n: int, vocab: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    weights = [1.0 / (r + 1) for r in range(vocab)]
    names = [f"w{r}" for r in range(vocab)]
    return [" ".join(rng.choices(names, weights, k=rng.randint(5, 60))) for _ in range(n)]


@pytest.mark.parametrize("k", [1, 10, 100])
def test_top_k_equals_the_reference_on_a_zipf_corpus(k: int) -> None:
    """Common and rare words as in real text (many equal contributions, so many ties)."""
    texts = zipf_corpus(3000, 2000, seed=5)
    lookup, p = build(texts)
    baked = BM25Index(lookup, p.indptr, p.chunk, p.tf, p.doc_len)
    # w0 is in more than half the chunks: its baked list carries a dense row, the same values
    common, rare = baked.term_lists("w0 w1999")
    assert common.row is not None and rare.row is None
    assert np.flatnonzero(common.row).tolist() == common.ids.tolist()
    assert common.row[common.ids].tolist() == common.contrib.tolist()
    rng = random.Random(9)
    for _ in range(40):
        query = " ".join(f"w{rng.choice([0, 1, 2, 3, 5, 8])}" for _ in range(3))
        query += " " + " ".join(f"w{rng.randint(50, 1999)}" for _ in range(3))
        assert_same(baked.top(query, k), reference((lookup, p), query, k, 1.2, 0.75, None, None))


def test_dense_rows_hold_the_common_terms_exactly() -> None:
    """The rule of spec §3.7.1: every term in at least 1/8 of the chunks (none above tf 255),
    its row equal to its postings, 0 elsewhere."""
    texts = [*zipf_corpus(800, 400, seed=3), "w0 " * 300]  # w0 300 times in the last chunk
    lookup, p = build(texts)
    n = len(texts)
    rows, tf = dense_rows(p.indptr, p.chunk, p.tf, n)
    df = np.diff(p.indptr)
    w0 = lookup.find("w0")
    want = [t for t in range(len(df)) if df[t] * DENSE_SHARE >= n and t != w0]
    assert rows.tolist() == want and len(want) > 5
    assert tf.shape == (len(rows) * n,) and tf.dtype == np.uint8
    for j, t in enumerate(rows.tolist()):
        row = np.zeros(n, dtype=np.int64)
        row[p.chunk[p.indptr[t] : p.indptr[t + 1]]] = p.tf[p.indptr[t] : p.indptr[t + 1]]
        assert tf[j * n : (j + 1) * n].tolist() == row.tolist()
    # no chunks, no terms
    empty = build([""])[1]
    assert [a.size for a in dense_rows(empty.indptr, empty.chunk, empty.tf, 1)] == [0, 0]


@pytest.mark.parametrize("k", [1, 10, 100])
def test_dense_common_terms_are_pruned_and_exact(k: int) -> None:
    """On a Zipf corpus the common terms' bounds are small beside a question's rare words: the
    pruned path (not the full sum) answers, with the reference's ids and scores."""
    texts = zipf_corpus(3000, 2000, seed=5)
    lookup, p = build(texts)
    n = len(texts)
    norms = length_norms(p.doc_len)
    dense = dense_rows(p.indptr, p.chunk, p.tf, n)
    rng = random.Random(11)
    pruned = 0
    for _ in range(40):
        query = " ".join(f"w{rng.choice([0, 1, 2, 3, 5, 8])}" for _ in range(4))
        query += " " + " ".join(f"w{rng.randint(20, 400)}" for _ in range(3))
        read = read_term_lists(query, lookup, p.indptr, p.chunk, p.tf, norms, dense=dense)
        assert any(isinstance(t, DenseTerm) for t in read)
        pruned += _top_k_pruned(read, n, k, None) is not None
        assert_same(
            top_k_exact(read, n, k), reference((lookup, p), query, k, 1.2, 0.75, None, None)
        )
    assert pruned >= 20


def test_read_from_hdf5_datasets_equals_baked(tmp_path: Path) -> None:
    texts = zipf_corpus(400, 300, seed=2)
    lookup, p = build(texts)
    baked = BM25Index(lookup, p.indptr, p.chunk, p.tf, p.doc_len)
    with h5py.File(tmp_path / "p.h5", "w") as f:
        f["indptr"], f["chunk"], f["tf"] = p.indptr, p.chunk, p.tf
    norms = length_norms(p.doc_len)
    with h5py.File(tmp_path / "p.h5", "r") as f:
        for query in ("w0 w7 w120", "w1 w2 w3 w250 w299", "nothing here"):
            read = read_term_lists(query, lookup, f["indptr"], f["chunk"], f["tf"], norms)
            assert_same(top_k_exact(read, len(texts), 10), baked.top(query, 10))


def test_term_list_lookups_and_edges() -> None:
    t = TermList(np.array([2, 5, 9], np.int32), np.array([0.5, 1.5, 1.0]))
    assert t.at(np.array([0, 2, 6, 9, 11])).tolist() == [0.0, 0.5, 0.0, 1.0, 0.0]
    empty = TermList(np.zeros(0, np.int32), np.zeros(0))
    assert empty.at(np.array([1, 2])).tolist() == [0.0, 0.0]
    assert top_k_exact([empty], 10, 5)[0].tolist() == []
    assert top_k_exact([t], 0, 5)[0].tolist() == []
    # a mask that keeps nothing
    assert top_k_exact([t], 10, 5, np.zeros(10, bool))[0].tolist() == []


GOLDEN = REPO_ROOT / "fixtures" / "golden"


@pytest.mark.parametrize("name", ["v1.kbpack", "v2-0.2.0.kbpack", "v2.kbpack"])
def test_a_packs_first_query_equals_its_baked_queries(name: str) -> None:
    """A Searcher's first query reads its postings from HDF5 (one read per dataset for all the
    query's terms; the common terms as dense rows where the pack holds them); from the second
    on it uses the baked index: the same ids and scores, and the same as reading every term's
    postings. Packs written before the dense rows (v1, 0.2.0) are read from postings alone."""
    from kbpack.pack.read import PackReader
    from kbpack.search.corpus import PackCorpus
    from kbpack.search.postings import PackPostings
    from kbpack.search.searcher import Searcher

    class PostingsOnly(PackPostings):
        """Every term read from its postings, ignoring the pack's dense rows."""

        def dense_rows(self) -> None:
            return None

    queries = ["the cache", "zlib compression level", "cookie file format", "nothing-here", ""]
    queries += ["the of and a to in is", "the pypdf page of a file", "NULL values in SQL"]
    with PackReader(GOLDEN / name) as r:
        assert (r.bm25_dense() is not None) == (name == "v2.kbpack")
        first = [Searcher(r, None)._bm25(q, None) for q in queries]
        for q, want in zip(queries, first, strict=True):
            postings_only = Searcher(PackCorpus(r, postings=PostingsOnly(r)), None)
            assert_same(postings_only._bm25(q, None), want)
            some = np.arange(r.counts["chunks"])
            one = Searcher(r, None)
            assert scores_at(one._bm25_terms(q), some).tolist() == (
                scores_at(postings_only._bm25_terms(q), some).tolist()
            )
        baked = Searcher(r, None)
        baked._bm25("warm", None)
        for q, want in zip(queries, first, strict=True):
            assert_same(baked._bm25(q, None), want)
            assert baked.corpus.postings._index is not None  # type: ignore[attr-defined]
        assert any(len(ids) for ids, _ in first)


def test_read_spans_returns_each_span_in_the_order_asked(tmp_path: Path) -> None:
    from kbpack.pack.read import CheckedDataset

    data = np.arange(50_000, dtype=np.int32) * 3
    with h5py.File(tmp_path / "d.h5", "w") as f:
        f.create_dataset("d", data=data, chunks=(1024,), compression="gzip", fletcher32=True)
    spans = [(40_000, 40_010), (5, 9), (7_000, 7_000), (0, 3), (10_000, 30_000)]
    with h5py.File(tmp_path / "d.h5", "r") as f:
        got = CheckedDataset(f["d"], "d.h5", "/d").read_spans(spans)
        assert [g.tolist() for g in got] == [data[a:b].tolist() for a, b in spans]
        assert CheckedDataset(f["d"], "d.h5", "/d").read_spans([]) == []


def test_both_storage_layouts_of_the_read_whole_columns_answer_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spec §1.1: the vocabulary, indptr and doc_len may be stored deflated (packs written
    before issue 19's cold-path work) or plain (kbpack's writer now). The same documents
    written both ways give the same ids and scores, bit for bit, on the first and baked paths."""
    from packs import ITALIAN, SAMPLE, markdown_doc, write_pack

    from kbpack.pack import format as F
    from kbpack.pack import storage
    from kbpack.pack.read import PackReader
    from kbpack.search.searcher import Searcher

    read_whole = (F.BM25_TERMS_BLOB, F.BM25_TERMS_OFFSETS, F.BM25_INDPTR, F.BM25_DOC_LEN)
    docs = [markdown_doc(f"d{i}.md", (SAMPLE, ITALIAN)[i % 2] * (1 + i % 3)) for i in range(12)]
    plain, deflated = tmp_path / "plain.kbpack", tmp_path / "deflated.kbpack"
    write_pack(plain, docs)
    monkeypatch.setattr(storage, "UNCOMPRESSED", storage.UNCOMPRESSED - set(read_whole))
    write_pack(deflated, docs)
    for path, want in ((plain, None), (deflated, "gzip")):
        with h5py.File(path, "r") as h:
            assert [h[p].compression for p in read_whole] == [want] * 4
            assert all(h[p].fletcher32 for p in read_whole)
    queries = ["rotating logs handler", "the of and", "perché llama.cpp", "0x80070005", "none"]
    with PackReader(plain) as a, PackReader(deflated) as b:
        for q in queries:
            assert_same(Searcher(a, None)._bm25(q, None), Searcher(b, None)._bm25(q, None))
        baked = Searcher(b, None)
        baked._bm25("warm", None)
        for q in queries:
            assert_same(baked._bm25(q, None), Searcher(a, None)._bm25(q, None))
        assert len(Searcher(a, None)._bm25("rotating logs", None)[0]) > 0
