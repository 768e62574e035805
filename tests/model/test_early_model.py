"""A cold ``kbpack query`` starts loading the default model before the CLI is imported
(kbpack/model/early.py). It is a head start only: the answers, the errors and the exit codes
must be those of the query without it, a load that the query does not choose must be waited
for and dropped, and a command line it cannot read with certainty must start nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import numpy as np
import pytest
from cli_run import run

from kbpack.cli.commands.query import query
from kbpack.cli.main import main
from kbpack.model import early as early_model
from kbpack.model.early import FLAGS, VALUE_OPTIONS, Plan, plan
from kbpack.model.embedder import Embedder
from tests.paths import REPO_ROOT

ROOT = REPO_ROOT
DOCS = {
    "logs.md": "# Rotating logs\n\nLogs grow without bound unless rotated.\n\n## Configuration\n\n"
    "Set `max_bytes` to 10485760 and `backup_count` to 5 in the handler.\n",
    "db.md": "# Database\n\n## Threads\n\nPass check_same_thread=False to share one connection "
    "between threads, and lock it yourself.\n",
}


def run_main(capfd: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``kbpack ARGS`` through kbpack.cli.main.main in this process (no head start)."""
    capfd.readouterr()
    with pytest.raises(SystemExit) as e:
        main(list(args))
    out, err = capfd.readouterr()
    return int(e.value.code or 0), out, err


@pytest.fixture(autouse=True)
def no_early_load_left() -> Iterator[None]:
    yield
    early_model.settle()


def test_the_option_tables_are_the_query_commands_options() -> None:
    """A new query option must be added to the tables, or a value could be read as the pack."""
    values, flags = set(), set()
    for p in query.params:
        if isinstance(p, click.Option):
            (flags if p.is_flag else values).update(p.opts + p.secondary_opts)
    assert values == set(VALUE_OPTIONS)
    assert flags == set(FLAGS)


def test_plan_reads_the_usual_command_lines() -> None:
    pack = Path("p.kbpack")
    assert plan(["p.kbpack", "how", "to", "rotate"]) == Plan(pack, None, "how to rotate")
    assert plan(["p.kbpack", "rotate", "--json", "-k", "3"]) == Plan(pack, None, "rotate")
    assert plan(["--json", "p.kbpack", "--doc", "*.md", "rotate"]) == Plan(pack, None, "rotate")
    assert plan(["p.kbpack", "rotate", "--threads", "2"]) == Plan(pack, 2, "rotate")
    assert plan(["p.kbpack", "rotate", "--threads=1", "--mode=dense"]) == Plan(pack, 1, "rotate")
    assert plan(["p.kbpack", "--", "-X importtime"]) == Plan(pack, None, "-X importtime")
    assert plan(["p.kbpack", "--batch", "-"]) == Plan(pack, None, None)
    got = plan(["p.kbpack", "rotate", "--model", "m.gguf"])
    assert got == Plan(pack, None, "rotate", Path("m.gguf"))


@pytest.mark.parametrize(
    "args",
    [
        ["p.kbpack", "rotate", "--mode", "bm25"],  # no model at all
        ["p.kbpack", "rotate", "--mode=bm25"],
        ["p.kbpack", "rotate", "--help"],
        ["p.kbpack", "rotate", "--jsn"],  # a typo: click's error, nothing started
        ["p.kbpack", "rotate", "-k5"],
        ["p.kbpack", "rotate", "--threads", "0"],
        ["p.kbpack", "rotate", "--threads", "two"],
        ["p.kbpack", "rotate", "-k"],  # a missing value
        ["p.kbpack"],  # no query
        ["p.kbpack", "   "],
        ["p.kbpack", "rotate", "--batch", "q.txt"],  # both: a usage error
        [],
    ],
)
def test_plan_starts_nothing_where_in_doubt(args: list[str]) -> None:
    try:
        got = plan(args)
    except ValueError:
        got = None  # start() catches it: nothing is started
    assert got is None


def test_several_packs_start_nothing(tmp_path: Path) -> None:
    a, b = tmp_path / "a.kbpack", tmp_path / "b.kbpack"
    a.write_bytes(b"x")
    b.write_bytes(b"x")
    assert plan([str(a), str(b), "rotate"]) is None  # kbpack.search.federate loads its own way
    assert plan([str(a), "b.kbpack", "rotate"]) == Plan(a, None, "b.kbpack rotate")  # text


def test_a_pack_that_does_not_qualify_starts_nothing(tmp_path: Path) -> None:
    not_pack = tmp_path / "x.kbpack"
    not_pack.write_text("hello")
    for args in ([str(not_pack), "rotate"], [str(tmp_path / "missing.kbpack"), "rotate"]):
        early_model.start(args)
        assert early_model.claim(Path("any.gguf"), None) is None


def test_a_claimed_load_is_the_load_the_query_would_make(tiny_model: Path) -> None:
    from kbpack.model.prefixes import Prefixes

    prefixes = Prefixes(query="query: ", document="passage: ")
    early_model.start_load(tiny_model, 1)
    assert early_model.claim(tiny_model, 2) is None  # other threads: waited for, dropped
    early_model.start_load(tiny_model, 1)
    load = early_model.claim(tiny_model, 1)
    assert load is not None and early_model.claim(tiny_model, 1) is None  # claimed once
    load.use_prefixes(prefixes)
    got = load.result()
    with Embedder(tiny_model, threads=1, prefixes=prefixes) as want:
        assert got.prefixes == want.prefixes and got.threads == want.threads
        texts = ["rotate the logs", "share a connection"]
        assert np.array_equal(got.embed(texts), want.embed(texts))
        assert np.array_equal(got.embed_query(texts[0]), want.embed_query(texts[0]))
        assert np.array_equal(got.embed_documents(texts), want.embed_documents(texts))
    got.close()


@pytest.fixture(scope="module")
def default_pack(default_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("early-corpus")
    for name, text in DOCS.items():
        (root / name).write_text(text)
    out = tmp_path_factory.mktemp("early-packs") / "docs.kbpack"
    code, _, err = run("build", str(root), "-o", str(out), "--quiet", "--threads", "1")
    assert code == 0, err
    return out


@pytest.mark.default_model
@pytest.mark.parametrize("extra", [[], ["--threads", "1"], ["--mode", "dense", "-k", "1"]])
def test_the_query_claims_the_head_start_and_answers_the_same(
    default_pack: Path, extra: list[str]
) -> None:
    args = [str(default_pack), "share a connection between threads", "--json", *extra]
    code, want, _ = run("query", *args)  # no head start
    early_model.start(args)
    assert early_model._early is not None  # started: a remembered pack, the default model
    got_code, got, _ = run("query", *args)
    assert early_model._early is None  # claimed (an unclaimed load would still be there)
    assert got and want, (len(got), len(want), code, got_code)
    assert (got_code, json.loads(got)) == (code, json.loads(want))


@pytest.mark.default_model
@pytest.mark.parametrize(
    "extra",
    [
        [],
        ["--model", "missing.gguf"],  # click's one-line usage error, exit 2
        ["--doc", "nothing-matches-*"],  # a usage error after the pack is open
        ["--mode", "bm25"],
    ],
)
def test_the_kbpack_process_answers_and_fails_as_the_cli_does(
    default_pack: Path, extra: list[str], capfd: pytest.CaptureFixture[str]
) -> None:
    """The real process (kbpack.cli.entry, with the head start) against the CLI in-process."""
    args = ["query", str(default_pack), "rotate the logs", "--json", "--quiet", *extra]
    code, out, err = run_main(capfd, *args)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "kbpack", *args], capture_output=True, text=True, env=env
    )
    assert done.returncode == code
    assert done.stdout == out
    assert done.stderr == err


def test_a_missing_pack_fails_the_same_with_the_head_start(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    args = ["query", str(tmp_path / "missing.kbpack"), "rotate", "--json"]
    code, out, err = run_main(capfd, *args)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "kbpack", *args], capture_output=True, text=True, env=env
    )
    assert (done.returncode, done.stdout, done.stderr) == (code, out, err)
    assert code == 2 and err.count("\n") == 1


@pytest.fixture(scope="module")
def tiny_pack(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("early-tiny-corpus")
    for name, text in DOCS.items():
        (root / name).write_text(text)
    out = tmp_path_factory.mktemp("early-tiny") / "tiny.kbpack"
    code, _, err = run("build", str(root), "-o", str(out), "--model", str(tiny_model), "--quiet")
    assert code == 0, err
    return out


def test_a_model_file_starts_early_once_a_query_recorded_the_packs_model(
    tiny_pack: Path, tiny_model: Path, tiny_model_b: Path, tmp_path: Path
) -> None:
    """--model is loaded early only if its hash is the pack's, as an earlier query of this
    very file recorded it (no HDF5 before the load starts)."""
    copy = tmp_path / "copy.kbpack"  # a pack state no query has seen yet
    copy.write_bytes(tiny_pack.read_bytes())
    from kbpack.pack.preflight import remember_parsed

    remember_parsed(copy)
    args = [str(copy), "rotate the logs", "--json", "--model", str(tiny_model)]
    early_model.start(args)
    assert early_model._early is None  # nothing recorded yet: no head start
    code, want, _ = run("query", *args)  # records the pack's model
    early_model.start(args)
    assert early_model._early is not None
    got_code, got, _ = run("query", *args)
    assert early_model._early is None  # claimed
    assert (got_code, json.loads(got)) == (code, json.loads(want))
    other = [str(copy), "rotate the logs", "--json", "--model", str(tiny_model_b)]
    early_model.start(other)
    assert early_model._early is None  # not the pack's model: never loaded early
    early_model.start(args[:2])  # no --model: the default model is not the pack's either
    assert early_model._early is None


def test_the_model_a_pack_holds_starts_early_from_the_cache(
    tiny_model: Path, tmp_path: Path
) -> None:
    root = tmp_path / "corpus"
    root.mkdir()
    for name, text in DOCS.items():
        (root / name).write_text(text)
    pack = tmp_path / "held.kbpack"
    build = ["build", str(root), "-o", str(pack), "--model", str(tiny_model), "--embed-model"]
    code, _, err = run(*build, "--quiet")
    assert code == 0, err
    args = [str(pack), "share a connection", "--json"]
    code, want, _ = run("query", *args)  # extracts the model to the cache, records it
    early_model.start(args)
    assert early_model._early is not None
    got_code, got, _ = run("query", *args)
    assert early_model._early is None
    assert (got_code, json.loads(got)) == (code, json.loads(want))
