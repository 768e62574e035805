"""Copies of one passage (kbpack/pack/copies.py): normalisation, MinHash, grouping."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np
import pytest

from kbpack.pack import format as F
from kbpack.pack.copies import (
    MIN_SHINGLES,
    NEAR_THRESHOLD,
    RULE,
    SHINGLE,
    CopyFinder,
    WordHashes,
    exact_key,
    normal_words,
    signature,
    similarity,
)
from kbpack.pack.read import PackReader
from tests.fixture_pack import codes, with_fixed_digests
from tests.packs import markdown_doc, write_pack
from tests.paths import REPO_ROOT

PASSAGE = (
    "Orphaning a package. If you can no longer maintain a package, you need to inform others "
    "and make sure that the package is marked as orphaned. You should set the package "
    "maintainer to Debian QA Group and submit a bug report against the pseudo package wnpp."
)
# The same passage as a PDF extractor gives it: hyphenated at line ends, soft hyphens, a page
# header in the middle, other whitespace and quotes.
PDF_COPY = (
    "Orphaning a pack-\nage.  If you can no longer main\u00adtain a package, you need to in-\n"
    "form others and make sure that the package is marked as orphaned.\n"
    "Debian Developer's Reference 12.18\n"
    "You should set the package maintainer to Debian QA Group and submit a bug report "
    "against the pseudo package wnpp."
)
# Another section of the same manual: the same boilerplate frame, different facts.
SIMILAR = (
    "Adopting a package. If you can no longer find a maintainer for a package, you need to "
    "inform others and make sure that the package is listed as needing help. You should set "
    "the bug title to RFH and submit a bug report against the pseudo package wnpp."
)


def estimated(a: str, b: str) -> float:
    h = WordHashes()
    sa, sb = signature(h(normal_words(a))), signature(h(normal_words(b)))
    assert sa is not None and sb is not None
    return similarity(sa, sb)


def true_jaccard(a: str, b: str) -> float:
    def shingles(t: str) -> set[tuple[str, ...]]:
        w = normal_words(t)
        return {tuple(w[i : i + SHINGLE]) for i in range(len(w) - SHINGLE + 1)}

    x, y = shingles(a), shingles(b)
    return len(x & y) / len(x | y)


def test_normal_words_undo_pdf_furniture() -> None:
    assert normal_words("pack-\nage main\u00adtain ﬁle Ünïcode") == [
        "package",
        "maintain",
        "file",
        "ünïcode",
    ]
    # a hyphen inside a line is kept as a separator: "well-known" is two words, as in HTML
    assert normal_words("well-known") == ["well", "known"]
    assert normal_words("-- ** --") == []


def test_identical_after_normalisation_share_a_key() -> None:
    html = "Orphaning a package.\n\nIf you can no longer maintain it"
    pdf = "ORPHANING a pack-\nage  If you can no longer main\u00adtain it."
    assert exact_key(normal_words(html)) == exact_key(normal_words(pdf))
    assert exact_key(normal_words(html)) != exact_key(normal_words(html + " today"))


def test_minhash_estimate_tracks_the_true_jaccard() -> None:
    for a, b in [(PASSAGE, PDF_COPY), (PASSAGE, SIMILAR), (PDF_COPY, SIMILAR)]:
        assert abs(estimated(a, b) - true_jaccard(a, b)) < 0.2  # 64 permutations: sd <= 0.07
    assert estimated(PASSAGE, PASSAGE) == 1.0


def test_the_threshold_separates_a_copy_from_a_similar_section() -> None:
    assert true_jaccard(PASSAGE, PDF_COPY) >= NEAR_THRESHOLD + 0.05
    assert true_jaccard(PASSAGE, SIMILAR) <= NEAR_THRESHOLD - 0.15
    assert estimated(PASSAGE, PDF_COPY) >= NEAR_THRESHOLD
    assert estimated(PASSAGE, SIMILAR) < NEAR_THRESHOLD


def test_short_texts_have_no_signature() -> None:
    h = WordHashes()
    words = [f"w{i}" for i in range(MIN_SHINGLES + SHINGLE - 2)]
    assert signature(h(words)) is None
    assert signature(h([*words, "one more"])) is not None


def test_signatures_are_reproducible() -> None:
    """Constants come from SHA-256, words from BLAKE2b: a build gives the same groups anywhere."""
    s = signature(WordHashes()(normal_words(PASSAGE)))
    assert s is not None and s.dtype == np.uint32 and s.size == 64
    assert s[:4].tolist() == signature(WordHashes()(normal_words(PASSAGE)))[:4].tolist()  # type: ignore[index]


def test_groups_identical_anywhere_and_near_only_across_documents() -> None:
    finder = CopyFinder()
    finder.add(0, [PASSAGE, SIMILAR, "Contents", "----"])  # rows 0-3
    finder.add(1, ["Intro text that is not elsewhere at all in this pack", PDF_COPY])  # 4, 5
    finder.add(2, ["Contents", PDF_COPY + " extra words at the end", "contents."])  # 6, 7, 8
    g = finder.groups()
    assert g.members() == [[0, 5, 7], [2, 6, 8]]
    assert g.group.tolist() == [0, 0, 0, 1, 1, 1]
    assert g.exact.tolist() == [1, 0, 0, 1, 1, 1]  # "----" has no words: never a copy


def test_near_copies_inside_one_document_are_not_grouped() -> None:
    finder = CopyFinder()
    finder.add(0, [PASSAGE, PDF_COPY])
    assert finder.groups().members() == []
    finder = CopyFinder(across_documents_only=False)
    finder.add(0, [PASSAGE, PDF_COPY])
    assert finder.groups().members() == [[0, 1]]


def test_no_copies_gives_empty_groups() -> None:
    finder = CopyFinder()
    finder.add(0, [PASSAGE, SIMILAR])
    g = finder.groups()
    assert g.n_groups == 0 and g.chunk.dtype == np.int32 and g.members() == []


# --- in a pack: stored by the writer, checked by verify, used by search ------------------------

OTHER = (
    "Adopting a package is done by retitling the wnpp bug, uploading the package with you as "
    "the maintainer, and closing the bug in the changelog of the upload with the right number."
)


def copies_pack(out: Path) -> Path:
    """The same passage as HTML-like text and as a hyphenated PDF-like copy, plus another."""
    docs = [
        markdown_doc("guide.md", f"# Orphaning\n\n{PASSAGE}\n\n## Adopting\n\n{OTHER}\n"),
        markdown_doc("guide-pdf.txt", f"# Orphaning\n\n{PDF_COPY}\n"),
        markdown_doc("similar.md", f"# Help\n\n{SIMILAR}\n"),
    ]
    write_pack(out, docs)
    return out


def test_the_writer_stores_groups_and_verify_accepts_them(tmp_path: Path) -> None:
    with PackReader(copies_pack(tmp_path / "c.kbpack")) as r:
        # chunked at 200 characters: the PDF-like copy's first chunk has the same words after
        # normalisation (hyphens joined), its second a page header more (a near copy)
        assert r.has_copies and r.counts["copies"] == 4
        members = r.column(F.COPY_CHUNK).tolist()
        names = r.strings(F.DOC_NAME)
        assert [names[r.column(F.CHUNK_DOCUMENT)[c]] for c in members] == [
            "guide.md",
            "guide-pdf.txt",
        ] * 2
        assert r.column(F.COPY_GROUP).tolist() == [0, 0, 1, 1]
        assert r.column(F.COPY_EXACT).tolist() == [1, 1, 1, 0]
        assert r.attrs(F.COPIES)[F.COPIES_RULE_ATTR] == RULE
    assert codes(tmp_path / "c.kbpack") == set()


def _set(path: str, row: int, value: object) -> Callable[[h5py.File], None]:
    return lambda h: h[path].__setitem__(row, value)


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (_set(F.COPY_CHUNK, 1, 10**6), ("copy-chunk", F.COPY_CHUNK)),
        (_set(F.COPY_CHUNK, 1, 0), ("copy-order", F.COPY_GROUP)),
        (_set(F.COPY_GROUP, 1, 1), ("copy-order", F.COPY_GROUP)),
        (_set(F.COPY_EXACT, 3, 1), ("copy-exact", F.COPY_EXACT)),  # a near copy called identical
        (_set(F.COPY_EXACT, 1, 0), ("copy-exact", F.COPY_EXACT)),  # and the other way round
    ],
)
def test_verify_names_broken_groups(
    tmp_path: Path, edit: Callable[[h5py.File], None], expected: tuple[str, str]
) -> None:
    p = with_fixed_digests(copies_pack(tmp_path / "c.kbpack"), tmp_path, edit)
    found = codes(p)
    assert expected in found, found
    assert not any(c.startswith("digest") for c, _ in found)


def test_search_shows_one_result_per_group_listing_the_other_place(tmp_path: Path) -> None:
    import kbpack

    with kbpack.open(copies_pack(tmp_path / "c.kbpack"), load_model=False) as p:
        resp = p.search("orphaning a package wnpp maintainer", k=5, mode="bm25")
        docs = [r.doc for r in resp.results]
        assert "guide-pdf.txt" not in docs and "similar.md" in docs, docs  # merely similar: kept
        for res in resp.results:
            if res.doc == "guide.md" and "Adopting" not in res.section:  # chunks 0 and 1
                assert res.also == res.collapsed and len(res.also) == 1, res
                assert res.also[0].startswith("guide-pdf.txt#char=")
                assert res.as_dict()["collapsed"] == res.collapsed
        # a query only the first copy answers still lists the other place (not collapsed)
        solo = p.search("orphaning a package", k=5, mode="bm25", doc="guide.md").results[0]
        assert solo.doc == "guide.md" and solo.collapsed == []
        assert solo.also and solo.also[0].startswith("guide-pdf.txt#char=")


def test_a_0_2_0_pack_has_no_groups_and_keeps_the_identical_words_rule(tmp_path: Path) -> None:
    """fixtures/golden/v2-0.2.0.kbpack is the golden pack kbpack 0.2.0 wrote: no /copies."""
    import kbpack

    old = REPO_ROOT / "fixtures/golden/v2-0.2.0.kbpack"
    with PackReader(old) as r:
        assert not r.has_copies and r.copy_groups() is None and "copies" not in r.counts
    assert codes(old) == set()
    with kbpack.open(old, load_model=False) as p:
        assert p.search("install pypdf", mode="bm25").answered
    out = tmp_path / "old.kbpack"
    write_pack(
        out,
        [markdown_doc("a.md", f"# A\n\n{PASSAGE}\n"), markdown_doc("b.md", f"# A\n\n{PASSAGE}\n")],
        copies=False,
    )
    with kbpack.open(out, load_model=False) as p:
        assert not p.reader.has_copies
        results = p.search("orphaning a package", mode="bm25").results
        assert [r.doc for r in results] == ["a.md", "a.md"]  # two chunks, each with a copy
        assert all(r.collapsed == r.also and len(r.also) == 1 for r in results)


def test_a_pack_set_collapses_copies_across_its_packs(tmp_path: Path) -> None:
    import kbpack

    a, b = tmp_path / "a.kbpack", tmp_path / "b.kbpack"
    write_pack(a, [markdown_doc("guide.md", f"# Orphaning\n\n{PASSAGE}\n")])
    write_pack(
        b,
        [
            markdown_doc("guide.pdf.txt", f"# Orphaning\n\n{PDF_COPY}\n"),
            markdown_doc("s.md", f"# S\n\n{SIMILAR}\n"),
        ],
    )
    with kbpack.open_many([a, b], load_model=False) as s:
        resp = s.search("orphaning a package wnpp maintainer", k=5, mode="bm25")
        docs = [r.doc for r in resp.results]
        assert "guide.pdf.txt" not in docs and "s.md" in docs, docs
        guides = [r for r in resp.results if r.doc == "guide.md"]
        assert len(guides) == 2 and all(g.collapsed for g in guides)
        assert guides[0].collapsed[0].startswith("b.kbpack: guide.pdf.txt#char=")


def test_the_independent_reader_agrees_on_the_groups(tmp_path: Path) -> None:
    """Spec §3.10 is enough to re-derive which members are identical copies."""
    from tests import independent_reader as ind

    p = copies_pack(tmp_path / "c.kbpack")
    groups = ind.read_copies(str(p))
    assert groups == [[(0, True, True), (3, True, True)], [(1, True, True), (4, False, False)]]
    assert ind.read_copies(str(REPO_ROOT / "fixtures/golden/v2-0.2.0.kbpack")) is None


def test_merge_recomputes_the_groups(tmp_path: Path) -> None:
    """Copies in two packs become one group in their merge (the writer groups what it writes)."""
    from kbpack.ops.merge import merge_packs

    a, b = tmp_path / "a.kbpack", tmp_path / "b.kbpack"
    write_pack(a, [markdown_doc("guide.md", f"# Orphaning\n\n{PASSAGE}\n")])
    write_pack(b, [markdown_doc("guide.pdf.txt", f"# Orphaning\n\n{PDF_COPY}\n")])
    with PackReader(a) as r:
        assert r.counts["copies"] == 0
    merged = merge_packs([a, b], tmp_path / "ab.kbpack").path
    with PackReader(merged) as r:
        assert r.column(F.COPY_GROUP).tolist() == [0, 0, 1, 1]
        assert r.column(F.COPY_EXACT).tolist() == [1, 1, 1, 0]
    assert codes(merged) == set()


def test_diff_says_when_copy_groups_change(tmp_path: Path) -> None:
    from kbpack.ops.diff import diff_packs

    docs = [
        markdown_doc("a.md", f"# A\n\n{PASSAGE}\n"),
        markdown_doc("b.md", f"# A\n\n{PDF_COPY}\n"),
    ]
    old, new = tmp_path / "old.kbpack", tmp_path / "new.kbpack"
    write_pack(old, docs, copies=False)
    write_pack(new, docs)
    d = diff_packs(old, new)
    assert "chunks in copy groups not stored -> 4" in d.differences
    assert d.as_dict()["counts"]["copies"] == {"old": 0, "new": 4}
    assert diff_packs(new, new).same_content


def test_context_section_lists_the_other_places_as_sections(tmp_path: Path) -> None:
    """With --context section a result cites its section, so the places in ``also`` are the
    other copies' sections too (they were chunk locators: a mix no reader could compare)."""
    import kbpack
    from kbpack.search.searcher import locator

    with kbpack.open(copies_pack(tmp_path / "c.kbpack"), load_model=False) as p:
        r = p.reader
        by_chunk = p.search("orphaning a package", k=5, mode="bm25", doc="guide.md").results[0]
        solo = p.search(
            "orphaning a package", k=5, mode="bm25", doc="guide.md", context="section"
        ).results[0]
        assert solo.chunk == by_chunk.chunk and solo.doc == "guide.md"
        names = r.strings(F.DOC_NAME)
        sections = r.column(F.CHUNK_SECTION)
        want = []
        for c in p.searcher.copy_members(solo.chunk):
            sec = int(sections[c])
            doc = names[int(r.column(F.CHUNK_DOCUMENT)[c])]
            start, end = int(r.column(F.SEC_FROM)[sec]), int(r.column(F.SEC_TO)[sec])
            want.append(locator(doc, start, end, None))
        assert want and solo.also == want
        assert solo.also != by_chunk.also  # the chunk context still lists chunks
        for where in solo.also:  # each names the whole section of the copy
            doc, frag = where.split("#char=")
            start, end = map(int, frag.split(","))
            text = r.text(names.index(doc))
            assert text[start:end].startswith("# Orphaning") or "Orphaning" in text[start:end]
