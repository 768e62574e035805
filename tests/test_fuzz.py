"""A short, seeded fuzz run of the pack reader and verify (kbpack/fuzz/; bench/fuzz.py runs it
long): mutants of real packs through inspect, export, query and verify in a worker process.
Zero findings: no crash, no hang, no internal error, no error of more than one line, no silent
wrong read, no damage that a command noticed and verify passed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kbpack.fuzz.pack_target import PackCommands
from kbpack.fuzz.runner import PackFuzzer
from kbpack.fuzz.seeds import build_seed_packs

REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "fixtures" / "golden" / "v2.kbpack"
EXECUTIONS = 20  # ~1 s each on a loaded 2-core machine (7 commands each, verify forks)


@pytest.fixture(scope="module")
def fuzzer(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Iterator[PackFuzzer]:
    seeds = build_seed_packs(tmp_path_factory.mktemp("fuzz-seeds"), tiny_model)
    seeds.append((GOLDEN, PackCommands("pypdf merge pages")))
    with PackFuzzer(seeds, timeout_s=120.0) as f:
        yield f


def test_every_seed_passes_every_command(fuzzer: PackFuzzer) -> None:
    for s in fuzzer.seeds:
        assert {r.name: r.exit_code for r in s.baseline} == dict.fromkeys(
            [name for name, _ in s.commands.argv(Path("p"))], 0
        ), s.seed.name


def test_seeded_run_has_no_findings(fuzzer: PackFuzzer) -> None:
    result = fuzzer.run(EXECUTIONS, run_seed=20261202)
    assert result.executions == EXECUTIONS
    assert [f.line() for f in result.findings] == []
    # the run reached past the first check: some mutants were refused, some read
    assert result.outcomes["exit 1"] > 0 and result.outcomes["exit 0"] > 0


DOC_EXECUTIONS = 20  # per format, one extraction worker each


@pytest.mark.parametrize("kind", ["pdf", "docx", "html", "md", "txt"])
def test_seeded_extractor_run_has_no_findings(tmp_path: Path, kind: str) -> None:
    from kbpack.fuzz.doc_target import DEFAULT_SEEDS, DocFuzzer
    from kbpack.fuzz.seeds import DOCS

    seeds = [REPO / p for p in DEFAULT_SEEDS]
    for name in ("manual.html", "pumps.md", "valves.txt"):
        (tmp_path / name).write_text(DOCS[name], encoding="utf-8")
        seeds.append(tmp_path / name)
    with DocFuzzer(seeds, timeout_s=120.0) as fuzzer:
        result = fuzzer.run(kind, DOC_EXECUTIONS, run_seed=20261202)
    assert result.executions == DOC_EXECUTIONS
    assert [f.line() for f in result.findings] == []
