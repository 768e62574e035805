"""``kbpack ask`` without a chat model: usage errors name the file and the fix, and the
extractive answer (``--extractive``) always carries a citation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kbpack.cli.main import main
from kbpack.errors import Exit
from tests.paths import REPO_ROOT

ROOT = REPO_ROOT
GOLDEN = ROOT / "fixtures" / "golden" / "v2.kbpack"


def run(capfd: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as e:
        main(list(args))
    out, err = capfd.readouterr()
    return int(e.value.code or 0), out, err


@pytest.fixture()
def pack(tmp_path: Path) -> str:
    copy = tmp_path / "p.kbpack"
    copy.write_bytes(GOLDEN.read_bytes())
    return str(copy)


def test_a_wrong_llm_is_one_line_naming_the_file_and_the_fix(
    capfd: pytest.CaptureFixture[str], pack: str, tmp_path: Path, tiny_model: Path
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("not a model")
    cases = [
        ([], "give the chat model: --llm MODEL.gguf"),
        (["--llm", str(tmp_path / "nope.gguf")], "nope.gguf: no such file; give a llama.cpp"),
        (["--llm", str(notes)], "notes.txt: not a GGUF file (no GGUF magic at byte 0)"),
        (["--llm", str(tiny_model)], "an embedding model (bert), not a chat model"),
        (["--llm", str(tiny_model), "--extractive"], "either --llm or --extractive"),
    ]
    for args, message in cases:
        code, out, err = run(capfd, "ask", pack, "pypdf", *args)
        assert code == Exit.USAGE and out == "", (args, err)
        assert len(err.splitlines()) == 1 and message in err, (args, err)


def test_extractive_answer_quotes_the_pack_with_citations(
    capfd: pytest.CaptureFixture[str], pack: str
) -> None:
    code, out, err = run(capfd, "ask", pack, "what is pypdf capable of splitting", "--extractive")
    assert code == Exit.OK, err + out
    assert "“pypdf is a free and open-source" in out
    assert "From the pack (extractive answer, no model):" in out and "\nSources:\n[1] " in out
    code, out, _ = run(
        capfd, "ask", pack, "what is pypdf capable of splitting", "--extractive", "--json"
    )
    doc = json.loads(out)
    assert doc["fallback"] is True and doc["refused"] is False and doc["model"] is None
    assert doc["sentences"] and all(s["supported"] and s["citations"] for s in doc["sentences"])
    numbers = {c["n"] for c in doc["citations"]}
    assert {n for s in doc["sentences"] for n in s["citations"]} <= numbers


def test_a_refusal_generates_nothing_and_exits_3(
    capfd: pytest.CaptureFixture[str], pack: str
) -> None:
    code, out, _ = run(capfd, "ask", pack, "orchid repotting", "--extractive", "--json")
    doc = json.loads(out)
    assert code == Exit.REFUSED and doc["refused"] is True
    assert doc["sentences"] == [] and doc["nearest"] == [] and "Not in this pack" in doc["answer"]
    code, out, _ = run(capfd, "ask", pack, "orchid repotting", "--extractive", "--show-passages")
    assert code == Exit.REFUSED and "Nearest passages" in out
