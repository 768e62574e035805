"""build and query end to end through the CLI, with the real llama.cpp on a tiny model."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_run import run

from kbpack.pack.format import MAGIC  # an old pack's first bytes: -o replaces only packs

DOCS = {
    "logs.md": """# Rotating logs

Logs grow without bound unless rotated.

## Configuration

Set `max_bytes` to 10485760 and `backup_count` to 5 in the handler.

## Troubleshooting

Error 0x80070005 means access denied: run the service as its own user.
The process got SIGKILL from the out-of-memory killer when the buffer grew past the limit.
""",
    "db.md": """# Database

## Threads

Pass check_same_thread=False to share one connection between threads, and lock it yourself.

## Compression

Archives use ZIP_DEFLATED when zlib is available, otherwise ZIP_STORED.
""",
    "notes.txt": "Deploy the service to EU-WEST-1 first, then to the other regions.\n\nUse %z in strftime for the UTC offset.\n\nRun python -X importtime to see slow imports.\n",
    "broken.pdf": "this is not a pdf",
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("corpus")
    for name, text in DOCS.items():
        (root / name).write_text(text)
    return root


@pytest.fixture(scope="module")
def model(wide_model: Path) -> Path:
    return wide_model  # conftest: built once per session


@pytest.fixture(scope="module")
def pack(corpus: Path, model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("packs") / "docs.kbpack"
    code, stdout, _ = run("build", str(corpus), "-o", str(out), "--model", str(model), "--json")
    assert code == 0
    report = json.loads(stdout)
    assert report["counts"]["documents_ok"] == 3
    assert report["counts"]["documents_failed"] == 1
    assert report["failed"][0]["name"] == "broken.pdf"
    return out


def test_build_summary_counts_what_was_written(pack: Path) -> None:
    code, stdout, _ = run("inspect", str(pack), "--json")
    info = json.loads(stdout)
    assert code == 0
    assert info["counts"]["chunks"] == info["counts"]["vectors"] > 0
    assert info["failed"][0]["name"] == "broken.pdf"


@pytest.mark.parametrize(
    "query",
    [
        "check_same_thread",
        "ZIP_DEFLATED",
        "-X importtime",
        "%z",
        "EU-WEST-1",
        "0x80070005",
        "SIGKILL",
    ],
)
def test_identifiers_are_found_as_typed(pack: Path, query: str) -> None:
    code, stdout, _ = run("query", str(pack), "--json", "-k", "1", "--", query)
    assert code == 0, stdout
    top = json.loads(stdout)["results"][0]
    assert query.split()[-1] in top["content"] or query in top["content"]


def test_json_result_fields_and_quote_is_content(pack: Path) -> None:
    code, stdout, _ = run("query", str(pack), "ZIP_DEFLATED", "--json")
    assert code == 0
    res = json.loads(stdout)["results"][0]
    for key in (
        "rank",
        "doc",
        "section",
        "from",
        "to",
        "page",
        "locator",
        "distance",
        "bm25_rank",
        "content",
    ):
        assert key in res
    assert res["doc"] == "db.md" and res["locator"] == f"db.md#char={res['from']},{res['to']}"
    assert res["section"] == "Database > Compression"
    assert not res["content"].startswith("Database >")  # never the embedded header


def test_refusal_exit_3(pack: Path, model: Path) -> None:
    q = ["query", str(pack), "completely unrelated words", "--model", str(model)]
    code, stdout, _ = run(*q, "--max-distance", "0")
    assert code == 3
    assert stdout.startswith(
        'NO ANSWER: nothing under cosine distance 0 for "completely unrelated words"'
    )
    code, stdout, _ = run(*q, "--max-distance", "0", "--json")
    assert code == 3 and json.loads(stdout)["answered"] is False


def test_exact_identifier_passes_the_gate_in_hybrid(pack: Path, model: Path) -> None:
    code, stdout, _ = run(
        "query", str(pack), "ZIP_DEFLATED", "--model", str(model), "--max-distance", "0", "--json"
    )
    assert code == 0
    assert "ZIP_DEFLATED" in json.loads(stdout)["results"][0]["content"]


def test_other_model_means_lexical_only(pack: Path, tiny_model_b: Path) -> None:
    code, stdout, _ = run(
        "query", str(pack), "ZIP_DEFLATED", "--model", str(tiny_model_b), "--json"
    )
    out = json.loads(stdout)
    assert code == 0 and out["lexical_only"] is True
    assert "not the pack's model" in out["notes"][0]


def test_context_section_and_filters(pack: Path) -> None:
    code, stdout, _ = run(
        "query", str(pack), "SIGKILL", "--context", "section", "--json", "-k", "1"
    )
    res = json.loads(stdout)["results"][0]
    assert res["section"] == "Rotating logs > Troubleshooting" and res["content"].startswith(
        "## Troubleshooting"
    )
    code, stdout, _ = run(
        "query", str(pack), "service", "--doc", "*.txt", "--mode", "bm25", "--json"
    )
    assert {r["doc"] for r in json.loads(stdout)["results"]} == {"notes.txt"}
    code, stdout, _ = run("query", str(pack), "service", "--type", "md", "--mode", "bm25", "--json")
    assert code == 0
    assert {r["doc"] for r in json.loads(stdout)["results"]} == {"logs.md"}


def test_batch_mode_one_line_per_query(pack: Path, tmp_path: Path) -> None:
    batch = tmp_path / "q.txt"
    batch.write_text('ZIP_DEFLATED\n{"id": "t2", "query": "SIGKILL"}\n')
    code, stdout, _ = run("query", str(pack), "--batch", str(batch), "--json")
    lines = [json.loads(x) for x in stdout.splitlines()]
    assert code == 0 and [x["id"] for x in lines] == [1, "t2"]
    assert "SIGKILL" in lines[1]["results"][0]["content"]


def test_prompt_format_packs_under_budget(pack: Path) -> None:
    code, stdout, _ = run(
        "query", str(pack), "SIGKILL", "--format", "prompt", "--budget-tokens", "200", "--json"
    )
    out = json.loads(stdout)
    assert code == 0 and out["tokens"] <= 200
    assert "[1]" in out["prompt"] and "only the numbered sources" in out["prompt"]
    assert out["citations"][0]["locator"].startswith("logs.md#char=")


def test_no_vectors_pack_answers_with_bm25(corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "bm25.kbpack"
    code, _, _ = run("build", str(corpus), "-o", str(out), "--no-vectors", "--quiet")
    assert code == 0
    code, stdout, _ = run("query", str(out), "check_same_thread", "--json")
    res = json.loads(stdout)
    assert code == 0 and res["lexical_only"] is True
    assert "check_same_thread" in res["results"][0]["content"]


def test_embedded_model_is_used_without_model_install(
    corpus: Path, model: Path, tmp_path: Path
) -> None:
    out = tmp_path / "self.kbpack"
    code, _, _ = run(
        "build", str(corpus), "-o", str(out), "--model", str(model), "--embed-model", "--quiet"
    )
    assert code == 0
    code, stdout, _ = run("query", str(out), "rotate logs", "--mode", "dense", "--json")
    res = json.loads(stdout)
    assert code == 0 and res["lexical_only"] is False and res["results"][0]["distance"] is not None


def test_python_api(pack: Path, model: Path) -> None:
    import kbpack
    from kbpack.pack import format as F

    with kbpack.open(pack, model=model) as p:
        resp = p.search("0x80070005", k=2)
        assert resp.answered and not resp.lexical_only and resp.results[0].doc == "logs.md"
        top = resp.results[0]
        doc = p.reader.strings(F.DOC_NAME).index("logs.md")
        assert p.reader.text(doc)[top.start : top.end] == top.content


def test_strict_makes_failures_an_error(corpus: Path, tmp_path: Path) -> None:
    code, _, _ = run(
        "build",
        str(corpus),
        "-o",
        str(tmp_path / "s.kbpack"),
        "--no-vectors",
        "--strict",
        "--quiet",
    )
    assert code == 1


def test_missing_source_is_a_usage_error(tmp_path: Path) -> None:
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "kbpack",
            "build",
            str(tmp_path / "nope"),
            "-o",
            str(tmp_path / "x.kbpack"),
            "--no-vectors",
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2
    assert (
        "nope" in r.stderr
        and "Traceback" not in r.stderr
        and len(r.stderr.strip().splitlines()) == 1
    )


def test_interrupt_leaves_old_pack_and_no_partial_file(
    corpus: Path, tiny_model: Path, tmp_path: Path
) -> None:
    """SIGINT mid-build: exit 130, the existing pack untouched, no temp file left."""
    big = tmp_path / "big"
    big.mkdir()
    for i in range(400):
        (big / f"d{i:03}.md").write_text(
            f"# Doc {i}\n\n" + ("Lorem ipsum dolor sit amet. " * 40 + "\n\n") * 5
        )
    out = tmp_path / "p.kbpack"
    out.write_bytes(MAGIC + b" old pack")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kbpack",
            "build",
            str(big),
            "-o",
            str(out),
            "--model",
            str(tiny_model),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list(tmp_path.glob(".p.kbpack.tmp-*")):
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert out.read_bytes() == MAGIC + b" old pack"
    assert not list(tmp_path.glob(".p.kbpack.tmp-*"))


def test_sigkill_never_leaves_a_partial_pack_at_the_output_path(
    model: Path, tmp_path: Path
) -> None:
    """kill -9 mid-build: the output path still holds the old pack, byte for byte."""
    big = tmp_path / "big"
    big.mkdir()
    for i in range(300):
        (big / f"d{i:03}.md").write_text(
            f"# Doc {i}\n\n" + ("Lorem ipsum dolor sit amet. " * 40 + "\n\n") * 5
        )
    out = tmp_path / "p.kbpack"
    out.write_bytes(MAGIC + b" old pack")
    proc = subprocess.Popen(
        [sys.executable, "-m", "kbpack", "build", str(big), "-o", str(out), "--model", str(model)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list(tmp_path.glob(".p.kbpack.tmp-*")):
        time.sleep(0.05)
    proc.kill()
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert out.read_bytes() == MAGIC + b" old pack"


def test_chunking_settings_are_recorded_and_reused_by_update(corpus: Path, tmp_path: Path) -> None:
    from kbpack.pack.read import PackReader

    first = tmp_path / "a.kbpack"
    code, _, _ = run(
        "build", str(corpus), "-o", str(first), "--no-vectors", "--max-chars", "120", "-q"
    )
    assert code == 0
    with PackReader(first) as r:
        assert r.chunking == {"window": None, "max_chars": 120, "overlap": 0}
    (corpus / "notes.txt").write_text(DOCS["notes.txt"] + "\nOne more line about EU-WEST-2.\n")
    try:
        updated, fresh = tmp_path / "u.kbpack", tmp_path / "f.kbpack"
        assert run("update", str(first), str(corpus), "-o", str(updated), "-q")[0] == 0
        assert (
            run("build", str(corpus), "-o", str(fresh), "--no-vectors", "--max-chars", "120", "-q")[
                0
            ]
            == 0
        )
        code, stdout, _ = run("diff", str(updated), str(fresh))
        assert code == 0, stdout
    finally:
        (corpus / "notes.txt").write_text(DOCS["notes.txt"])


def test_batch_bm25_path_ranks_like_the_single_query_path(pack: Path) -> None:
    """From the second query on, BM25 uses baked scores; the ranking must not change."""
    import kbpack

    queries = ["service user", "ZIP_DEFLATED compression", "logs rotated handler", "service user"]
    with kbpack.open(pack, load_model=False) as p:
        first = [p.search(q, mode="bm25", k=10).as_dict()["results"] for q in queries]
        again = [p.search(q, mode="bm25", k=10).as_dict()["results"] for q in queries]
    assert first[0] and first == again and first[0] == first[3]


def test_hybrid_order_is_the_convex_fusion_of_the_packs_scores(pack: Path, model: Path) -> None:
    """The hybrid ranking, recomputed from the pack's own cosine and BM25 scores with the pure
    rule: a change to either list, or to how they are joined, shows here."""
    import numpy as np

    import kbpack
    from kbpack.search.fusion import RULE, convex
    from kbpack.search.searcher import heading_only
    from kbpack.text.analyze import tokenize

    query = "which compression do archives use when zlib is missing"
    with kbpack.open(pack, model=model) as p:
        s = p.searcher
        resp = p.search(query, k=50, refuse=False)
        sims = s.dense_similarities(query)
        bm_ids, bm_scores = s._bm25_all(query, None)
    n = sims.size  # fewer than 100 chunks: every chunk is a candidate
    lexical = np.zeros(n)
    lexical[bm_ids] = bm_scores
    want, _ = convex(np.arange(n), sims, lexical)
    # the same order, less the chunks that are only a heading (never an answer on their own)
    with kbpack.open(pack, model=model) as p:
        kept = [
            c
            for c in want.tolist()
            if not heading_only(
                tokenize(p.reader.chunk_content(c)),
                p.searcher._result(0, c, 0, None, None, None, "chunk"),
            )
        ]
    assert len(kept) < n  # the pack has heading-only chunks: the test sees them dropped
    assert [r.chunk for r in resp.results] == kept
    assert resp.fusion == RULE and resp.as_dict()["fusion"] == RULE
    for r in resp.results:
        assert r.distance == pytest.approx(1 - float(sims[r.chunk]), abs=1e-6)
    code, stdout, _ = run("query", str(pack), query, "--model", str(model), "--json")
    assert code == 0 and json.loads(stdout)["fusion"] == RULE
    code, stdout, _ = run(
        "query", str(pack), query, "--mode", "dense", "--model", str(model), "--json"
    )
    assert code == 0 and json.loads(stdout)["fusion"] is None


@pytest.mark.parametrize("bad", ["nan", "-0.1", "2.5"])
def test_max_distance_outside_0_2_is_a_usage_error(pack: Path, bad: str) -> None:
    code, _, stderr = run("query", str(pack), "logs", "--max-distance", bad)
    assert code == 2
    assert "--max-distance" in stderr and "between 0 and 2" in stderr
