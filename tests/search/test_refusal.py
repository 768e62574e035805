"""The refusal gate on real documents with the real default model (issue 13): a year or an
acronym that is only a detail of an out-of-domain question must not open the identifier gate."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from kbpack.cli.main import cli
from tests.paths import REPO_ROOT

DOCS = REPO_ROOT / "fixtures" / "docs"


@pytest.fixture(scope="module")
def fixtures_pack(default_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("refusal") / "fixtures.kbpack"
    r = CliRunner().invoke(cli, ["build", str(DOCS), "-o", str(out), "--quiet", "--threads", "1"])
    assert r.exit_code == 0, r.output
    return out


@pytest.mark.default_model
@pytest.mark.slow
@pytest.mark.parametrize(
    "query",
    [
        "who won the football world cup in 2018",  # 2018 is rare in HISTORY.rst (a release date)
        "What does NASA stand for?",
        "what is the weather in 2014 in Paris",  # ltnews21 is the May 2014 issue
    ],
)
def test_years_and_acronyms_do_not_answer_out_of_domain_questions(
    fixtures_pack: Path, query: str
) -> None:
    import kbpack

    with kbpack.open(fixtures_pack) as p:
        resp = p.search(query, k=5)
        assert not resp.answered, [(r.doc, r.distance) for r in resp.results]
        if "2018" in query:
            # the gate's own verdict, not only the distance: the chunk holding 2018 is there
            ranked = p.search(query, k=50, refuse=False).results
            holder = next(r for r in ranked if "2018" in r.content)
            gate = p.searcher.identifier_gate(query)
            assert gate is not None and gate.codes == ("2018",)
            assert not gate.opens(holder.content)


@pytest.mark.default_model
@pytest.mark.slow
def test_questions_about_the_documents_are_still_answered(fixtures_pack: Path) -> None:
    import kbpack

    with kbpack.open(fixtures_pack) as p:
        for query, doc in [
            ("What changed in python-docx 0.8.7?", "python-docx/HISTORY.rst"),
            ("What does TableStyle do?", "reportlab/reportlab-userguide-ch7-tables.pdf"),
        ]:
            resp = p.search(query, k=3)
            assert resp.answered and resp.results[0].doc == doc


@pytest.mark.default_model
@pytest.mark.slow
def test_an_italian_question_the_pack_cannot_answer_is_refused(
    default_model: Path, tmp_path: Path
) -> None:
    """The English-only model puts any two Italian texts close: "how do I make risotto" lies
    under the threshold from an Italian article on retrieval. A query in Italian must also share
    a content word with the result; the article's own questions still do."""
    import kbpack

    seed = DOCS.parent / "eval" / "corpus" / "seeds" / "003_cb119964fd2c760c.txt"
    out = tmp_path / "it.kbpack"
    r = CliRunner().invoke(cli, ["build", str(seed), "-o", str(out), "--quiet", "--threads", "1"])
    assert r.exit_code == 0, r.output
    with kbpack.open(out) as p:
        risotto = "Come si prepara il risotto alla milanese?"
        nearest = p.search(risotto, k=1, refuse=False).results[0]
        assert nearest.distance is not None
        assert nearest.distance <= p.searcher.default_threshold()  # distance alone would answer
        assert not p.search(risotto, k=5).answered
        asked = (
            "Quanti token restano per il contenuto recuperato nel contesto totale di Private Mind?"
        )
        resp = p.search(asked, k=5)
        assert resp.answered
        assert any("3000-3500 token" in res.content for res in resp.results)


EVAL = DOCS.parent / "eval"


@pytest.fixture(scope="module")
def dev_years_pack(default_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three documents of the development set that hold the years its out-of-domain queries
    ask about (2016 in HTTP-COOKIES.md, 1999 in the debconf protocol, 2018 in SQLite's quirks)."""
    out = tmp_path_factory.mktemp("dev-years") / "dev-years.kbpack"
    corpus = EVAL / "corpus"
    sources = ["curl/HTTP-COOKIES.md", "debian/debconf_specification.txt", "sqlite/quirks.html"]
    args = [*(str(corpus / s) for s in sources), "-o", str(out), "--quiet", "--no-pieces"]
    r = CliRunner().invoke(cli, ["build", *args, "--threads", "1"])
    assert r.exit_code == 0, r.output
    return out


@pytest.mark.default_model
@pytest.mark.slow
@pytest.mark.parametrize(
    ("query", "year"),
    [
        ("Who won the football world cup in 2018?", "2018"),
        ("Who won the Nobel Prize in Literature in 2016?", "2016"),
        ("Who was president of the United States in 1999?", "1999"),
        ("What does NASA stand for?", None),
    ],
)
def test_dev_set_years_and_acronyms_are_refused(
    dev_years_pack: Path, query: str, year: str | None
) -> None:
    """The development set's own out-of-domain queries (fixtures/eval/ood.jsonl), on the
    documents that hold their years: the year opens no gate and the distance is too far."""
    import json

    import kbpack

    assert query in {json.loads(line)["query"] for line in (EVAL / "ood.jsonl").open()}
    with kbpack.open(dev_years_pack) as p:
        assert not p.search(query, k=5).answered
        if year is not None:
            ranked = p.search(query, k=100, refuse=False).results
            assert any(year in r.content for r in ranked)  # the year is in the pack
            gate = p.searcher.identifier_gate(query)
            assert gate is not None and year in gate.codes
            assert not any(gate.opens(r.content) for r in ranked)
        resp = p.search("How many fields does each line of the cookie file format have?", k=3)
        assert resp.answered and resp.results[0].doc == "HTTP-COOKIES.md"
