"""The fault-injection matrix: ENOSPC and EIO at every phase of a build (discover, extract,
spool, embed, HDF5, header, fsync, rename; tests/fault_points.py says where each strikes), and
at the writes of update, merge, migrate and split.

After every fault: exit 1, one line naming the file and what the disk said, the pack already
at the output path byte for byte as it was, and no temp file beside it. bench/faults.py runs
the same matrix with signals (SIGKILL, SIGINT, SIGTERM at seeded random points) on top;
tests/pack/test_signal_at_commit.py puts signals just before, inside and after the rename.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
from cli_run import run
from fault_points import FAULTS, PHASES, inject, temp_files

# what the one line says for each fault (the disk's own words, or the writer's no-space line)
SAYS = {"ENOSPC": "no space left on the device", "EIO": "input/output error"}

DOCS = {
    f"note-{i}.md": f"# Note {i}\n\nThe rotation handler {i} keeps logs for {i + 2} days.\n\n"
    f"## Limits\n\nAt most {i * 10 + 5} files per folder are kept.\n"
    for i in range(4)
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("faults")
    src = root / "src"
    src.mkdir()
    for name, text in DOCS.items():
        (src / name).write_text(text)
    old = root / "old.kbpack"
    code, _, err = run("build", str(src), "-o", str(old), "--model", str(tiny_model), "-q")
    assert code == 0, err
    return {"src": src, "old": old, "model": tiny_model}


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def assert_nothing_changed(code: int, err: str, fault: str, out: Path, before: str) -> None:
    lines = err.strip().splitlines()
    assert code == 1, (code, err)
    assert len(lines) == 1 and lines[0].startswith("kbpack: error: "), err
    assert SAYS[fault] in lines[0].lower(), lines[0]
    assert sha(out) == before  # the old pack, byte for byte
    assert temp_files(out.parent) == []


@pytest.mark.parametrize("fault", sorted(FAULTS))
@pytest.mark.parametrize("phase", PHASES)
def test_a_build_fault_at_any_phase_changes_nothing(
    phase: str, fault: str, corpus: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "p.kbpack"
    shutil.copyfile(corpus["old"], out)
    before = sha(out)
    args = ["build", str(corpus["src"]), "-o", str(out), "--model", str(corpus["model"]), "-q"]
    with inject(phase, FAULTS[fault], out):
        code, _, err = run(*args)
    assert_nothing_changed(code, err, fault, out, before)
    code, _, err = run(*args)  # the disk is back: the same build goes through
    assert code == 0 and temp_files(tmp_path) == [], err


def command_args(command: str, corpus: dict[str, Path], out: Path) -> list[str]:
    old, src, model = str(corpus["old"]), str(corpus["src"]), str(corpus["model"])
    return {
        "update": ["update", str(out), src, "--model", model, "-q"],
        "merge": ["merge", old, old + ".copy", "-o", str(out), "--prefer", "first", "-q"],
        "migrate": ["migrate", old, "-o", str(out), "--model", model, "--doc-prefix", "d: ", "-q"],
        "split": ["build", src, "-o", str(out), "--model", model, "--split-size", "1M", "-q"],
    }[command]


@pytest.mark.parametrize("phase", ["spool", "hdf5", "rename"])
@pytest.mark.parametrize("command", ["update", "merge", "migrate", "split"])
def test_every_command_that_writes_a_pack_is_as_atomic(
    command: str, phase: str, corpus: dict[str, Path], tmp_path: Path
) -> None:
    copy = Path(str(corpus["old"]) + ".copy")
    if not copy.exists():  # merge needs two packs with the same model; names must differ
        shutil.copyfile(corpus["old"], copy)
    out = tmp_path / "p.kbpack"
    target = tmp_path / "p-001.kbpack" if command == "split" else out
    shutil.copyfile(corpus["old"], target)
    before = sha(target)
    with inject(phase, FAULTS["EIO"], out):
        code, _, err = run(*command_args(command, corpus, out))
    assert_nothing_changed(code, err, "EIO", target, before)
