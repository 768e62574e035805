"""The hybrid fusion rule (kbpack.search.fusion.convex) on small score vectors, computed by hand."""

from __future__ import annotations

import numpy as np
import pytest

from kbpack.search.fusion import convex


def test_convex_matches_hand_computed_scores() -> None:
    # cos 0.9, 0.5, 0.7 -> minmax 1, 0, 0.5; bm25 0, 6, 3 -> / 6 -> 0, 1, 0.5
    # fused = 0.8 * dense + 0.2 * lexical: 0.8, 0.2, 0.5
    ids, scores = convex(np.array([4, 7, 9]), np.array([0.9, 0.5, 0.7]), np.array([0.0, 6.0, 3.0]))
    assert ids.tolist() == [4, 9, 7]
    assert scores.tolist() == pytest.approx([0.8, 0.5, 0.2])


def test_a_strong_lexical_lead_overtakes_a_small_dense_gap() -> None:
    # chunk 2 is a hair behind on cosine but alone holds the query's rare term
    ids, scores = convex(np.array([1, 2, 3]), np.array([0.80, 0.79, 0.40]), np.array([0, 9.0, 0]))
    assert ids.tolist() == [2, 1, 3]
    assert scores[0] == pytest.approx(0.8 * (0.39 / 0.40) + 0.2)


def test_flat_bm25_does_not_reorder_dense() -> None:
    # every candidate shares the same common word: the lexical part is the same constant
    ids, _ = convex(np.array([5, 6, 7]), np.array([0.3, 0.9, 0.6]), np.array([1.5, 1.5, 1.5]))
    assert ids.tolist() == [6, 7, 5]


def test_no_shared_term_and_equal_cosines() -> None:
    ids, scores = convex(np.array([3, 1]), np.array([0.5, 0.5]), np.array([0.0, 0.0]))
    assert ids.tolist() == [1, 3]  # ties go to the smaller chunk id
    assert scores.tolist() == [0.8, 0.8]


def test_weight_is_a_parameter() -> None:
    ids, _ = convex(np.array([1, 2]), np.array([0.9, 0.8]), np.array([0.0, 4.0]), dense_weight=0.4)
    assert ids.tolist() == [2, 1]
    assert convex(np.zeros(0), np.zeros(0), np.zeros(0))[0].size == 0


@pytest.mark.parametrize(
    ("cos", "bm25"), [([0.5, np.nan], [1.0, 0.0]), ([0.5, 0.4], [-1.0, 0.0]), ([0.5], [1.0, 2.0])]
)
def test_bad_scores_are_refused(cos: list[float], bm25: list[float]) -> None:
    with pytest.raises(ValueError):
        convex(np.arange(len(cos)), np.array(cos), np.array(bm25))
