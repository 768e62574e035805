"""A signal at every step around the commit of a build: just before the rename, inside it, just
after the writer committed, and while the process is exiting.

Before the rename the old pack stays (exit 130, `kbpack: interrupted`, no temp file); from the
rename on the new pack is complete, verifies, and the one line says so (exit 130). Never rc -15
with no message (kbpack 0.1 died so when SIGTERM came just after the commit), never a traceback.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
from cli_run import run

from tests.paths import REPO_ROOT

REPO = REPO_ROOT
DOC_A = REPO / "fixtures" / "docs" / "pypdf" / "README.md"
DOC_B = REPO / "fixtures" / "docs" / "sqlite"

# Each hook sends the signal to the process itself at one point of the run (the handler runs at
# the next bytecode, so the signal lands exactly there).
HOOKED_BUILD = """
import os, signal, sys
from kbpack.pack import write as W
where, sig = sys.argv[1], getattr(signal, sys.argv[2])
hit = lambda: os.kill(os.getpid(), sig)
if where == "before-rename":  # the temp file is complete and fsynced, not yet renamed
    fsync_file = W._fsync_file
    def hook(p):
        fsync_file(p)
        hit()
    W._fsync_file = hook
elif where == "inside-rename":  # renamed, the folder not yet fsynced
    fsync_dir = W._fsync_dir
    def hook(p):
        hit()
        fsync_dir(p)
    W._fsync_dir = hook
elif where == "after-commit":  # commit() returned; the build is printing its summary
    commit = W.PackWriter.commit
    def hook(self):
        result = commit(self)
        hit()
        return result
    W.PackWriter.commit = hook
elif where == "hdf5-child":  # SIGKILL the writer from its HDF5 child, which then goes on
    import time
    from kbpack.pack import write_hdf5 as H  # where the HDF5 child creates the datasets
    create, writer = H.create_dataset, os.getpid()
    def hook(*a, **k):
        if os.getpid() != writer:  # in the child
            marker = os.environ["KBPACK_TEST_MARKER"]
            os.kill(writer, signal.SIGKILL)
            time.sleep(0.5)
            open(marker, "w").close()  # only a child that outlived its writer gets here
            os._exit(0)
        return create(*a, **k)
    H.create_dataset = hook
elif where == "at-exit":  # the command is done; main() is on its way to sys.exit
    import kbpack.cli.main as C
    run = C._run
    def hook(argv):
        code = run(argv)
        hit()
        return code
    C._run = hook
from kbpack.cli.main import main
sys.argv = ["kbpack", *sys.argv[3:]]
main()
"""


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build_with_signal(
    where: str, sig: str, src: Path, out: Path
) -> subprocess.CompletedProcess[str]:
    args = ["build", str(src), "-o", str(out), "--no-vectors", "-q"]
    return subprocess.run(
        [sys.executable, "-c", HOOKED_BUILD, where, sig, *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def old_pack(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("old") / "p.kbpack"
    code, _, err = run("build", str(DOC_A), "-o", str(out), "--no-vectors", "-q")
    assert code == 0, err
    return out


@pytest.mark.parametrize(
    ("where", "sig"),
    [
        ("before-rename", "SIGTERM"),
        ("before-rename", "SIGINT"),
        ("inside-rename", "SIGTERM"),
        ("after-commit", "SIGTERM"),
        ("after-commit", "SIGINT"),
        ("at-exit", "SIGTERM"),
    ],
)
def test_a_signal_around_the_commit_is_one_true_line(
    where: str, sig: str, old_pack: Path, tmp_path: Path
) -> None:
    out = tmp_path / "p.kbpack"
    out.write_bytes(old_pack.read_bytes())
    before = sha(out)
    r = build_with_signal(where, sig, DOC_B, out)
    assert r.returncode == 130, (r.returncode, r.stderr)  # never -15 / -2: a death unexplained
    lines = r.stderr.strip().splitlines()
    if where == "before-rename":
        assert lines == ["kbpack: interrupted"]
        assert sha(out) == before
    else:
        assert lines == [f"kbpack: interrupted after writing {out}; the new file is complete"]
        assert sha(out) != before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.kbpack"]  # no temp file
    code, _, err = run("verify", str(out))
    assert code == 0, err


def test_the_hooked_build_without_a_hook_succeeds(tmp_path: Path) -> None:
    """The control: the same script with no hook set builds quietly (exit 0, no output)."""
    r = build_with_signal("nowhere", "SIGTERM", DOC_A, tmp_path / "p.kbpack")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.kbpack"]


def test_the_hdf5_child_dies_with_its_killed_writer(old_pack: Path, tmp_path: Path) -> None:
    """A SIGKILLed writer's HDF5 child must not go on writing the temp file: it could create it
    after the next build removed the dead writer's files (bench/faults.py saw children alive
    1-2 s after their writer)."""
    import os
    import time

    out = tmp_path / "p.kbpack"
    out.write_bytes(old_pack.read_bytes())
    before = sha(out)
    marker = tmp_path.parent / f"{tmp_path.name}-survived"
    os.environ["KBPACK_TEST_MARKER"] = str(marker)
    try:
        r = build_with_signal("hdf5-child", "SIGKILL", DOC_B, out)
    finally:
        del os.environ["KBPACK_TEST_MARKER"]
    assert r.returncode == -9, (r.returncode, r.stderr)
    time.sleep(2.0)  # four times what the child sleeps before it writes the marker
    assert not marker.exists()
    assert sha(out) == before
    code, _, err = run("build", str(DOC_B), "-o", str(out), "--no-vectors", "-q")
    assert code == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.kbpack"]  # the next build cleaned
