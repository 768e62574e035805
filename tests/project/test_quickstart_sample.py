"""README "Quickstart" shows the output of a real run: the counts of `kbpack build fixtures/docs`
and the first answer of the quickstart's query must be what kbpack prints today (times, memory
and the pack's size vary by machine and are not compared)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from kbpack.cli.main import cli
from tests.paths import REPO_ROOT

ROOT = REPO_ROOT
COMPARED = ("documents", "sections", "chunks", "vectors", "tokens", "pieces", "terms")


def _readme_sample() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    quickstart = readme[readme.index("## Quickstart") :]
    block = re.search(r"\n```\n(pack .*?)\n```", quickstart, re.S)
    assert block, "README Quickstart lost its sample output"
    return block.group(1).splitlines()


def _rows(lines: list[str]) -> dict[str, str]:
    rows = {}
    for line in lines:
        label, _, value = line.partition(" ")
        if label in COMPARED:
            value = value.strip()
            if label == "tokens":  # "28027 embedded, 11% in headers": the share is rounded
                value = value.split(",")[0]
            rows[label] = value
    return rows


@pytest.mark.default_model
@pytest.mark.slow
def test_the_quickstart_sample_is_a_real_run(default_model: Path, tmp_path: Path) -> None:
    out = tmp_path / "fixtures.kbpack"
    build = CliRunner().invoke(cli, ["build", str(ROOT / "fixtures/docs"), "-o", str(out)])
    assert build.exit_code == 0, build.stderr
    sample = _readme_sample()
    assert _rows(build.stdout.splitlines()) == _rows(sample)
    query = CliRunner().invoke(cli, ["query", str(out), "What does TableStyle do?", "-k", "3"])
    assert query.exit_code == 0, query.stderr
    first = next(line for line in sample if line.startswith("[1] "))
    assert query.stdout.splitlines()[0] == first
