"""What users run on a pack, run in-process the way the ``kbpack`` command runs it.

Each command goes through ``kbpack.cli.main.main`` (the real entry point, with its error handling
and exit codes), its stdout and stderr captured. A ``CommandRun`` is judged by ``judge``:
an exit code other than the documented ones, an "internal error" line or an exception that
escaped ``main`` is an internal error; an error of more than one line breaks the one-line rule;
a command that succeeded on a pack whose manifest still describes the seed must print exactly
what it prints for the seed (anything else is a silent wrong read). That comparison is made on
a digest of the data (``CommandRun.data_sha``): the worker sends a command's stdout back only
when its digest differs from the seed's, so an execution costs no copying of exports.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kbpack.errors import Exit

DOCUMENTED_EXITS = {int(e) for e in Exit} - {int(Exit.INTERRUPTED)}
# Commands whose stdout is the pack's data: compared with the seed's when the mutant still
# claims the seed's content. inspect and verify describe the file (sizes, findings), not data.
DATA_COMMANDS = ("export-chunks", "export-sections", "export-documents", "query-bm25", "query")


@dataclass(frozen=True)
class PackCommands:
    """The command lines to run on a pack (``{pack}`` is replaced by its path)."""

    query: str  # words found in the seed, so that search reaches postings and vectors
    model: Path | None = None  # the GGUF the pack was built with, for dense search
    # commands left out of this execution (the runner's ``verify_every`` leaves out verify)
    without: frozenset[str] = frozenset()

    def argv(self, pack: Path) -> list[tuple[str, list[str]]]:
        p = str(pack)
        dense = ["--model", str(self.model)] if self.model else []
        every = [
            ("inspect", ["inspect", p, "--json"]),
            ("export-chunks", ["export", p, "--what", "chunks"]),
            ("export-sections", ["export", p, "--what", "sections"]),
            ("export-documents", ["export", p, "--what", "documents"]),
            ("query-bm25", ["query", p, "--mode", "bm25", "--json", "-k", "3", "--", self.query]),
            (
                "query",
                ["query", p, "--json", "-k", "3", "--threads", "1", *dense, "--", self.query],
            ),
            ("verify", ["verify", p, "--json"]),
        ]
        return [(name, argv) for name, argv in every if name not in self.without]


@dataclass(frozen=True)
class CommandRun:
    name: str
    exit_code: int
    stdout: str
    stderr: str
    escaped: str = ""  # an exception that got out of kbpack.cli.main.main, with its last frame
    data_sha: str = ""  # SHA-256 of what stdout says about the pack's content (``_data``)


def run_command(name: str, argv: list[str]) -> CommandRun:
    """``kbpack ARGV`` in this process, as the console script runs it."""
    from kbpack.cli.main import main

    out, err = io.BytesIO(), io.BytesIO()
    out_text = io.TextIOWrapper(out, encoding="utf-8", errors="backslashreplace")
    err_text = io.TextIOWrapper(err, encoding="utf-8", errors="backslashreplace")
    code, escaped = 0, ""
    with contextlib.redirect_stdout(out_text), contextlib.redirect_stderr(err_text):
        try:
            main(argv)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except BaseException as e:  # the very thing a fuzzer looks for
            tb = traceback.extract_tb(e.__traceback__)
            last = f" at {Path(tb[-1].filename).name}:{tb[-1].lineno}" if tb else ""
            escaped = f"{type(e).__name__}: {str(e)[:200]}{last}"
            code = -1
        out_text.flush()
        err_text.flush()
    sys.stdout.flush()
    stdout = out.getvalue().decode("utf-8", "replace")
    data_sha = ""
    if name in DATA_COMMANDS:
        data_sha = hashlib.sha256(_data(name, stdout).encode("utf-8", "surrogatepass")).hexdigest()
    return CommandRun(
        name, code, stdout, err.getvalue().decode("utf-8", "replace"), escaped, data_sha
    )


STDOUT_KEPT = 2000  # characters of stdout sent back when nothing compares it (replay shows it)


def run_all(
    commands: PackCommands,
    pack: Path,
    report: Callable[[str], None],
    expected: dict[str, str] | None = None,
) -> list[CommandRun]:
    """Every command on ``pack``; ``report(name)`` is called before each (so that a parent
    watching this process knows which command crashed or hung). ``expected``: the seed's
    ``data_sha`` per command; a run whose data has that digest, or that describes the file
    rather than its data, keeps only the start of its stdout (the judge needs no more)."""
    runs = []
    for name, argv in commands.argv(pack):
        report(name)
        run = run_command(name, argv)
        if expected is not None and (
            name not in DATA_COMMANDS or run.data_sha == expected.get(name)
        ):
            run = dataclasses.replace(run, stdout=run.stdout[:STDOUT_KEPT])
        runs.append(run)
    return runs


def judge(
    run: CommandRun, seed_run: CommandRun | None, claims_seed: bool
) -> tuple[str, str] | None:
    """(kind, detail) of what is wrong with one command's run, or None."""
    err_lines = [line for line in run.stderr.splitlines() if line.strip()]
    first = err_lines[0][:240] if err_lines else ""
    if run.escaped:
        return "internal-error", run.escaped
    if "internal error" in run.stderr or "Traceback (most recent call last)" in run.stderr:
        internal = next((x for x in err_lines if "internal error" in x or "Error" in x), first)
        return "internal-error", internal[:240]
    if run.exit_code not in DOCUMENTED_EXITS:
        return "internal-error", f"exit {run.exit_code}: {first}"
    errors = [x for x in err_lines if x.startswith("kbpack: error:")]
    if len(errors) > 1 or (errors and any("\n" in e for e in errors)):
        return "not-one-line", " | ".join(errors)[:240]
    if (
        claims_seed
        and seed_run is not None
        and run.name in DATA_COMMANDS
        and run.exit_code == seed_run.exit_code == 0
        and run.data_sha != seed_run.data_sha
    ):
        want, got = _data(run.name, seed_run.stdout), _data(run.name, run.stdout)
        return "silent-wrong-data", _first_difference(want, got)
    return None


def _data(name: str, stdout: str) -> str:
    """What a command's output says about the pack's content (not about the file's path)."""
    if name.startswith("query"):
        try:
            doc = json.loads(stdout)
        except ValueError:
            return stdout
        if not isinstance(doc, dict):
            return stdout
        doc.pop("pack", None)
        doc.pop("packs", None)
        for key in ("timings", "seconds", "elapsed_ms", "timing"):
            doc.pop(key, None)
        return json.dumps(doc, sort_keys=True)
    return stdout


def _first_difference(want: str, got: str) -> str:
    at = next((i for i, (a, b) in enumerate(zip(want, got, strict=False)) if a != b), None)
    if at is None:
        at = min(len(want), len(got))
    return f"output differs at char {at}: {want[at : at + 60]!r} -> {got[at : at + 60]!r}"
