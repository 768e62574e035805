"""``kbpack query`` as a script and a tired operator use it: --batch that never loses answers,
whole quotes with --full, code that keeps its lines, names that cannot reach the terminal raw."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kbpack.cli.main import main
from kbpack.cli.render import quote, safe
from kbpack.errors import Exit

CODE = "    zcat access.log.gz | grep -c 404\n    logrotate --force /etc/logrotate.conf"
DOCS = {
    "ops.md": "# Operations\n\nRotate the logs with logrotate every week; keep four weeks.\n\n"
    + CODE
    + "\n\n"
    + "The archive policy keeps monthly tarballs. " * 30,
    "db.md": "# Database\n\nArchives use ZIP_DEFLATED when zlib is available.\n",
    "evil\x1b[31mred\nname.md": "# Evil\n\nThe escape name holds SIGKILL handling notes.\n",
}


def run(capfd: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as e:
        main(list(args))
    out, err = capfd.readouterr()
    return int(e.value.code or 0), out, err


@pytest.fixture(scope="module")
def pack(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("q")
    src = root / "src"
    src.mkdir()
    for name, text in DOCS.items():
        (src / name).write_text(text)
    out = root / "docs.kbpack"
    with pytest.raises(SystemExit) as e:
        main(["build", str(src), "-o", str(out), "--no-vectors", "-q"])
    assert e.value.code == 0
    return out


def test_batch_reports_bad_lines_and_answers_every_good_one(
    capfd: pytest.CaptureFixture[str], pack: Path, tmp_path: Path
) -> None:
    batch = tmp_path / "q.txt"
    batch.write_bytes(
        b"logrotate\n"
        b'{"id": "broken", "query": \n'  # malformed JSON: it used to stop the run, exit 2
        b"\xff\xfe not utf-8\n"  # it used to lose every answer (internal error)
        b'{"id": "s", "query": "\\ud800 lone"}\n'  # a lone surrogate: the same
        b"\n"
        b'{"id": "z", "query": "ZIP_DEFLATED"}\n'
        b'{"query": 5}\n'
    )
    code, out, err = run(capfd, "query", str(pack), "--batch", str(batch), "--mode", "bm25")
    lines = [json.loads(x) for x in out.splitlines()]
    # stderr stays empty (a pack built here needs no verify hint): errors are JSON lines
    assert code == Exit.FAILURE and err == ""
    assert [x["id"] for x in lines] == [1, 2, 3, "s", "z", 7]
    assert all(x["schema"] == 1 and x["command"] == "query" for x in lines)
    assert lines[0]["answered"] and "logrotate" in lines[0]["results"][0]["content"]
    assert lines[4]["answered"] and "ZIP_DEFLATED" in lines[4]["results"][0]["content"]
    errors = {x["line"]: x["error"] for x in lines if "error" in x}
    assert sorted(errors) == [2, 3, 4, 7]
    assert errors[3].startswith("line 3: not UTF-8")
    assert "lone surrogate" in errors[4] and 'needs a "query" string' in errors[7]


def test_batch_without_errors_exits_0_even_with_refusals(
    capfd: pytest.CaptureFixture[str], pack: Path, tmp_path: Path
) -> None:
    batch = tmp_path / "q.txt"
    batch.write_text("logrotate\nqwertyuiop\n")
    code, out, _ = run(capfd, "query", str(pack), "--batch", str(batch), "--mode", "bm25")
    assert code == 0 and [json.loads(x)["answered"] for x in out.splitlines()] == [True, False]


def test_code_keeps_its_lines_and_full_keeps_the_whole_quote(
    capfd: pytest.CaptureFixture[str], pack: Path
) -> None:
    code, out, _ = run(capfd, "query", str(pack), "logrotate", "--mode", "bm25", "-k", "1")
    assert code == 0
    assert "        zcat access.log.gz | grep -c 404\n        logrotate --force" in out
    assert out.rstrip().endswith("…")  # the long policy paragraph is cut
    code, full, _ = run(
        capfd, "query", str(pack), "logrotate", "--mode", "bm25", "-k", "1", "--full"
    )
    assert "…" not in full, full
    assert " ".join(full.split()).count("monthly tarballs") == 30


def test_control_characters_never_reach_the_terminal(
    capfd: pytest.CaptureFixture[str], pack: Path
) -> None:
    code, out, _ = run(capfd, "query", str(pack), "SIGKILL", "--mode", "bm25", "-k", "1")
    assert code == 0 and "\x1b" not in out
    assert out.splitlines()[0] == "[1] evil\\x1b[31mred\\x0aname.md#char=0,53"
    code, out, _ = run(capfd, "query", str(pack), "SIGKILL", "--mode", "bm25", "--json")
    assert json.loads(out)["results"][0]["doc"] == "evil\x1b[31mred\nname.md"  # JSON: exact


def test_lexical_only_is_said_first(capfd: pytest.CaptureFixture[str], pack: Path) -> None:
    code, out, _ = run(capfd, "query", str(pack), "logrotate")
    assert code == 0 and out.startswith("note: this pack has no vectors")


def test_quote_and_safe_units() -> None:
    assert safe("a\x1bb\rc\nd\x85") == "a\\x1bb\\x0dc\\x0ad\\x85"
    text = "para one is prose\nwrapped.\n\n| a | b |\n|---|---|\n| 1 | 2 |"
    assert quote(text, None) == "para one is prose wrapped.\n| a | b |\n|---|---|\n| 1 | 2 |"
    assert quote("word " * 400, 100).endswith("…") and len(quote("word " * 400, 100)) < 120
