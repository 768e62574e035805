"""Several packs searched as one: every score equals the one a pack built from the union gives."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from scale_corpus import PART_A, PART_B, build_pack, write_folder

import kbpack
from kbpack.cli.main import cli
from kbpack.errors import UsageError
from kbpack.pack.rewrite import rewrite_search_settings

QUERIES = [
    "log handler",  # terms in both packs: df summed
    "check_same_thread",  # one pack only
    "SIGKILL rotate logs",
    "EU-WEST-1 regions",
    "0x80070005 access denied",
    "how do I stop the disk from filling up?",
    "nothing here matches zzzz",
]


@pytest.fixture(scope="module")
def model(wide_model: Path) -> Path:
    return wide_model  # conftest: built once per session


@pytest.fixture(scope="module")
def packs(tmp_path_factory: pytest.TempPathFactory, model: Path) -> dict[str, Path]:
    """a.kbpack and b.kbpack from two folders, union.kbpack from one folder holding both."""
    root = tmp_path_factory.mktemp("fed")
    a = write_folder(root / "a", PART_A)
    b = write_folder(root / "b", PART_B)
    u = write_folder(root / "u", {**PART_A, **PART_B})
    out = {
        "a": build_pack(a, root / "a.kbpack", model),
        "b": build_pack(b, root / "b.kbpack", model),
        "union": build_pack(u, root / "union.kbpack", model),
        "a_lex": build_pack(a, root / "a-lex.kbpack", None),
        "b_lex": build_pack(b, root / "b-lex.kbpack", None),
        "union_lex": build_pack(u, root / "union-lex.kbpack", None),
    }
    return out


def _key(resp: kbpack.search.searcher.SearchResponse) -> list[tuple[object, ...]]:
    return [(r.doc, r.start, r.end, r.score, r.distance, r.bm25_rank) for r in resp.results]


@pytest.mark.parametrize("query", QUERIES)
def test_bm25_scores_equal_the_union_pack(packs: dict[str, Path], query: str) -> None:
    with (
        kbpack.open_many([packs["a_lex"], packs["b_lex"]]) as fed,
        kbpack.open(packs["union_lex"]) as one,
    ):
        ids_f, scores_f = fed.searcher._bm25(query, None)
        ids_u, scores_u = one.searcher._bm25(query, None)
        # union.kbpack lists a's documents then b's (names sort that way), so the ids agree
        assert ids_f.tolist() == ids_u.tolist()
        assert np.array_equal(scores_f, scores_u)  # bit for bit, not merely close
        assert _key(fed.search(query, k=10, mode="bm25")) == _key(
            one.search(query, k=10, mode="bm25")
        )


def test_bm25_differs_from_one_pack_alone(packs: dict[str, Path]) -> None:
    """The summed statistics matter: pack a alone scores "log handler" differently."""
    with (
        kbpack.open_many([packs["a_lex"], packs["b_lex"]]) as fed,
        kbpack.open(packs["a_lex"]) as a,
    ):
        _, fed_scores = fed.searcher._bm25("log handler", None)
        _, a_scores = a.searcher._bm25("log handler", None)
        assert fed_scores.size > a_scores.size
        assert not np.allclose(np.sort(fed_scores)[-a_scores.size :], np.sort(a_scores))


@pytest.mark.parametrize("query", QUERIES)
@pytest.mark.parametrize("mode", ["hybrid", "dense"])
def test_hybrid_and_dense_equal_the_union_pack(
    packs: dict[str, Path], model: Path, query: str, mode: str
) -> None:
    with (
        kbpack.open_many([packs["a"], packs["b"]], model=model) as fed,
        kbpack.open(packs["union"], model=model) as one,
    ):
        got = fed.search(query, k=8, mode=mode, refuse=False)
        want = one.search(query, k=8, mode=mode, refuse=False)
        assert not got.lexical_only
        # float32 matrix products of different shapes may differ in the last bits (BLAS blocks)
        assert [k[:3] + k[5:] for k in _key(got)] == [k[:3] + k[5:] for k in _key(want)]
        for g, w in zip(got.results, want.results, strict=True):
            assert g.score == pytest.approx(w.score, abs=1e-5)
            assert g.distance == pytest.approx(w.distance, abs=1e-5)
        assert [r.pack for r in got.results] == [
            "a.kbpack" if r.doc in PART_A else "b.kbpack" for r in got.results
        ]


def test_filters_apply_across_packs(packs: dict[str, Path], model: Path) -> None:
    with (
        kbpack.open_many([packs["a"], packs["b"]], model=model) as fed,
        kbpack.open(packs["union"], model=model) as one,
    ):
        for kw in ({"doc": "*.md"}, {"kind": "txt"}, {"section": "threads"}):
            got = fed.search("log handler", k=5, refuse=False, **kw)
            want = one.search("log handler", k=5, refuse=False, **kw)
            assert got.results
            assert [r.locator for r in got.results] == [r.locator for r in want.results]


def test_each_pack_keeps_its_own_threshold(
    packs: dict[str, Path], model: Path, tmp_path: Path
) -> None:
    strict = tmp_path / "a-strict.kbpack"
    rewrite_search_settings(packs["a"], strict, 0.0, None)  # refuses every dense match
    lenient = tmp_path / "b-lenient.kbpack"
    rewrite_search_settings(packs["b"], lenient, 2.0, None)  # accepts every one
    with kbpack.open_many([strict, lenient], model=model) as fed:
        resp = fed.search("how do I stop the disk from filling up?", k=8, mode="dense")
        assert resp.answered
        assert {r.pack for r in resp.results} == {"b-lenient.kbpack"}
        assert any("its own threshold" in n for n in resp.notes)
        # a threshold given by the caller applies to every pack
        both = fed.search(
            "how do I stop the disk from filling up?", k=8, mode="dense", max_distance=2.0
        )
        assert {r.pack for r in both.results} == {"a-strict.kbpack", "b-lenient.kbpack"}


def test_packs_of_two_models_are_searched_lexically_and_say_so(
    packs: dict[str, Path], tiny_model_b: Path, tmp_path: Path
) -> None:
    src = write_folder(tmp_path / "src", PART_B)
    other = build_pack(src, tmp_path / "other.kbpack", tiny_model_b)
    with kbpack.open_many([packs["a"], other]) as fed:
        resp = fed.search("check_same_thread", k=3)
        assert resp.lexical_only and resp.results
        assert "other.kbpack was embedded with tiny-b" in resp.notes[0]
        with pytest.raises(UsageError, match="--mode dense needs one model"):
            fed.search("check_same_thread", mode="dense")
    with kbpack.open_many([packs["a"], packs["b_lex"]]) as fed:
        assert "has no vectors" in fed.search("log handler").notes[0]


def test_cli_queries_several_packs_and_names_them(packs: dict[str, Path], model: Path) -> None:
    args = ["query", str(packs["a"]), str(packs["b"]), "check_same_thread", "--model", str(model)]
    r = CliRunner().invoke(cli, [*args, "--json", "-k", "2"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    top = json.loads(r.stdout)["results"][0]
    assert top["pack"] == "b.kbpack" and top["doc"] == "delta.md"
    r = CliRunner().invoke(cli, [*args, "-k", "1"], catch_exceptions=False)
    assert r.stdout.startswith("[1] b.kbpack: delta.md#char=")
    # one pack: no pack field, as before
    r = CliRunner().invoke(
        cli, ["query", str(packs["b"]), "check_same_thread", "--json", "--model", str(model)]
    )
    assert "pack" not in json.loads(r.stdout)["results"][0]


def test_cli_refusal_over_several_packs_exits_3(packs: dict[str, Path]) -> None:
    r = CliRunner().invoke(
        cli, ["query", str(packs["a_lex"]), str(packs["b_lex"]), "zzzz", "--mode", "bm25"]
    )
    assert r.exit_code == 3
    assert r.stdout.startswith('NO ANSWER: no chunk matches any term of "zzzz"')


def test_batch_queries_read_postings_once_and_score_the_same(packs: dict[str, Path]) -> None:
    """From the second query on, postings come from memory and terms are memoised: same scores."""
    with (
        kbpack.open_many([packs["a_lex"], packs["b_lex"]]) as fed,
        kbpack.open(packs["union_lex"]) as one,
    ):
        for _ in range(2):
            for query in QUERIES:
                ids_f, scores_f = fed.searcher._bm25(query, None)
                ids_u, scores_u = one.searcher._bm25(query, None)
                assert ids_f.tolist() == ids_u.tolist()
                # the union pack bakes its scores from its second query (numpy's log1p, which
                # may differ from math.log1p in the last bit)
                np.testing.assert_allclose(scores_f, scores_u, rtol=1e-12)
        assert fed.searcher.corpus._in_memory and fed.searcher.corpus._parts  # type: ignore[attr-defined]
