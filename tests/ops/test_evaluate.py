"""Metrics of kbpack.ops.evaluate against hand-computed values and small known rankings."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from kbpack.errors import UsageError
from kbpack.ops import evaluate as E


# -- Wilson score interval ------------------------------------------------------------------------
# Wilson: centre = (p + z²/2n) / (1 + z²/n), half = z/(1 + z²/n) * sqrt(p(1-p)/n + z²/4n²).
def test_wilson_8_of_10_by_hand() -> None:
    # z = 1.96, z² = 3.8416, n = 10, p = 0.8; 1 + z²/n = 1.38416
    # centre = (0.8 + 0.19208) / 1.38416 = 0.99208 / 1.38416 = 0.716737
    # half = (1.96 / 1.38416) * sqrt(0.016 + 0.009604) = 1.416022 * 0.160012 = 0.226581
    # -> [0.490156, 0.943318]
    low, high = E.wilson(8, 10, z=1.96)
    assert low == pytest.approx(0.490156, abs=2e-6)
    assert high == pytest.approx(0.943318, abs=2e-6)


def test_wilson_zero_successes_stays_inside_0_1() -> None:
    # p = 0: centre = 0.19208 / 1.38416 = 0.138770 and half = 1.416022 * sqrt(0.009604)
    # = 1.416022 * 0.098 = 0.138770 -> [0, 0.277540]; a normal interval would go negative.
    low, high = E.wilson(0, 10, z=1.96)
    assert low == 0.0
    assert high == pytest.approx(0.277540, abs=2e-6)
    assert E.wilson(10, 10, z=1.96) == pytest.approx((1 - 0.277540, 1.0), abs=2e-6)


def test_wilson_64_queries_at_half_gives_about_012() -> None:
    # BRIEF: "64 queries give about +/-0.12 on a recall of 0.5". p = 0.5 -> centre 0.5;
    # half = 1.96/1.060025 * sqrt(0.25/64 + 3.8416/16384) = 1.849013 * 0.064348 = 0.118981
    low, high = E.wilson(32, 64, z=1.96)
    assert (low + high) / 2 == pytest.approx(0.5)
    assert (high - low) / 2 == pytest.approx(0.118981, abs=2e-6)


def test_wilson_rejects_impossible_counts() -> None:
    with pytest.raises(ValueError):
        E.wilson(11, 10)


# -- exact sign test ------------------------------------------------------------------------------
def test_sign_test_18_wins_3_losses_matches_the_brief() -> None:
    # n = 21 discordant pairs, tail = C(21,0)+C(21,1)+C(21,2)+C(21,3) = 1+21+210+1330 = 1562
    # p = 2 * 1562 / 2^21 = 3124 / 2097152 = 0.00148964 (the brief reports p = 0.0015)
    assert E.sign_test(18, 3) == pytest.approx(3124 / 2097152)
    assert E.sign_test(3, 18) == E.sign_test(18, 3)
    assert round(E.sign_test(18, 3), 4) == 0.0015


def test_sign_test_small_cases() -> None:
    assert E.sign_test(5, 0) == pytest.approx(2 / 32)  # tail = C(5,0) = 1 -> 2/32 = 0.0625
    assert E.sign_test(3, 3) == 1.0  # 2 * (1+6+15+20)/64 = 84/64 -> capped at 1
    assert E.sign_test(0, 0) == 1.0  # no discordant pair: no evidence either way
    assert E.sign_test(7, 1) == pytest.approx(2 * (1 + 8) / 256)  # 18/256 = 0.0703


# -- recall, MRR, paired ---------------------------------------------------------------------------
RANKS = [1, 2, None, 4]


def test_recall_at_k_counts_ranks_within_k() -> None:
    assert E.recall_at(RANKS, 1).value == 0.25
    assert E.recall_at(RANKS, 2).value == 0.5
    assert E.recall_at(RANKS, 3).value == 0.5
    r4 = E.recall_at(RANKS, 4)
    assert (r4.value, r4.n) == (0.75, 4)
    assert (r4.low, r4.high) == E.wilson(3, 4)


def test_mrr_by_hand() -> None:
    # reciprocal ranks 1, 0.5, 0, 0.25 -> mean 1.75/4 = 0.4375; squared deviations
    # 0.31640625 + 0.00390625 + 0.19140625 + 0.03515625 = 0.546875; sd = sqrt(0.546875/3)
    # = 0.426956; half = 1.959964 * 0.426956 / 2 = 0.418409
    m = E.mrr(RANKS)
    assert m.value == pytest.approx(0.4375)
    assert m.low == pytest.approx(0.4375 - 0.418409, abs=1e-5)
    assert m.high == pytest.approx(0.4375 + 0.418409, abs=1e-5)
    assert E.mrr([None, None]).value == 0.0


def test_paired_counts_wins_losses_and_p() -> None:
    a = [1, None, 3, None, 2]
    b = [None, None, 1, 5, 1]
    at1, at5 = E.paired(a, b, [1, 5])
    # k=1: a finds q0 only; b finds q2 and q4 -> 1 win, 2 losses, 0 both, 2 neither
    assert (at1.wins, at1.losses, at1.both, at1.neither) == (1, 2, 0, 2)
    assert at1.p_value == pytest.approx(1.0)  # 2 * (C(3,0)+C(3,1)) / 8 = 1
    # k=5: a finds q0,q2,q4; b finds q2,q3,q4 -> win q0, loss q3, both q2,q4, neither q1
    assert (at5.wins, at5.losses, at5.both, at5.neither) == (1, 1, 2, 1)
    with pytest.raises(ValueError):
        E.paired([1], [1, 2], [1])


# -- needles ----------------------------------------------------------------------------------------
def test_hit_rank_compares_after_nfkc_and_whitespace_collapse() -> None:
    contents = ["nothing here", "the  ﬁle\n   is   closed.", "the file is closed."]
    assert E.hit_rank(contents, "file is closed") == 2  # "ﬁ" ligature -> "fi" under NFKC
    assert E.hit_rank(contents, "file is open") is None
    assert E.hit_rank(["half of the nee"], "half of the needle") is None  # whole needle only


def test_destroyed_lists_needles_no_chunk_holds_whole() -> None:
    needles = ["alpha beta", "gamma delta", "split across"]
    chunks = ["x alpha\nbeta y", "gamma   delta.", "a sentence split", "across two chunks"]
    assert E.destroyed(needles, chunks) == [2]
    assert E.destroyed(needles, []) == [0, 1, 2]


# -- calibration sweep ------------------------------------------------------------------------------
INF = math.inf
QUESTIONS = [
    E.Gate((0.2, 0.5), (True, False)),
    E.Gate((0.4, 0.3), (False, True)),  # the needle is 2nd in rank but closer
    E.Gate((-INF,), (True,)),  # passes whatever the threshold (a code-like term matched)
]
OOD = [E.Gate((0.45,), (False,)), E.Gate((0.6, 0.7), (False, False)), E.Gate((-INF,), (False,))]


def test_sweep_counts_by_hand() -> None:
    rows = E.sweep(QUESTIONS, OOD, [0.1, 0.25, 0.35, 0.45, 0.6], k=1)
    got = [(r.answered_correctly, r.answered_wrongly, r.falsely_refused, r.bluffed) for r in rows]
    assert got == [
        (1, 0, 2, 1),  # 0.10: only the always-passing question and OOD query
        (2, 0, 1, 1),  # 0.25: q0 passes with its needle first
        # 0.35: q1 is answered (its 0.3 result passes); refusal decides per query, so the
        # ranking's first result (0.4) takes the only slot (k=1): wrong
        (2, 1, 0, 1),
        (2, 1, 0, 2),  # 0.45
        (2, 1, 0, 3),  # 0.60
    ]
    # with k=2 the 0.4 result no longer pushes q1's needle out
    assert E.sweep(QUESTIONS, OOD, [0.45], k=2)[0].answered_correctly == 3


def test_recommend_fewest_bluffs_within_false_refusals_ties_to_stricter() -> None:
    rows = E.sweep(QUESTIONS, OOD, [0.1, 0.25, 0.35, 0.40, 0.45, 0.6], k=1)
    best = E.recommend(rows, max_false_refusal=0.05)
    assert best is not None and best.threshold == 0.35  # 0.35 and 0.40 tie at 1 bluff
    loose = E.recommend(rows, max_false_refusal=0.34)  # 1 of 3 refused is allowed
    assert loose is not None and loose.threshold == 0.25  # ties with 0.35 and 0.40
    assert E.recommend(rows, max_false_refusal=-1) is None
    assert "ties go to the smaller (stricter) threshold" in E.rule_text()


def test_bootstrap_interval_brackets_the_recommendation() -> None:
    # 40 answerable questions at distances 0.300-0.339, 20 out-of-domain queries answered from 0.5
    # (10 of them) or 0.7 (10): the rule picks 0.3, and resamples can only move it a little
    qs = [E.Gate((0.3 + 0.001 * i,), (True,)) for i in range(40)]
    ood = [E.Gate((0.5 if i < 10 else 0.7,), (False,)) for i in range(20)]
    grid = E.threshold_grid()
    best = E.recommend(E.sweep(qs, ood, grid, 1))
    assert best is not None and best.threshold == pytest.approx(0.34)  # 0.335 refuses 4 of 40
    ci = E.bootstrap_interval(qs, ood, grid, 1, resamples=200)
    assert ci is not None and ci[0] <= best.threshold <= ci[1] < 0.5
    assert ci == E.bootstrap_interval(qs, ood, grid, 1, resamples=200)  # seeded: reproducible
    assert E.bootstrap_interval(qs, ood, grid, 1, max_false_refusal=-1, resamples=20) is None


def test_threshold_grid_covers_cosine_range() -> None:
    grid = E.threshold_grid()
    assert grid[0] == 0.0 and grid[-1] == 2.0 and len(grid) == 401
    assert 0.525 in grid and 0.675 in grid


# -- input files ------------------------------------------------------------------------------------
def test_load_questions_reads_ids_and_phrasing(tmp_path: Path) -> None:
    f = tmp_path / "q.jsonl"
    f.write_text(
        '{"id": "a-doc", "query": "q?", "needle": "n", "phrasing": "doc"}\n\n'
        '{"query": "q2?", "needle": "n2"}\n'
    )
    qs = E.load_questions(f)
    assert qs == [E.Question("a-doc", "q?", "n", "doc"), E.Question("line3", "q2?", "n2", None)]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"query": "q", "needle": "n"}\n{"query": "q", ', "line 2: not JSON"),
        ('{"query": "q"}\n', "line 1: missing or empty string 'needle'; add it"),
        ('["q", "n"]\n', "line 1: not a JSON object; write one object per line"),
        ('{"id": 1, "query": "q", "needle": "n"}\n{"id": 1, "query": "q", "needle": "n"}\n',
         "line 2: id '1' used twice; make ids unique"),
        ("\n\n", "no questions; write one JSON object per line"),
    ],
)  # fmt: skip
def test_bad_question_files_give_one_line_naming_file_and_line(
    tmp_path: Path, content: str, message: str
) -> None:
    f = tmp_path / "q.jsonl"
    f.write_text(content)
    with pytest.raises(UsageError) as e:
        E.load_questions(f)
    assert str(e.value).startswith(str(f))
    assert message in str(e.value)
    assert "\n" not in str(e.value)
