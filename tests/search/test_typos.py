""" "Did you mean" (kbpack.search.typos): edit distances by hand, ranking, and the query output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kbpack.cli.main import cli
from kbpack.pack.bm25_store import TermLookup
from kbpack.search.typos import best_suggestions, checkable, near_terms, osa_distance


@pytest.mark.parametrize(
    ("a", "b", "d"),
    [
        ("checkpoint", "checkpoint", 0),
        ("chekpoint", "checkpoint", 1),  # a letter left out
        ("foriegn", "foreign", 1),  # two neighbours swapped: one edit
        ("journl", "journals", 2),
        ("cokie", "cookie", 1),
        ("kitten", "sitting", 3),
    ],
)
def test_osa_distance(a: str, b: str, d: int) -> None:
    assert osa_distance(a, b, limit=5) == d
    assert osa_distance(b, a, limit=5) == d


def test_osa_distance_stops_past_the_limit() -> None:
    assert osa_distance("kitten", "sitting", limit=1) == 2
    assert osa_distance("a", "abcdef", limit=2) == 3  # lengths alone rule it out


def test_suggestions_nearest_first_then_most_frequent() -> None:
    vocab = ["cake", "code", "coke", "come", "cookie", "cookies", "dog", "kookie"]
    df = {"cake": 1, "code": 50, "coke": 2, "come": 30, "cookie": 9, "cookies": 4, "dog": 7}
    lookup = TermLookup.from_terms(vocab)
    near = near_terms("cokie", lookup, lambda row: df.get(vocab[row], 1))
    assert "kookie" not in near  # another first letter
    assert near["cookie"] == (1, 9) and near["coke"] == (1, 2) and near["code"] == (2, 50)
    best = best_suggestions("cokie", near)
    assert best is not None
    assert [t for t, _, _ in best.did_you_mean] == ["cookie", "coke", "code"]
    assert best.as_dict()["did_you_mean"][0] == {"term": "cookie", "distance": 1, "chunks": 9}
    assert best_suggestions("zzz", {}) is None


def test_codes_and_short_words_are_not_checked() -> None:
    assert checkable("configre")
    assert not checkable("0x80070006") and not checkable("sqlite_bussy") and not checkable("ab")


@pytest.fixture(scope="module")
def pack(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.packs import markdown_doc, write_pack

    out = tmp_path_factory.mktemp("typos") / "t.kbpack"
    write_pack(
        out,
        [
            markdown_doc(
                "logs.md", "# Logs\n\nThe logs are rotated every night by the cron job.\n"
            ),
            markdown_doc("db.md", "# Database\n\nThe journal is deleted after each commit.\n"),
        ],
    )
    return out


def test_query_shows_did_you_mean_and_never_rewrites(pack: Path) -> None:
    r = CliRunner().invoke(
        cli, ["query", str(pack), "when are lgos rotated", "--mode", "bm25", "--json"]
    )
    out = json.loads(r.stdout)
    assert out["suggestions"] == [
        {"term": "lgos", "did_you_mean": [{"term": "logs", "distance": 1, "chunks": 1}]}
    ]
    assert out["query"] == "when are lgos rotated"  # asked as typed: "rotated" still matches
    assert [x["doc"] for x in out["results"]] == ["logs.md"]
    r = CliRunner().invoke(cli, ["query", str(pack), "jurnal deleted", "--mode", "bm25"])
    assert "did you mean: journal (for 'jurnal', in no chunk)" in r.stdout
    r = CliRunner().invoke(cli, ["query", str(pack), "jurnal", "--mode", "bm25"])
    assert r.exit_code == 3 and "did you mean: journal" in r.stdout  # also under NO ANSWER
    r = CliRunner().invoke(cli, ["query", str(pack), "logs rotated", "--mode", "bm25", "--json"])
    assert json.loads(r.stdout)["suggestions"] == []


def test_the_prefilter_never_drops_a_near_term() -> None:
    """near_terms prunes by length and byte histogram before computing distances: it must find
    exactly what a brute-force scan of the vocabulary finds, accented words included."""
    import random

    from kbpack.search.typos import max_edits

    rng = random.Random(7)
    letters = "aeiostnrlcdéèàß"
    vocab = sorted(
        {"".join(rng.choices(letters, k=rng.randint(3, 9))) for _ in range(2000)},
        key=lambda w: w.encode(),
    )
    lookup = TermLookup.from_terms(vocab)
    for _ in range(30):
        word = "".join(rng.choices(letters, k=rng.randint(3, 9)))
        limit = max_edits(word)
        brute = {
            v
            for v in vocab
            if v[0] == word[0] and v != word and osa_distance(word, v, limit) <= limit
        }
        assert set(near_terms(word, lookup, lambda row: 1)) == brute, word
