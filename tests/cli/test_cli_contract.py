"""The CLI contract, tested as tables over every command: option names, --json with its
envelope, unknown options, exit codes per situation, and the README tables that state them.

Adding a command? Give it a row in ``RUNS`` (arguments that make it succeed with --json), and
it is checked by every test here. A command that truly cannot print JSON goes in ``NO_JSON``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from kbpack.cli.commands.common import SCHEMA
from kbpack.cli.main import EXIT, cli, main
from kbpack.errors import Exit
from tests.paths import REPO_ROOT
from tests.user_docs import user_docs

ROOT = REPO_ROOT
README = user_docs()  # README.md and docs/*.md

# Commands that cannot print JSON: mcp's stdout is the protocol (JSON-RPC) itself.
NO_JSON: set[str] = {"mcp"}

# Commands with -o but no --force: keygen never replaces a key (a lost secret cannot be undone).
NO_FORCE = {"keygen"}

# The commands that embed (take --threads) and that show progress (take --quiet).
THREADS = {"build", "update", "query", "ask", "migrate", "eval", "calibrate", "model embed"}
QUIET = {"build", "update", "query", "ask", "migrate", "serve", "merge", "split", "bundle"}

# Arguments that make each command succeed with --json; placeholders are filled by `fill`.
# None: the command runs until stopped (serve: tests/serve/test_serve.py reads its --json line).
RUNS: dict[str, list[str] | None] = {
    "build": ["{src}", "-o", "{tmp}/built.kbpack", "--no-vectors"],
    "query": ["{pack}", "ZIP_DEFLATED", "--model", "{model}"],
    "ask": ["{pack}", "ZIP_DEFLATED", "--model", "{model}", "--extractive"],  # no chat model
    "inspect": ["{pack}"],
    "export": ["{pack}", "--what", "documents"],
    "verify": ["{pack}"],
    "keygen": ["-o", "{tmp}/team"],
    "sign": ["{copy}", "--key", "{key}"],
    "update": ["{copy}", "{src}", "--model", "{model}"],
    "diff": ["{pack}", "{pack}"],
    "merge": ["{pack}", "-o", "{tmp}/merged.kbpack"],
    "split": ["{pack}", "-o", "{tmp}/cut", "--size", "1M"],
    "migrate": ["{pack}", "--dry-run"],
    "index": ["{pack}", "--ivf", "-o", "{tmp}/indexed.kbpack"],
    "model info": ["{model}"],
    "model import": ["{weights}", "-o", "{tmp}/imported.gguf"],
    "model embed": ["--model", "{model}", "hello"],
    "eval": ["{pack}", "{questions}", "--model", "{model}", "--mode", "bm25"],
    "calibrate": ["{pack}", "--questions", "{questions}", "--ood", "{ood}", "--model", "{model}"],
    "serve": None,
    "mcp": None,
    "completion": ["bash"],
    "cache show": [],
    "cache clear": ["--dry-run"],  # a real clear would empty the session's cache mid-run
    "bundle": ["--check", "{bundle}"],
}

# Commands whose first argument is a pack (for the missing-pack and not-a-pack situations).
TAKES_PACK = [name for name, a in RUNS.items() if a and a[0] in ("{pack}", "{copy}")]


def leaf_commands(
    group: click.Group = cli, prefix: tuple[str, ...] = ()
) -> Iterator[tuple[str, click.Command]]:
    for name in group.list_commands(None):  # type: ignore[arg-type]
        cmd = group.get_command(None, name)  # type: ignore[arg-type]
        assert cmd is not None
        path = (*prefix, name)
        if isinstance(cmd, click.Group):
            yield from leaf_commands(cmd, path)
        else:
            yield " ".join(path), cmd


COMMANDS = dict(leaf_commands())


def flags(cmd: click.Command) -> set[str]:
    return {o for p in cmd.params if isinstance(p, click.Option) for o in p.opts + p.secondary_opts}


def run(capfd: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Through kbpack.cli.main.main, the real entry point, with C-level output captured too."""
    with pytest.raises(SystemExit) as e:
        main(list(args))
    out, err = capfd.readouterr()
    return int(e.value.code or 0), out, err


# -- every command follows the conventions -----------------------------------------------------


def test_every_command_has_a_run_row() -> None:
    assert set(COMMANDS) == set(RUNS), "give new commands a row in RUNS"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_option_names_follow_the_convention(name: str) -> None:
    have = flags(COMMANDS[name])
    assert "--json" in have or name in NO_JSON, f"{name}: every command takes --json"
    assert ("-o" in have) == ("--output" in have), f"{name}: the output is -o/--output"
    assert ("-o" in have) == ("--force" in have) or name in NO_FORCE, f"{name}: -o takes --force"
    assert not have & {"--out", "--k", "--jsonl", "--output-file"}, f"{name}: {have}"
    assert ("--quiet" in have) == ("-q" in have), f"{name}: --quiet is also -q"
    assert ("--threads" in have) == (name in THREADS), f"{name}: --threads where it embeds"
    assert ("--quiet" in have) == (name in QUIET), f"{name}: --quiet where it shows progress"
    for p in COMMANDS[name].params:
        if isinstance(p, click.Option) and p.is_flag is False and p.name != "help":
            assert p.help, f"{name} {p.opts[0]} has no help text"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_and_unknown_options(capfd: pytest.CaptureFixture[str], name: str) -> None:
    code, out, _ = run(capfd, *name.split(), "-h")
    assert code == 0 and out.startswith("Usage: kbpack " + name)
    code, out, err = run(capfd, *name.split(), "--jsn")
    assert code == Exit.USAGE and out == ""
    assert len(err.splitlines()) == 1 and err.startswith("kbpack: error: ")


def test_readme_states_the_conventions() -> None:
    for row in ("`-o`, `--output`", "`-k`", "`--json`", "`-q`, `--quiet`", "`--threads`"):
        assert row in README, row
    assert "`-h`, `--help`" in README


def test_readme_exit_code_table_is_the_code() -> None:
    rows = re.findall(r"^\| \*\*(\d+)\*\* \| (.+?) \|$", README, re.M)
    assert [(int(c), m) for c, m in rows] == [(int(c), m) for c, m in EXIT.items()]


# -- JSON: one envelope everywhere -------------------------------------------------------------


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, wide_model: Path) -> dict[str, str]:
    """A corpus, a pack with vectors of a tiny model, questions, a key and a weights folder."""
    from kbpack.pack.sign import keygen

    tmp = tmp_path_factory.mktemp("contract")
    src = tmp / "src"
    src.mkdir()
    (src / "a.md").write_text("# Archives\n\nArchives use ZIP_DEFLATED when zlib is present.\n")
    (src / "b.md").write_text("# Logs\n\nRotate the logs every week with logrotate.\n")
    # tiny_gguf leaves the safetensors folder beside the model
    weights = wide_model.with_name(wide_model.stem + "-src")
    pack = tmp / "docs.kbpack"
    with pytest.raises(SystemExit) as e:
        main(["build", str(src), "-o", str(pack), "--model", str(wide_model), "--quiet"])
    assert e.value.code == 0
    q = tmp / "q.jsonl"
    q.write_text(json.dumps({"query": "ZIP_DEFLATED", "needle": "ZIP_DEFLATED"}) + "\n")
    ood = tmp / "ood.jsonl"
    ood.write_text(json.dumps({"query": "orchid repotting"}) + "\n")
    secret, _, _ = keygen(tmp / "signer")
    bundle = tmp / "bundle"  # kbpack bundle --check reads a SHA256SUMS (tests/ops/test_bundle.py)
    bundle.mkdir()
    (bundle / "install.sh").write_text("#!/bin/sh\n")
    digest = hashlib.sha256(b"#!/bin/sh\n").hexdigest()
    (bundle / "SHA256SUMS").write_text(f"{digest}  install.sh\n")
    return {
        "bundle": str(bundle),
        "tmp": str(tmp),
        "src": str(src),
        "model": str(wide_model),
        "weights": str(weights),
        "pack": str(pack),
        "questions": str(q),
        "ood": str(ood),
        "key": str(secret),
    }


def fill(args: list[str], env: dict[str, str], tmp: Path) -> list[str]:
    if "{copy}" in args:
        copy = tmp / "copy.kbpack"
        copy.write_bytes(Path(env["pack"]).read_bytes())
        env = {**env, "copy": str(copy)}
    env = {**env, "tmp": str(tmp)}
    return [a.format(**env) for a in args]


SPEC_JSON = (ROOT / "spec" / "JSON.md").read_text()
SPEC_KEYS = {
    name: re.findall(r"`(\w+)`", keys)
    for name, keys in re.findall(r"^- `kbpack ([\w ]+?) --json`: (.+)$", SPEC_JSON, re.M)
}


def test_spec_json_documents_every_command() -> None:
    assert set(SPEC_KEYS) == set(RUNS) - NO_JSON
    assert f'{{"schema": {SCHEMA}, "command": "query", ...}}' in SPEC_JSON


@pytest.mark.parametrize("name", sorted(RUNS))
def test_json_envelope_and_documented_keys(
    capfd: pytest.CaptureFixture[str], env: dict[str, str], tmp_path: Path, name: str
) -> None:
    args = RUNS[name]
    if name in NO_JSON or args is None:
        pytest.skip(f"{name} cannot print JSON or runs until stopped")
    code, out, err = run(capfd, *name.split(), *fill(args, env, tmp_path), "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert list(doc)[:2] == ["schema", "command"]
    assert doc["schema"] == SCHEMA and doc["command"] == name
    missing = [k for k in SPEC_KEYS[name] if k not in doc]
    assert not missing, f"spec/JSON.md promises {missing} in kbpack {name} --json"


def test_query_json_has_answered_and_results(
    capfd: pytest.CaptureFixture[str], env: dict[str, str]
) -> None:
    base = ["query", env["pack"], "orchid repotting", "--model", env["model"], "--json"]
    code, out, _ = run(capfd, *base, "--max-distance", "0", "--mode", "dense")
    doc = json.loads(out)
    assert code == Exit.REFUSED and doc["answered"] is False and doc["results"] == []
    assert "answer" not in doc  # one key for the results, not two
    code, out, _ = run(capfd, *base[:2], "ZIP_DEFLATED", *base[3:])
    doc = json.loads(out)
    assert code == Exit.OK and doc["answered"] is True and doc["results"]


# -- exit codes, command x situation -----------------------------------------------------------


@pytest.mark.parametrize("name", TAKES_PACK)
def test_missing_pack_is_a_usage_error(
    capfd: pytest.CaptureFixture[str], env: dict[str, str], tmp_path: Path, name: str
) -> None:
    args = fill(RUNS[name] or [], env, tmp_path)
    args[0] = str(tmp_path / "nope.kbpack")
    code, out, err = run(capfd, *name.split(), *args)
    assert code == Exit.USAGE, err
    assert len(err.splitlines()) == 1 and "nope.kbpack" in err and out == "", err


@pytest.mark.parametrize("name", TAKES_PACK)
def test_not_a_pack_is_a_usage_error(
    capfd: pytest.CaptureFixture[str], env: dict[str, str], tmp_path: Path, name: str
) -> None:
    args = fill(RUNS[name] or [], env, tmp_path)
    notes = tmp_path / "notes.txt"
    notes.write_text("my only copy")
    args[0] = str(notes)
    code, out, err = run(capfd, *name.split(), *args)
    if name == "verify":  # verify reports it as a finding: a damaged header looks the same
        assert code == Exit.FAILURE and "not-a-pack" in out
    else:
        assert code == Exit.USAGE, err
        assert (
            err
            == f"kbpack: error: {notes}: not a kbpack pack (no kbpack magic at byte 0); give a file made by kbpack build\n"
        )
    assert notes.read_text() == "my only copy"


def test_query_situations(capfd: pytest.CaptureFixture[str], env: dict[str, str]) -> None:
    pack, model = env["pack"], env["model"]
    cases = [
        # a typo in an option is an error, never query text (it was: hybrid on "x --mdoe bm25")
        (["x", "--mdoe", "bm25"], Exit.USAGE, "did you mean"),
        (["x", "--mode", "bm52"], Exit.USAGE, "did you mean 'bm25'?"),
        (["x", "--type", "epub"], Exit.USAGE, "'epub' is not one of"),
        (["x", "--type", "pdf", "--model", model], Exit.USAGE, "no chunk matches --type 'pdf'"),
        (["x", "--doc", "*.docx", "--model", model], Exit.USAGE, "no chunk matches --doc"),
        (["   "], Exit.USAGE, "give a query"),
        (["-X", "importtime"], Exit.USAGE, 'goes after --: kbpack query PACK -- "-X ..."'),
        (["x", "--budget-tokens", "100"], Exit.USAGE, "--format prompt"),
        (["ZIP_DEFLATED", "--mode", "dense"], Exit.USAGE, "--mode dense cannot run"),
        (["--mode", "bm25", "--", "-ZIP_DEFLATED"], Exit.OK, ""),  # after --, text
    ]
    for args, want, message in cases:
        code, out, err = run(capfd, "query", pack, *args)
        assert code == want, (args, err)
        assert message.lower() in err.lower(), (args, err)
        if want == Exit.USAGE:
            assert len(err.splitlines()) == 1 and out == "", (args, err)


def test_missing_source_and_output_folder_are_usage_errors(
    capfd: pytest.CaptureFixture[str], env: dict[str, str], tmp_path: Path
) -> None:
    code, _, err = run(capfd, "build", str(tmp_path / "nope"), "-o", str(tmp_path / "x.kbpack"))
    assert code == Exit.USAGE and len(err.splitlines()) == 1
    code, _, err = run(capfd, "build", env["src"], "-o", str(tmp_path / "no" / "dir" / "x.kbpack"))
    assert code == Exit.USAGE and len(err.splitlines()) == 1, err
    assert "internal error" not in err


def test_unknown_command_suggests(capfd: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capfd, "qurey")
    assert code == Exit.USAGE and "did you mean 'query'?" in err


def test_help_lists_commands_in_the_order_a_user_meets_them(
    capfd: pytest.CaptureFixture[str],
) -> None:
    _, out, _ = run(capfd, "--help")
    listed = re.findall(r"^  (\w+)\s", out.split("Commands:")[1], re.M)
    assert listed[:3] == ["build", "query", "inspect"]


def test_completion_script_and_completions(capfd: pytest.CaptureFixture[str]) -> None:
    import os
    import subprocess
    import sys

    code, out, _ = run(capfd, "completion", "bash")
    assert code == 0 and "_KBPACK_COMPLETE=bash_complete" in out
    env = dict(os.environ, _KBPACK_COMPLETE="bash_complete", COMP_WORDS="kbpack query x --mo")
    env["COMP_CWORD"] = "3"
    r = subprocess.run(
        [sys.executable, "-c", "from kbpack.cli.main import main; main()"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.stdout.splitlines() == ["plain,--mode", "plain,--model"], r.stderr


def test_a_reader_that_stops_early_is_not_an_error(tmp_path: Path) -> None:
    """``kbpack query --batch ... | head``: the reader closing the pipe used to end the command
    with "kbpack: error: kbpack: Broken pipe; check the path and the disk" and exit 1."""
    import shutil
    import subprocess
    import sys

    pack = shutil.copy(ROOT / "fixtures" / "golden" / "v2.kbpack", tmp_path / "p.kbpack")
    batch = tmp_path / "q.txt"  # ~160 KB of answers: more than a pipe holds (64 KiB)
    batch.write_text("".join(f"pump seal reset {i}\n" for i in range(400)))
    argv = ["query", str(pack), "--batch", str(batch), "--mode", "bm25", "-q"]
    env = {**os.environ, "KBPACK_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "kbpack", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.read(10)  # the first bytes, then the reader goes away
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == Exit.OK, err
    assert err == ""
