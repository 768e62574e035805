"""Faults while writing a pack: a full disk, a file-size limit, temp files of killed writers.

After each: exit 1 with one line that says what happened and how much room the pack needs, the
old pack untouched, and no temp file left. The full-disk test mounts a small tmpfs (root only;
it is skipped elsewhere); the file-size limit (RLIMIT_FSIZE, the way a FAT32 stick's 4 GiB
limit behaves) runs everywhere.
"""

from __future__ import annotations

import hashlib
import os
import resource
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kbpack.pack.tempfiles import stale_temp_files, temp_path_for
from tests.paths import REPO_ROOT

KBPACK = [sys.executable, "-m", "kbpack"]
REPO = REPO_ROOT
DOCS = REPO / "fixtures" / "docs"


def kbpack(*args: str, limit_fsize: int | None = None) -> subprocess.CompletedProcess[str]:
    def limit() -> None:
        if limit_fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit_fsize, limit_fsize))

    return subprocess.run(
        [*KBPACK, *args], capture_output=True, text=True, timeout=600, preexec_fn=limit
    )


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".tmp" in p.name)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs, or skip (mounting needs root and a kernel that allows it here)."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)],
                       capture_output=True)  # fmt: skip
    if r.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_a_full_disk_is_one_line_and_the_old_pack_survives(
    small_disk: Path, tiny_model: Path
) -> None:
    old = small_disk / "p.kbpack"
    one = DOCS / "pypdf" / "README.md"
    r = kbpack("build", str(one), "-o", str(old), "--no-vectors", "-q")
    assert r.returncode == 0, r.stderr
    before = sha(old)
    # leave 100 KB: the whole fixtures folder with its model inside does not fit
    room = shutil.disk_usage(small_disk).free - 100_000
    (small_disk / "filler").write_bytes(b"\0" * room)
    r = kbpack("build", str(DOCS), "-o", str(old), "--model", str(tiny_model), "--embed-model",
               "-q", "--threads", "1")  # fmt: skip
    assert r.returncode == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"kbpack: error: {old}: no space left on the device of ")
    assert "the pack needs about " in lines[0] and " MB free." in lines[0]
    assert sha(old) == before
    assert leftovers(small_disk) == []
    assert shutil.disk_usage(small_disk).free >= 100_000 - 8192  # what it used, given back


def test_a_file_size_limit_is_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    out = tmp_path / "p.kbpack"
    r = kbpack("build", str(DOCS), "-o", str(out), "--no-vectors", "-q", limit_fsize=150_000)
    assert r.returncode == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "refuses a file this large (File too large): the pack needs about" in lines[0]
    assert not out.exists() and leftovers(tmp_path) == []


def test_temp_files_of_dead_writers_are_removed_by_the_next_build(tmp_path: Path) -> None:
    out = tmp_path / "p.kbpack"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # its PID now names no process (reuse within this test is vanishingly rare)
    stale = temp_path_for(out).name.replace(f"-{os.getpid()}-", f"-{dead.pid}-")
    v01 = f".p.kbpack.tmp-{dead.pid}-0123abcd"  # kbpack 0.1's names carried no host
    live = temp_path_for(out).name.replace(f"-{os.getpid()}-", f"-{os.getppid()}-")
    elsewhere = f".p.kbpack.tmp-otherhost-{dead.pid}-89abcdef"
    # a killed split: its whole pack, a member, and the member's own writer's temp and spool
    member = stale + ".001.part"
    member_writer = "." + member + stale.removeprefix(".p.kbpack")
    split = [stale + ".unsplit", stale + ".gguf", member, member_writer, member_writer + ".text"]
    names = [stale, stale + ".text", stale + ".vec", v01, v01 + ".text", *split, live, elsewhere]
    for name in names:
        (tmp_path / name).write_bytes(b"x" * 100)
    assert {p.name for p in stale_temp_files(out)} == {stale, stale + ".text", stale + ".vec",
                                                       v01, v01 + ".text", *split}  # fmt: skip
    r = kbpack("build", str(DOCS / "pypdf" / "README.md"), "-o", str(out), "--no-vectors", "-q")
    assert r.returncode == 0, r.stderr
    # a live writer's files and another host's are never touched
    assert leftovers(tmp_path) == sorted([live, elsewhere])


def test_an_interrupted_write_child_leaves_nothing(tmp_path: Path) -> None:
    """The HDF5 phase runs in a child; if the child dies (here: killed from inside), the parent
    removes every temp file and says so in one line."""
    code = (
        "import os, signal, sys\n"
        "from kbpack.pack import write as W\n"
        "W.PackWriter._write_hdf5 = lambda self: os.kill(os.getpid(), signal.SIGKILL)\n"
        "from kbpack.cli.main import main\n"
        f"sys.argv = ['kbpack', 'build', {str(DOCS / 'pypdf' / 'README.md')!r}, '-o',"
        f" {str(tmp_path / 'p.kbpack')!r}, '--no-vectors', '-q']\n"
        "main()\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stderr
    assert r.stderr.strip().splitlines() == [
        f"kbpack: error: {tmp_path / 'p.kbpack'}: writing the pack failed "
        "(HDF5 crashed while writing (SIGKILL)); the existing file is untouched"
    ]
    assert leftovers(tmp_path) == [] and not (tmp_path / "p.kbpack").exists()


def test_no_space_message_names_sizes(tmp_path: Path) -> None:
    from kbpack.pack.write_child import no_space_error

    e = no_space_error(tmp_path / "p.kbpack", 5_300_000, spools=2_000_000)
    free = shutil.disk_usage(tmp_path).free
    assert str(e).startswith(
        f"{tmp_path / 'p.kbpack'}: no space left on the device of {tmp_path}: "
        "the pack needs about 5.3 MB (7.3 MB while it is written); "
    )
    assert ("GB free." if free >= 10e9 else "MB free.") in str(e)


def test_ctrl_c_while_the_writer_opens_its_spools_leaves_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ctrl-C that lands between opening the text spool and the vector spool (seen once under
    load in the interrupt test) must not leave the text spool behind."""
    import builtins

    from kbpack.pack import write, write_spools

    def interrupted_at_the_vector_spool(path: object, *args: object, **kwargs: object) -> object:
        if str(path).endswith(".vec"):
            raise KeyboardInterrupt
        return builtins.open(path, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(write_spools, "open", interrupted_at_the_vector_spool, raising=False)
    out = tmp_path / "p.kbpack"
    with pytest.raises(KeyboardInterrupt):
        write.PackWriter(out, model={"name": "m"}, dims=4)
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_before_the_with_block_enters_leaves_no_file(tmp_path: Path) -> None:
    """A Ctrl-C after the spools are open but before ``with PackWriter(...)`` reaches
    __enter__ (so abort() never runs; the interrupt test hit this window under heavy load):
    the spools go when the writer is collected, or at the latest when the interpreter exits."""
    import gc

    from kbpack.pack import write

    out = tmp_path / "p.kbpack"
    writer = write.PackWriter(out, model={"name": "m"}, dims=4)
    assert stale_temp_files(out) or list(tmp_path.iterdir())  # the spools exist
    del writer
    gc.collect()
    assert list(tmp_path.iterdir()) == []
