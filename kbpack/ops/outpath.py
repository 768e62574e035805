"""Safe output paths, checked before any work starts.

A build can run for an hour: it must not end by refusing its output path, and it must never
replace what the user did not mean to replace. Every command that writes a file calls
:func:`check_output` first. It refuses (``OutputRefused``, exit 2), in one line with the fix:

* a folder, a FIFO, a socket or a device (writing there would hang or destroy it);
* an output that is one of the inputs, or inside an input folder being read (``--force`` does
  not override this: the input would be destroyed or read back into the output);
* an existing file that is not a kbpack pack (for pack outputs), or any existing file (for
  other outputs), unless ``force``;
* a symlink, unless ``force`` (then its target is written, and the link stays a link);
* a missing folder, a path whose folder is a file, a read-only or unwritable folder.

Writers then write a temp file beside the output and ``os.replace`` it (see
``pack/write.py`` and :func:`write_atomically`), so the output is either the old file or the
complete new one.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

from kbpack.errors import OutputRefused
from kbpack.pack import format as F
from kbpack.runtime import interrupt

STDOUT = Path("-")


def is_pack(path: Path) -> bool:
    """Whether ``path`` starts with the kbpack magic (a pack, perhaps damaged)."""
    try:
        with open(path, "rb") as f:
            return f.read(len(F.MAGIC)) == F.MAGIC
    except OSError:
        return False


def _kind_of(mode: int) -> str | None:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return None


def _absolute(path: Path) -> Path:
    """``path`` made absolute with its folder's symlinks resolved (the file itself may not exist)."""
    return path.absolute().parent.resolve() / path.name


def check_output(
    out: Path,
    *,
    inputs: Sequence[Path] = (),
    force: bool = False,
    pack: bool = True,
    option: str = "-o",
) -> Path:
    """The path to write for ``out`` (a symlink's target with ``force``), or ``OutputRefused``.

    ``pack``: the output is a kbpack pack, so an existing pack may be replaced without
    ``force`` (it is what the user is rebuilding); any other existing file needs ``force``.
    """
    target = out
    if out.is_symlink():
        if not force:
            raise OutputRefused(
                f"{out}: is a symlink to {os.readlink(out)}; pass --force to replace its target, "
                f"or give another {option}"
            )
        target = out.resolve()
    try:
        st = target.stat()
    except (FileNotFoundError, NotADirectoryError):
        st = None  # the folder checks below say what is wrong with the path
    except OSError as e:
        raise OutputRefused(
            f"{target}: cannot check the output ({e.strerror}); fix the path"
        ) from e
    if st is not None:
        what = _kind_of(st.st_mode)
        if what:
            raise OutputRefused(f"{target}: is {what}, not a file; give a file path to {option}")
    where = _absolute(target)
    for inp in inputs:
        if inp == STDOUT:
            continue
        src = _absolute(inp)
        if where == src:
            raise OutputRefused(
                f"{out}: is also an input; write to another path ({option} never replaces an input)"
            )
        if src.is_dir() and where.is_relative_to(src):
            raise OutputRefused(
                f"{out}: is inside the input folder {inp}; write the output outside it"
            )
    if st is not None and not force:
        if pack and not is_pack(target):
            raise OutputRefused(
                f"{target}: exists and is not a kbpack pack; choose another {option}, or pass "
                "--force to replace it"
            )
        if not pack:
            raise OutputRefused(
                f"{target}: already exists; choose another {option}, or pass --force to replace it"
            )
    _check_folder(where.parent, option)
    return target


def _check_folder(folder: Path, option: str) -> None:
    if not folder.exists():
        # the first missing ancestor may be a file: say which
        for parent in folder.parents:
            if parent.exists():
                if not parent.is_dir():
                    raise OutputRefused(f"{parent}: is a file, not a folder; fix the {option} path")
                break
        raise OutputRefused(f"{folder}: no such folder; create it first (mkdir -p {folder})")
    if not folder.is_dir():
        raise OutputRefused(f"{folder}: is a file, not a folder; fix the {option} path")
    if not os.access(folder, os.W_OK | os.X_OK):
        if _read_only(folder):
            raise OutputRefused(
                f"{folder}: read-only file system; give {option} a folder on a writable disk"
            )
        raise OutputRefused(
            f"{folder}: folder not writable (permission denied); choose another {option}"
        )


def _read_only(folder: Path) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        return False


@contextlib.contextmanager
def write_atomically(out: Path, mode: str = "w") -> Iterator[IO[str]]:
    """A file object for ``out`` that appears there complete or not at all: a hidden temp file
    beside it, fsynced and renamed on success, removed on any error (Ctrl-C included).
    ``out == STDOUT`` writes to stdout."""
    import sys

    if out == STDOUT:
        yield sys.stdout
        return
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, mode, encoding="utf-8") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        interrupt.check()
        with interrupt.uninterruptible():
            os.replace(tmp, out)
            interrupt.published(out)
    finally:
        tmp.unlink(missing_ok=True)
