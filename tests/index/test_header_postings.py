"""BM25 indexes each chunk's header (title and section path) with its content (spec 3.7).

A page asked for by its title is found lexically even when no chunk's content holds the title;
every path that writes postings (build, update, merge, split, migrate) writes the same ones;
packs of 0.2.x (content only, no ``fields``) still verify and search; verify checks the
postings against whichever the pack says it indexed.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

import kbpack
from kbpack.cli.main import cli
from kbpack.index.postings import PostingsBuilder
from kbpack.ops.build import BuildOptions, build
from kbpack.ops.inspect import describe
from kbpack.ops.merge import merge_packs
from kbpack.ops.migrate import migrate_pack
from kbpack.ops.split import split_pack
from kbpack.ops.update import update_pack
from kbpack.pack import format as F
from kbpack.pack.read import PackReader
from kbpack.text.analyze import tokenize
from kbpack.verify.pipeline import verify_pack
from tests.fixture_pack import codes, make_pack, with_fixed_digests

# "Autoincrement" and "Tombstones" are only in headings; no content word says them.
PAGES = {
    "autoinc.md": (
        "# SQLite Autoincrement\n\n## Summary\n\nThe keyword imposes extra CPU, memory, disk "
        "space and disk I/O overhead and should be avoided if not strictly needed.\n\n"
        "## Background\n\nA row normally gets a 64-bit signed integer key that is unique "
        "within its table.\n"
    ),
    "vacuum.md": (
        "# Tombstones\n\nDeleted rows leave free pages behind until the file is rebuilt, "
        "which copies the live rows into a fresh database.\n"
    ),
    "wal.md": (
        "# Write-Ahead Logging\n\nChanges are appended to a separate file and copied back "
        "at a checkpoint; readers keep seeing the old pages meanwhile. The disk holds "
        "both files.\n"
    ),
}


def _corpus(root: Path, pages: dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in pages.items():
        (root / name).write_text(text, encoding="utf-8")
    return root


def _build(src: Path, out: Path) -> Path:
    build(BuildOptions(sources=[src], out=out, vectors=False))
    return out


def _bm25(path: Path) -> dict[str, np.ndarray]:
    with h5py.File(path, "r") as h:
        return {k: h["/bm25/" + k][()] for k in ("terms_blob", "indptr", "chunk", "tf", "doc_len")}


def _same_bm25(a: Path, b: Path) -> None:
    x, y = _bm25(a), _bm25(b)
    for key in x:
        assert np.array_equal(x[key], y[key]), key


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("headers")
    return _build(_corpus(tmp / "src", PAGES), tmp / "pages.kbpack")


def test_a_page_is_found_by_its_title_alone(built: Path) -> None:
    # the BM25 ranking, and what search shows: bm25 mode's refusal asks each result for a
    # query word, which its header gives as well as its content
    with kbpack.open(built) as pack:
        for title, page in (("SQLite Autoincrement", "autoinc.md"), ("tombstones", "vacuum.md")):
            for refuse in (False, True):
                resp = pack.search(title, k=3, mode="bm25", refuse=refuse)
                assert resp.answered and resp.results, (title, refuse)
                assert resp.results[0].doc == page, (title, [r.doc for r in resp.results])
        # a word in no header and no content is still no evidence
        assert not pack.search("zeppelin", k=3, mode="bm25").results


def test_postings_count_the_header_then_the_content(built: Path, tmp_path: Path) -> None:
    with h5py.File(built, "r") as h:
        assert h["/bm25"].attrs[F.BM25_FIELDS] == F.HEADER_CONTENT
    assert describe(built)["bm25"]["fields"] == F.HEADER_CONTENT
    assert describe(make_pack(tmp_path / "old.kbpack"))["bm25"]["fields"] == "content"
    with PackReader(built) as r:
        n = r.counts["chunks"]
        blob, off = r.column(F.BM25_TERMS_BLOB), r.column(F.BM25_TERMS_OFFSETS)
        terms = [bytes(blob[off[i] : off[i + 1]]).decode() for i in range(len(off) - 1)]
        indptr, chunk, tf = r.column(F.BM25_INDPTR), r.column(F.BM25_CHUNK), r.column(F.BM25_TF)
        doc_len = r.column(F.BM25_DOC_LEN)
        stored: list[Counter[str]] = [Counter() for _ in range(n)]
        for t, term in enumerate(terms):
            rows = slice(int(indptr[t]), int(indptr[t + 1]))
            for c, f in zip(chunk[rows], tf[rows], strict=True):
                stored[int(c)][term] = int(f)
        seen_header_only = False
        for c in range(n):
            content = r.chunk_content(c)
            title = r.string_at(F.DOC_TITLE, r.value(F.CHUNK_DOCUMENT, c))
            path = r.section_path(r.value(F.CHUNK_SECTION, c))
            head = " > ".join(dict.fromkeys([title, *path]))
            want = Counter(tokenize(head)) + Counter(tokenize(content))
            assert stored[c] == want, (c, head)
            assert int(doc_len[c]) == len(tokenize(head)) + len(tokenize(content))
            seen_header_only |= "autoincrement" in want and "autoincrement" not in tokenize(content)
        assert seen_header_only  # the test corpus does exercise a title no content holds


def test_every_writer_writes_the_same_postings(built: Path, tmp_path: Path) -> None:
    src = _corpus(tmp_path / "src", PAGES)
    # update from a pack of the first two pages: the third is new, the others reused
    first = {k: PAGES[k] for k in sorted(PAGES)[:2]}
    old = _build(_corpus(tmp_path / "old", first), tmp_path / "old.kbpack")
    up = tmp_path / "up.kbpack"
    update_pack(old, BuildOptions(sources=[src], out=up, vectors=False))
    _same_bm25(up, built)
    # merge of two packs built from halves = one build of the whole
    rest = {k: PAGES[k] for k in sorted(PAGES)[2:]}
    a = _build(_corpus(tmp_path / "a", first), tmp_path / "a.kbpack")
    b = _build(_corpus(tmp_path / "b", rest), tmp_path / "b.kbpack")
    merged = merge_packs([a, b], tmp_path / "m.kbpack").path
    _same_bm25(merged, built)
    migrated = migrate_pack(built, tmp_path / "mig.kbpack").path
    assert migrated is not None
    _same_bm25(migrated, built)
    (tmp_path / "split").mkdir()
    split_pack(built, tmp_path / "split" / "s.kbpack", 10**9)
    members = sorted((tmp_path / "split").glob("*.kbpack"))
    assert len(members) == 1
    _same_bm25(members[0], built)


def test_a_pack_of_0_2_content_only_still_searches_and_verifies(tmp_path: Path) -> None:
    old = make_pack(tmp_path / "old.kbpack", dense=False)  # PostingsBuilder(): content only
    with h5py.File(old, "r") as h:
        assert F.BM25_FIELDS not in h["/bm25"].attrs
    assert verify_pack(old).intact
    with PackReader(old) as r:
        content = max((r.chunk_content(c) for c in range(r.counts["chunks"])), key=len)
    word = max(tokenize(content), key=len)
    with kbpack.open(old) as pack:
        resp = pack.search(word, k=3, mode="bm25")
        assert resp.results and word in tokenize(resp.results[0].content)
    # migrating it writes the header's terms too
    new = migrate_pack(old, tmp_path / "new.kbpack").path
    assert new is not None
    with h5py.File(new, "r") as h:
        assert h["/bm25"].attrs[F.BM25_FIELDS] == F.HEADER_CONTENT
    assert verify_pack(new, deep=True).intact
    # inspect says which is which, and how to get the headers indexed
    shown = {p: CliRunner().invoke(cli, ["inspect", str(p)]).output for p in (old, new)}
    assert "content only" in shown[old] and "kbpack migrate" in shown[old]
    assert "header and content" in shown[new] and "content only" not in shown[new]


def test_verify_checks_postings_against_what_fields_says(built: Path, tmp_path: Path) -> None:
    assert verify_pack(built, deep=True).intact

    def drop_fields(h: h5py.File) -> None:
        del h["/bm25"].attrs[F.BM25_FIELDS]

    # the postings hold header terms that the content alone does not explain: the attribute
    # is named, since the header explains every difference
    (tmp_path / "a").mkdir()
    found = codes(with_fixed_digests(built, tmp_path / "a", drop_fields), deep=True)
    assert ("bm25-fields", F.BM25) in found
    assert ("bm25-content-mismatch", F.BM25_CHUNK) not in found

    def add_fields(h: h5py.File) -> None:
        h["/bm25"].attrs[F.BM25_FIELDS] = F.HEADER_CONTENT

    (tmp_path / "c").mkdir()
    old = make_pack(tmp_path / "c" / "old.kbpack", dense=False)  # content only
    found = codes(with_fixed_digests(old, tmp_path / "c", add_fields), deep=True)
    assert ("bm25-fields", F.BM25) in found

    def one_more(h: h5py.File) -> None:  # damage the header-indexed postings themselves
        c = int(h[F.BM25_CHUNK][0])
        h[F.BM25_TF][0] = h[F.BM25_TF][0] + 1
        h[F.BM25_DOC_LEN][c] = h[F.BM25_DOC_LEN][c] + 1

    (tmp_path / "d").mkdir()
    found = codes(with_fixed_digests(built, tmp_path / "d", one_more), deep=True)
    assert ("bm25-content-mismatch", F.BM25_CHUNK) in found

    def unknown(h: h5py.File) -> None:
        h["/bm25"].attrs[F.BM25_FIELDS] = "title+content"

    (tmp_path / "b").mkdir()
    found = codes(with_fixed_digests(built, tmp_path / "b", unknown))
    assert ("bm25-tokenizer", F.BM25) in found


def test_a_builder_takes_a_header_exactly_when_it_indexes_headers() -> None:
    with pytest.raises(ValueError, match="pass one"):
        PostingsBuilder(headers=True).add(0, "text")
    with pytest.raises(ValueError, match="content only"):
        PostingsBuilder().add(0, "text", "Title")
    b = PostingsBuilder(headers=True)
    b.add(0, "alpha beta", "Alpha")
    b.add(1, "gamma", "")
    p = b.finish(2)
    assert p.fields == F.HEADER_CONTENT
    assert p.doc_len.tolist() == [3, 1]
    assert dict(zip(p.terms, np.diff(p.indptr).tolist(), strict=True)) == {
        "alpha": 1,
        "beta": 1,
        "gamma": 1,
    }
    assert p.tf[p.terms.index("alpha")] == 2
