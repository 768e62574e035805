"""Output paths: every command that writes refuses to destroy what the user did not mean to
replace, and says so in one line (exit 2) before any work starts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kbpack.cli.main import main
from kbpack.errors import Exit, OutputRefused
from kbpack.ops.outpath import check_output, write_atomically
from kbpack.pack.format import MAGIC


def run(capfd: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as e:
        main(list(args))
    out, err = capfd.readouterr()
    return int(e.value.code or 0), out, err


@pytest.fixture
def src(tmp_path: Path) -> Path:
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / "notes.md").write_text("# Notes\n\nmy only copy\n")
    return folder


def build(capfd: pytest.CaptureFixture[str], src: Path, out: Path, *more: str) -> tuple[int, str]:
    code, _, err = run(capfd, "build", str(src), "-o", str(out), "--no-vectors", "-q", *more)
    return code, err


def test_an_input_is_never_replaced_even_with_force(
    capfd: pytest.CaptureFixture[str], src: Path
) -> None:
    notes = src / "notes.md"
    for force in ((), ("--force",)):
        code, err = build(capfd, src, notes, *force)
        assert code == Exit.USAGE and "inside the input folder" in err
        code, err = build(capfd, notes, notes, *force)
        assert code == Exit.USAGE and "is also an input" in err
    assert notes.read_text() == "# Notes\n\nmy only copy\n"


def test_a_file_that_is_not_a_pack_needs_force(
    capfd: pytest.CaptureFixture[str], src: Path, tmp_path: Path
) -> None:
    precious = tmp_path / "precious.txt"
    precious.write_text("precious")
    code, err = build(capfd, src, precious)
    assert code == Exit.USAGE
    assert err == (
        f"kbpack: error: {precious}: exists and is not a kbpack pack; choose another -o, "
        "or pass --force to replace it\n"
    )
    assert precious.read_text() == "precious" and sorted(tmp_path.iterdir()) == [precious, src]
    code, err = build(capfd, src, precious, "--force")
    assert code == 0 and precious.read_bytes().startswith(MAGIC)


def test_a_pack_is_replaced_without_force(
    capfd: pytest.CaptureFixture[str], src: Path, tmp_path: Path
) -> None:
    out = tmp_path / "docs.kbpack"
    assert build(capfd, src, out) == (0, "")
    assert build(capfd, src, out) == (0, "")


def test_fifo_and_folder_are_refused(
    capfd: pytest.CaptureFixture[str], src: Path, tmp_path: Path
) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for target in (fifo, tmp_path):
        code, err = build(capfd, src, target, "--force")
        assert code == Exit.USAGE and "not a file" in err, err
    assert (tmp_path / "pipe").is_fifo()
    with pytest.raises(OutputRefused, match="is a device"):
        check_output(Path("/dev/null"), force=True)


def test_a_symlink_is_refused_then_its_target_replaced_with_force(
    capfd: pytest.CaptureFixture[str], src: Path, tmp_path: Path
) -> None:
    target = tmp_path / "real.kbpack"
    target.write_bytes(MAGIC + b" an old pack")
    link = tmp_path / "link.kbpack"
    link.symlink_to(target)
    code, err = build(capfd, src, link)
    assert code == Exit.USAGE and f"is a symlink to {target}" in err
    assert build(capfd, src, link, "--force") == (0, "")
    assert link.is_symlink() and target.read_bytes().startswith(MAGIC)
    assert target.stat().st_size > 1000  # the new pack went to the target


def test_output_folder_problems_are_one_line(
    capfd: pytest.CaptureFixture[str], src: Path, tmp_path: Path
) -> None:
    (tmp_path / "a-file").write_text("")
    cases = {
        tmp_path / "missing" / "x.kbpack": "no such folder; create it first",
        tmp_path / "a-file" / "x.kbpack": "a-file: is a file, not a folder",
        tmp_path / "a-file" / "deeper" / "x.kbpack": "a-file: is a file, not a folder",
    }
    for out, message in cases.items():
        code, err = build(capfd, src, out)
        assert code == Exit.USAGE and message in err and len(err.splitlines()) == 1, err


@pytest.mark.skipif(
    not os.path.isdir("/sys") or not (os.statvfs("/sys").f_flag & os.ST_RDONLY),
    reason="needs a read-only mount (/sys is one in most containers)",
)
def test_read_only_folder(capfd: pytest.CaptureFixture[str], src: Path) -> None:
    code, err = build(capfd, src, Path("/sys/x.kbpack"))
    assert code == Exit.USAGE
    assert err == (
        "kbpack: error: /sys: read-only file system; give -o a folder on a writable disk\n"
    )


def test_every_writer_checks(
    capfd: pytest.CaptureFixture[str], src: Path, tmp_path: Path, tiny_model: Path
) -> None:
    precious = tmp_path / "precious.txt"
    precious.write_text("precious")
    pack = tmp_path / "docs.kbpack"
    assert build(capfd, src, pack) == (0, "")
    runs = [
        ["update", str(pack), str(src), "-o", str(precious)],
        ["migrate", str(pack), "-o", str(precious)],
        ["export", str(pack), "-o", str(precious)],
        [
            "model",
            "import",
            str(tiny_model.with_name(tiny_model.stem + "-src")),
            "-o",
            str(precious),
        ],
    ]
    for args in runs:
        code, _, err = run(capfd, *args)
        assert code == Exit.USAGE and str(precious) in err, (args, err)
    assert precious.read_text() == "precious"


def test_export_to_a_file_and_to_stdout(
    capfd: pytest.CaptureFixture[str], src: Path, tmp_path: Path
) -> None:
    pack = tmp_path / "docs.kbpack"
    assert build(capfd, src, pack) == (0, "")
    code, out, _ = run(capfd, "export", str(pack), "-o", "-")
    assert code == 0 and "my only copy" in out
    dump = tmp_path / "chunks.jsonl"
    code, out, _ = run(capfd, "export", str(pack), "-o", str(dump))
    assert code == 0 and out == "" and dump.read_text().count("\n") == 1
    assert not list(tmp_path.glob(".chunks.jsonl.tmp-*"))


def test_write_atomically_leaves_nothing_on_error(tmp_path: Path) -> None:
    out = tmp_path / "x.txt"
    out.write_text("old")
    with pytest.raises(KeyboardInterrupt), write_atomically(out) as f:
        f.write("half")
        raise KeyboardInterrupt
    assert out.read_text() == "old" and sorted(tmp_path.iterdir()) == [out]
