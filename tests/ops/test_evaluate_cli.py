"""``kbpack eval`` and ``kbpack calibrate`` on tiny packs with known answers, and the development
evaluation set's own checker."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kbpack.cli.main import cli, main
from kbpack.ops import evaluate as E
from tests.packs import markdown_doc, write_pack
from tests.paths import REPO_ROOT

ROOT = REPO_ROOT
CHECKER = ROOT / "fixtures" / "eval" / "check_needles.py"

DOCS = {
    "logs.md": """# Rotating logs

Logs grow without bound unless rotated.

## Configuration

Set max_bytes to 10485760 and backup_count to 5 in the handler.

## Troubleshooting

Error 0x80070005 means access denied: run the service as its own user.
""",
    "db.md": """# Database

## Threads

Pass check_same_thread=False to share one connection between threads, and lock it yourself.

## Compression

Archives use ZIP_DEFLATED when zlib is available, otherwise ZIP_STORED.
""",
}
# Three needles a lexical search finds at rank 1 (each query carries the needle's identifier),
# and one that spans a section boundary: no chunk can hold it whole, so it is destroyed.
QUESTIONS = [
    {"id": "q1-doc", "query": "what does error 0x80070005 mean", "phrasing": "doc",
     "needle": "Error 0x80070005 means access denied: run the service as its own user."},
    {"id": "q2-doc", "query": "ZIP_DEFLATED zlib", "phrasing": "doc",
     "needle": "Archives use ZIP_DEFLATED when zlib is available, otherwise ZIP_STORED."},
    {"id": "q3-ticket", "query": "share a connection between threads check_same_thread",
     "phrasing": "ticket",
     "needle": "Pass check_same_thread=False to share one connection between threads"},
    {"id": "q4-ticket", "query": "logs rotated configuration", "phrasing": "ticket",
     "needle": "Logs grow without bound unless rotated.\n\n## Configuration"},
]  # fmt: skip
OOD = [{"id": f"o{i}", "query": q} for i, q in enumerate(["orchid repotting", "tax forms 1040"])]


def run(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return r.exit_code, r.stdout


def run_main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """Through kbpack.cli.main.main, which turns library errors into one line and an exit code."""
    with pytest.raises(SystemExit) as e:
        main(list(args))
    return int(e.value.code or 0), capsys.readouterr().err


def jsonl(path: Path, rows: list[dict[str, str]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("evalfiles")
    return {"q": jsonl(d / "q.jsonl", QUESTIONS), "ood": jsonl(d / "ood.jsonl", OOD)}


@pytest.fixture(scope="module")
def cal_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Enough queries for calibrate to recommend (20 answerable, 10 out-of-domain): the small
    sets above, each asked five times under distinct ids."""
    d = tmp_path_factory.mktemp("calfiles")
    q = [{**r, "id": f"{r['id']}-{n}"} for n in range(5) for r in QUESTIONS]
    o = [{**r, "id": f"{r['id']}-{n}"} for n in range(5) for r in OOD]
    return {"q": jsonl(d / "q.jsonl", q), "ood": jsonl(d / "ood.jsonl", o)}


@pytest.fixture(scope="module")
def lexical_pack(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("lex") / "lex.kbpack"
    write_pack(out, [markdown_doc(n, t) for n, t in DOCS.items()])
    return out


@pytest.fixture(scope="module")
def vector_pack(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("corpus")
    for name, text in DOCS.items():
        (src / name).write_text(text)
    out = tmp_path_factory.mktemp("vec") / "vec.kbpack"
    code, stdout = run("build", str(src), "-o", str(out), "--model", str(tiny_model), "--json")
    assert code == 0, stdout
    return out


# -- eval -----------------------------------------------------------------------------------------
def test_eval_bm25_known_ranks_and_destroyed(lexical_pack: Path, files: dict[str, Path]) -> None:
    code, stdout = run("eval", str(lexical_pack), str(files["q"]), "--json", "--ranks")
    assert code == 0
    rep = json.loads(stdout)
    assert list(rep["modes"]) == ["bm25"]  # no vectors: only bm25 runs, and it says so
    assert rep["ranks"]["bm25"] == {"q1-doc": 1, "q2-doc": 1, "q3-ticket": 1, "q4-ticket": None}
    assert rep["destroyed"] == {"needles": 1, "ids": ["q4-ticket"]}
    r1 = rep["modes"]["bm25"]["all"]["recall"]["1"]
    low, high = E.wilson(3, 4)
    assert (r1["value"], r1["n"]) == (0.75, 4)
    assert (r1["low"], r1["high"]) == (round(low, 4), round(high, 4))
    assert rep["modes"]["bm25"]["doc"]["recall"]["20"]["value"] == 1.0
    assert rep["modes"]["bm25"]["ticket"]["mrr"]["value"] == 0.5
    assert rep["paired"] == []


def test_eval_human_output(lexical_pack: Path, files: dict[str, Path]) -> None:
    code, stdout = run("eval", str(lexical_pack), str(files["q"]), "-k", "1,4")
    assert code == 0
    lines = stdout.splitlines()
    assert lines[1] == "destroyed answers: 1 of 4 needles (q4-ticket)"
    assert lines[3].split() == ["mode", "subset", "n", "R@1", "R@4", "MRR"]
    low, high = E.wilson(3, 4)
    assert lines[4].split()[:5] == ["bm25", "all", "4", "0.75", f"[{low:.2f},{high:.2f}]"]


def test_eval_against_itself_is_all_ties(lexical_pack: Path, files: dict[str, Path]) -> None:
    code, stdout = run(
        "eval", str(lexical_pack), str(files["q"]), "--against", str(lexical_pack), "--json"
    )
    assert code == 0
    rep = json.loads(stdout)
    every_k = [x for c in rep["paired"] for x in c["k"]]
    assert every_k and all(x["wins"] == x["losses"] == 0 and x["p_value"] == 1.0 for x in every_k)


def test_eval_modes_paired_on_vector_pack(
    vector_pack: Path, files: dict[str, Path], tiny_model: Path
) -> None:
    code, stdout = run(
        "eval", str(vector_pack), str(files["q"]), "--mode", "hybrid", "--mode", "bm25", "--json",
        "--model", str(tiny_model),
    )  # fmt: skip
    assert code == 0
    rep = json.loads(stdout)
    assert list(rep["modes"]) == ["hybrid", "bm25"]
    c = next(c for c in rep["paired"] if c["subset"] == "all")
    assert (c["a"], c["b"], c["n"]) == ("hybrid", "bm25", 4)
    for x in c["k"]:
        assert x["wins"] + x["losses"] + x["both"] + x["neither"] == 4
        assert x["p_value"] == pytest.approx(E.sign_test(x["wins"], x["losses"]), abs=1e-6)
    # bm25 finds the identifier needles at rank 1 here exactly as on the lexical pack
    assert rep["modes"]["bm25"]["all"]["recall"]["1"]["value"] == 0.75


def test_eval_dense_on_lexical_pack_is_a_usage_error(
    lexical_pack: Path, files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = run_main(capsys, "eval", str(lexical_pack), str(files["q"]), "--mode", "dense")
    assert code == 2
    assert err == (
        f"kbpack: error: {lexical_pack}: this pack has no vectors (built with --no-vectors); "
        "use --mode bm25\n"
    )


def test_eval_bad_question_file_names_file_and_line(
    lexical_pack: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"query": "q", "needle": "n"}\n{"query": "no needle"}\n')
    code, err = run_main(capsys, "eval", str(lexical_pack), str(bad))
    assert code == 2
    assert err == f"kbpack: error: {bad} line 2: missing or empty string 'needle'; add it\n"


def test_eval_bad_k_is_a_usage_error(lexical_pack: Path, files: dict[str, Path]) -> None:
    r = CliRunner().invoke(cli, ["eval", str(lexical_pack), str(files["q"]), "-k", "0,x"])
    assert r.exit_code == 2
    assert "give positive integers separated by commas" in r.output


# -- calibrate ------------------------------------------------------------------------------------
def test_calibrate_sweep_and_rule(
    vector_pack: Path, cal_files: dict[str, Path], tiny_model: Path
) -> None:
    code, stdout = run(
        "calibrate", str(vector_pack), "--questions", str(cal_files["q"]), "--ood", str(cal_files["ood"]),
        "--json", "--model", str(tiny_model),
    )  # fmt: skip
    assert code == 0
    rep = json.loads(stdout)
    rows = rep["sweep"]
    assert rows[0]["threshold"] == 0.0 and rows[-1]["threshold"] == 2.0
    for a, b in itertools.pairwise(rows):  # a looser gate refuses less, bluffs more
        assert b["falsely_refused"] <= a["falsely_refused"] and b["bluffed"] >= a["bluffed"]
    # at distance 2 every query passes: nothing refused, every OOD query bluffed
    assert (rows[-1]["falsely_refused"], rows[-1]["bluffed"]) == (0, 5 * len(OOD))
    for r in rows:
        assert r["answered_correctly"] + r["answered_wrongly"] + r["falsely_refused"] == 20
    best = rep["recommended"]
    allowed = [r for r in rows if r["falsely_refused"] / 20 <= 0.05]
    assert best["falsely_refused"] <= 1
    assert best["bluffed"] == min(r["bluffed"] for r in allowed)
    assert best["threshold"] == min(
        r["threshold"] for r in allowed if r["bluffed"] == best["bluffed"]
    )
    lo, hi = rep["interval"]
    assert lo <= best["threshold"] <= hi
    vs = rep["vs_default"]
    default = next(r for r in rows if r["threshold"] == 0.675)
    assert vs["looser"] == (best["threshold"] > 0.675)
    assert vs["extra_bluffs"] == best["bluffed"] - default["bluffed"]


def test_calibrate_write_stores_threshold_and_provenance(
    vector_pack: Path, cal_files: dict[str, Path], tmp_path: Path, tiny_model: Path
) -> None:
    out = tmp_path / "calibrated.kbpack"
    code, stdout = run(
        "calibrate", str(vector_pack), "--questions", str(cal_files["q"]), "--ood", str(cal_files["ood"]),
        "--write", "-o", str(out), "--json", "--model", str(tiny_model),
    )  # fmt: skip
    assert code == 0
    rep = json.loads(stdout)
    assert rep["written"] == str(out)
    code, stdout = run("inspect", str(out), "--json")
    search = json.loads(stdout)["search"]
    cal = search["calibration"]
    assert search["max_distance"] == cal["threshold"] == rep["recommended"]["threshold"]
    assert cal["questions"]["file"] == "q.jsonl" and cal["ood"]["count"] == 5 * len(OOD)
    assert cal["rule"] == E.rule_text()
    code, stdout = run("query", str(out), "orchid repotting", "--json", "--model", str(tiny_model))
    assert json.loads(stdout)["threshold"] == cal["threshold"]  # query now uses it by default


def test_calibrate_human_output_marks_the_recommendation(
    vector_pack: Path, cal_files: dict[str, Path], tiny_model: Path
) -> None:
    code, stdout = run(
        "calibrate", str(vector_pack), "--questions", str(cal_files["q"]), "--ood", str(cal_files["ood"]),
        "--model", str(tiny_model),
    )  # fmt: skip
    assert code == 0
    assert stdout.splitlines()[2].split() == ["threshold", "correct", "wrong", "refused", "bluffed"]
    assert sum(line.startswith("*") for line in stdout.splitlines()) == 1
    assert "recommended threshold: " in stdout and "(not written: add --write" in stdout


def test_calibrate_refuses_to_recommend_from_a_tiny_set(
    vector_pack: Path, files: dict[str, Path], tiny_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """4 answerable and 2 out-of-domain queries: the sweep is shown, nothing is recommended, and
    --write is refused (issue 13: 10 + 6 queries once recommended a looser threshold than the
    default, and the pack then answered "how do I fix a leaking tap")."""
    args = [
        "calibrate",
        str(vector_pack),
        "--questions",
        str(files["q"]),
        "--ood",
        str(files["ood"]),
    ]
    code, stdout = run(*args, "--json", "--model", str(tiny_model))
    rep = json.loads(stdout)
    assert code == 0 and rep["recommended"] is None and rep["sweep"]
    assert rep["too_few"].startswith("too few queries to recommend a threshold: 4 answerable")
    code, stdout = run(*args, "--model", str(tiny_model))
    assert "no recommendation: too few queries" in stdout and "recommended threshold" not in stdout
    code, err = run_main(capsys, *args, "--write", "--model", str(tiny_model))
    assert code == 2 and "need 20" in err and "nothing written" in err


def test_eval_and_calibrate_are_library_calls_the_commands_only_print(
    vector_pack: Path, tiny_model: Path, cal_files: dict[str, Path]
) -> None:
    """The measuring lives in kbpack.ops.evaluate_pack / kbpack.ops.calibrate: their reports are what
    --json prints, less the envelope."""
    from kbpack.ops.calibrate import calibrate_pack
    from kbpack.ops.evaluate_pack import evaluate_pack

    q, ood, model = cal_files["q"], cal_files["ood"], str(tiny_model)
    report, qs = evaluate_pack(vector_pack, q, ks=[1, 4], model=tiny_model, show_ranks=True)
    code, stdout = run(
        "eval", str(vector_pack), str(q), "-k", "1,4", "--ranks", "--json", "--model", model
    )
    printed = json.loads(stdout)
    assert code == 0 and len(qs) == 20
    assert {k: v for k, v in printed.items() if k not in ("schema", "command")} == report
    with pytest.raises(ValueError, match="give one"):
        evaluate_pack(vector_pack, q, against=vector_pack, rerank=tiny_model)

    report, rows, best = calibrate_pack(vector_pack, q, ood, model=tiny_model)
    code, stdout = run(
        "calibrate",
        str(vector_pack),
        "--questions",
        str(q),
        "--ood",
        str(ood),
        "--json",
        "--model",
        model,
    )
    printed = json.loads(stdout)
    assert code == 0 and report["sweep"] == [r.as_dict() for r in rows]
    assert report["recommended"] == (best.as_dict() if best else None)
    assert {k: v for k, v in printed.items() if k not in ("schema", "command")} == report


def test_calibrate_says_what_a_looser_threshold_costs() -> None:
    from kbpack.cli.commands.calibrate import render_calibration

    rows = E.sweep(
        [E.Gate((0.7,), (True,))] * 20, [E.Gate((0.68,), (False,))] * 10, E.threshold_grid(), 1
    )
    best = E.recommend(rows)
    assert best is not None and best.threshold == 0.7  # every question is at 0.7: looser
    from kbpack.ops.calibrate import vs_default

    report = {
        "pack": "p", "mode": "hybrid", "k": 1, "questions": 20, "ood": 10, "rule": E.rule_text(),
        "too_few": None, "interval": [0.7, 0.7], "vs_default": vs_default(rows, best),
    }  # fmt: skip
    assert report["vs_default"] == {
        "default": 0.675, "looser": True, "extra_bluffs": 10, "fewer_false_refusals": 20
    }  # fmt: skip
    text = render_calibration(report, rows, best)
    assert "looser than the default 0.675: 10 more bluffed and 20 fewer falsely refused" in text


def test_calibrate_needs_vectors(
    lexical_pack: Path, files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    args = [
        "calibrate",
        str(lexical_pack),
        "--questions",
        str(files["q"]),
        "--ood",
        str(files["ood"]),
    ]
    code, err = run_main(capsys, *args)
    assert code == 2
    assert "this pack has no vectors (built with --no-vectors); there is no distance" in err


# -- the development evaluation set ---------------------------------------------------------------
def test_dev_set_passes_its_checker() -> None:
    r = subprocess.run([sys.executable, str(CHECKER)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("OK: ")


def test_checker_fails_on_missing_duplicate_and_heading_needles(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.md").write_text(
        "# Unique Heading Words\n\nThe quick fox jumps.\n\nTwice said. Twice said.\n"
    )
    (corpus / "b.html").write_text("<h2>Html Title Here</h2><p>Only once in html.</p>")
    cases = {
        "q1": "The quick fox jumps.",  # fine
        "q2": "Only once in html.",  # fine
        "q3": "Twice said.",  # duplicated
        "q4": "Unique Heading Words",  # a heading
        "q5": "Html Title Here",  # an HTML heading
        "q6": "not in the corpus",  # missing
    }
    rows = [
        {"id": f"{i}-{ph}", "query": "?", "needle": n, "phrasing": ph}
        for i, n in cases.items()
        for ph in ("doc", "ticket")
    ]
    q = jsonl(tmp_path / "q.jsonl", rows)
    ood = jsonl(tmp_path / "ood.jsonl", [{"id": f"o{i}", "query": "x"} for i in range(20)])
    args = [sys.executable, str(CHECKER), "--corpus", str(corpus), "--questions", str(q)]
    r = subprocess.run([*args, "--ood", str(ood)], capture_output=True, text=True)
    assert r.returncode == 1
    problems = sorted(r.stderr.splitlines())
    assert problems == [
        "only 6 needles; at least 40 required",
        "q3-doc: needle occurs 2 times (a.md x2)",
        "q4-doc: needle is (part of) a heading in a.md",
        "q5-doc: needle is (part of) a heading in b.html",
        "q6-doc: needle occurs 0 times (nowhere)",
    ]


def test_calibration_gate_matches_what_query_does(vector_pack: Path, tiny_model: Path) -> None:
    """The sweep must predict the real refusal gate: for each query and threshold, search with
    that threshold answers exactly when the gate model says so, with the same correctness."""
    import kbpack
    from kbpack.ops.calibrate import gate as gate_of

    with kbpack.open(str(vector_pack), model=tiny_model) as p:
        queries = [(q["query"], q["needle"]) for q in QUESTIONS] + [(o["query"], None) for o in OOD]
        for query, needle in queries:
            gate = gate_of(p, query, needle, "hybrid")
            for t in (0.0, 0.3, 0.6, 0.9, 1.2):
                row = E.sweep([gate], [], [t], k=2)[0]
                resp = p.search(query, k=2, mode="hybrid", max_distance=t)
                assert resp.answered == (row.falsely_refused == 0), (query, t)
                found = needle is not None and E.hit_rank([r.content for r in resp.results], needle)
                assert bool(found) == (row.answered_correctly == 1), (query, t)
