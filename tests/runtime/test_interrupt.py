"""An interrupt that Python swallowed (raised inside a finalizer or a ctypes callback) still
stops the run before the output is replaced, and still exits 130."""

from __future__ import annotations

import errno
from collections.abc import Iterator
from pathlib import Path

import pytest
from packs import SAMPLE, markdown_doc, write_pack

from kbpack.cli.main import os_error_line
from kbpack.errors import Exit
from kbpack.runtime import interrupt


@pytest.fixture(autouse=True)
def clean_flag() -> Iterator[None]:
    interrupt.reset()
    yield
    interrupt.reset()


def test_a_swallowed_interrupt_stops_the_commit(tmp_path: Path) -> None:
    out = tmp_path / "p.kbpack"
    write_pack(out, [markdown_doc("a.md", SAMPLE)])
    before = out.read_bytes()
    interrupt.request()  # as the signal handler does, before its exception got lost
    with pytest.raises(KeyboardInterrupt):
        write_pack(out, [markdown_doc("b.md", SAMPLE)])
    assert out.read_bytes() == before and sorted(tmp_path.iterdir()) == [out]
    interrupt.reset()
    write_pack(out, [markdown_doc("b.md", SAMPLE)])
    assert out.read_bytes() != before


@pytest.mark.parametrize(
    ("code", "what", "exit_code"),
    [
        (errno.ENOENT, "no such file or folder; check the path", Exit.USAGE),
        (errno.ENOTDIR, "a part of the path is a file, not a folder; fix the path", Exit.USAGE),
        (errno.EACCES, "permission denied", Exit.USAGE),
        (errno.EROFS, "read-only file system; write to a folder on a writable disk", Exit.USAGE),
        (errno.ENOSPC, "no space left on the device; free space or write", Exit.FAILURE),
        (errno.EIO, "input/output error", Exit.FAILURE),
    ],
)
def test_os_errors_are_one_line_with_the_fix(code: int, what: str, exit_code: int) -> None:
    line, got = os_error_line(OSError(code, "ignored", "/data/x.kbpack"))
    assert line.startswith(f"/data/x.kbpack: {what}") and "\n" not in line
    assert got == exit_code
