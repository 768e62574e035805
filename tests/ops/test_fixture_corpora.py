"""The document trees shipped in fixtures/ build whole and verify: real pages kbpack did not
write (git's, SQLite's, curl's manuals, PDFs, Italian articles) meet every extraction rule at
once, which one-rule tests do not (the folder banner pass once left links pointing into text it
had removed, and a build of git's pages stopped with an internal error). BM25-only, so the test
needs no model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import run

from kbpack.pack.read import PackReader
from tests.paths import REPO_ROOT


@pytest.mark.parametrize("tree", ["eval/corpus", "docs"])
def test_a_fixture_tree_builds_whole_and_verifies(tree: str, tmp_path: Path) -> None:
    out = tmp_path / "tree.kbpack"
    code, stdout, stderr = run(
        "build", str(REPO_ROOT / "fixtures" / tree), "-o", str(out), "--no-vectors", "--json"
    )
    assert code == 0, stderr
    counts = json.loads(stdout)["counts"]
    assert counts["documents_failed"] == 0 and counts["documents_ok"] > 0
    code, stdout, stderr = run("verify", str(out), "--json")
    assert code == 0, stdout + stderr
    with PackReader(out) as r:  # the pages' links to each other are kept (verify checked them)
        links = sum(len(r.links_of(d)) for d in range(r.counts["documents"]))
    assert links > 0 or tree == "docs"
