"""A short, seeded fuzz run of the pack reader and verify (kbpack/testing/fuzz/; bench/fuzz.py runs it
long): mutants of real packs through inspect, export, query and verify in a child forked per
mutant. Zero findings: no crash, no hang, no internal error, no error of more than one line, no
silent wrong read, no damage that a command noticed and verify passed. And the harness itself:
a child that dies or stops answering is a crash or a hang, and the fork server goes on.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kbpack.pack import format as F
from kbpack.testing.fuzz.pack_enumerations import attribute_deletions, metadata_flips, row_drops
from kbpack.testing.fuzz.pack_target import PackCommands
from kbpack.testing.fuzz.runner import PackFuzzer
from kbpack.testing.fuzz.seeds import build_seed_packs
from tests.paths import REPO_ROOT

REPO = REPO_ROOT
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
    assert set(result.per_command.values()) == {EXECUTIONS}  # every command on every mutant


def test_verify_every_runs_the_reader_on_every_mutant_and_verify_on_every_nth(
    fuzzer: PackFuzzer,
) -> None:
    fuzzer.verify_every = 3
    try:
        result = fuzzer.run(6, run_seed=20261203)
    finally:
        fuzzer.verify_every = 1
    assert [f.line() for f in result.findings] == []
    reader = {name: 6 for name, _ in fuzzer.seeds[0].commands.argv(Path("p")) if name != "verify"}
    assert dict(result.per_command) == {**reader, "verify": 2}  # indices 0 and 3
    assert result.commands == 6 * len(reader) + 2


def test_enumerated_row_drops_reach_the_readers_and_have_no_findings(fuzzer: PackFuzzer) -> None:
    """Rows dropped with the count matched and the digests restamped (pack_enumerations):
    past the allowlist, into the readers' and verify's cross-element checks. The golden
    pack's chunks, documents and sections (bench/fuzz.py --enumerate row-drops runs all)."""
    golden = next(s for s in fuzzer.seeds if s.seed.name == GOLDEN.name)
    items = [
        (i, w)
        for i, (label, w) in enumerate(row_drops(golden.seed))
        if label.split(":")[0] in ("chunks", "documents", "sections")
    ]
    assert len(items) == 9
    exits = []
    for i, write in items:
        mutant, found, runs = fuzzer.judged(golden, write, 0, i)
        assert [f.line() for f in found] == [], mutant.describe()
        assert [r.name for r in runs][-1] == "verify"
        exits.append({r.name: r.exit_code for r in runs})
    assert all(e["verify"] == 1 for e in exits)  # each breaks a cross-element rule verify checks
    assert any(e["inspect"] == 0 for e in exits)  # they got past the allowlist


def test_enumerated_root_attribute_deletions_have_no_findings(fuzzer: PackFuzzer) -> None:
    """Each root attribute of the golden pack deleted, digests restamped (bench/fuzz.py
    --enumerate attribute-deletions runs every object's); verify names the required ones."""
    golden = next(s for s in fuzzer.seeds if s.seed.name == GOLDEN.name)
    items = [
        (i, label, w)
        for i, (label, w) in enumerate(attribute_deletions(golden.seed))
        if label.startswith("attribute /@")
    ]
    assert len(items) >= 5
    for i, label, write in items:
        mutant, found, runs = fuzzer.judged(golden, write, 0, i)
        assert [f.line() for f in found] == [], mutant.describe()
        verify = next(r for r in runs if r.name == "verify")
        if any(f"@{name} " in label for name in ("kbpack:kind", "kbpack:version", "description")):
            assert verify.exit_code == 1 and "attribute-missing" in verify.stdout, label


def test_enumerated_metadata_flips_cover_every_metadata_byte_once(fuzzer: PackFuzzer) -> None:
    """One item per byte of HDF5 metadata (outside every element's stored data), in a shuffled
    order; the first ones, run through every command, have no findings (bench/fuzz.py
    --enumerate metadata-flips --executions N runs a sample of N)."""
    golden = next(s for s in fuzzer.seeds if s.seed.name == GOLDEN.name)
    labels = [label for label, _ in metadata_flips(golden.seed)]
    at = [int(label.split("byte ")[1].split()[0]) for label in labels]
    in_data = {o + i for spans in golden.seed.spans.values() for o, n in spans for i in range(n)}
    hdf5 = range(F.USERBLOCK_SIZE, len(golden.seed.data))
    assert sorted(at) == [i for i in hdf5 if i not in in_data]  # each metadata byte, once
    assert at[:50] != sorted(at[:50])  # shuffled: the first N are a sample of the whole file
    items = list(metadata_flips(golden.seed))[:8]
    for i, (_, write) in enumerate(items):
        mutant, found, runs = fuzzer.judged(golden, write, 0, i)
        assert [f.line() for f in found] == [], mutant.describe()
        assert len(runs) == 7


def children_of(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry))
    return out


def signal_next_child(server: int, sig: signal.Signals) -> threading.Thread:
    """Send ``sig`` to the next child the fork server forks (a mutant's commands)."""

    def watch() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            kids = children_of(server)
            if kids:
                os.kill(kids[0], sig)
                return
            time.sleep(0.001)

    t = threading.Thread(target=watch)
    t.start()
    return t


@pytest.mark.parametrize(
    ("sig", "kind", "detail"),
    [(signal.SIGSEGV, "crash", "killed by SIGSEGV"), (signal.SIGSTOP, "hang", "no answer")],
)
def test_a_dead_or_stuck_child_is_a_finding_and_the_server_goes_on(
    fuzzer: PackFuzzer, sig: signal.Signals, kind: str, detail: str
) -> None:
    worker, seed = fuzzer.worker, fuzzer.seeds[0]
    path = fuzzer.scratch / "intact.kbpack"
    path.write_bytes(seed.seed.data)
    server = worker.process.pid
    watcher = signal_next_child(server, sig)
    runs, got, why = worker.run(seed.commands, path, timeout_s=5.0)
    watcher.join()
    assert runs is None and got == kind and detail in why, (got, why)
    assert children_of(server) == []  # a stopped child was killed, with its process group
    runs, got, why = worker.run(seed.commands, path, timeout_s=120.0, expected=seed.expected)
    assert worker.process.pid == server and worker.process.poll() is None
    assert runs is not None and [r.exit_code for r in runs] == [0] * 7, (got, why)
    assert [r.data_sha for r in runs] == [r.data_sha for r in seed.baseline]


DOC_EXECUTIONS = 20  # per format, one extraction worker each


@pytest.mark.parametrize("kind", ["pdf", "docx", "html", "md", "txt"])
def test_seeded_extractor_run_has_no_findings(tmp_path: Path, kind: str) -> None:
    from kbpack.testing.fuzz.doc_target import DEFAULT_SEEDS, DocFuzzer
    from kbpack.testing.fuzz.seeds import DOCS

    seeds = [REPO / p for p in DEFAULT_SEEDS]
    for name in ("manual.html", "pumps.md", "valves.txt"):
        (tmp_path / name).write_text(DOCS[name], encoding="utf-8")
        seeds.append(tmp_path / name)
    with DocFuzzer(seeds, timeout_s=120.0) as fuzzer:
        result = fuzzer.run(kind, DOC_EXECUTIONS, run_seed=20261202)
    assert result.executions == DOC_EXECUTIONS
    assert [f.line() for f in result.findings] == []
