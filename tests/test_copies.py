"""Copies of one passage (kbpack/copies.py): normalisation, MinHash, grouping."""

from __future__ import annotations

import numpy as np

from kbpack.copies import (
    MIN_SHINGLES,
    NEAR_THRESHOLD,
    SHINGLE,
    CopyFinder,
    WordHashes,
    exact_key,
    normal_words,
    signature,
    similarity,
)

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
    assert true_jaccard(PASSAGE, SIMILAR) <= NEAR_THRESHOLD - 0.2
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
