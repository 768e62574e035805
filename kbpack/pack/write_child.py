"""Run the HDF5 phase of a pack write in a forked child, and say why a write failed.

HDF5 does not survive every failed write: on a full disk h5py raised errors from inside its
close path and the process then died of SIGSEGV in ``h5py/_hl/files.py close`` (reproduced on a
small tmpfs), leaving temp files that kept the disk full. In a child, such a crash kills only
the child; the parent, which has touched nothing but the temp files, removes them and prints
one line. The child is a ``fork``: it shares the writer's memory (columns, postings) copy on
write, so nothing is pickled, and it sends back only the small result (digests and counts).
"""

from __future__ import annotations

import contextlib
import errno
import faulthandler
import json
import os
import re
import resource
import shutil
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from kbpack.errors import PackError, describe
from kbpack.runtime.child import Forked, Reply, die_with_parent, signal_name

FULL = (errno.ENOSPC, errno.EDQUOT)
TOO_LARGE = (errno.EFBIG,)
# h5py reports a failed write(2) in its message text only: "... errno = 28, error message = ..."
_H5_ERRNO = re.compile(r"errno = (\d+)")


class ChildFailed(Exception):
    """The child raised (``errno`` when a system call failed) or died (``signal``)."""

    def __init__(self, detail: str, err: int | None = None, sig: int | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.errno = err
        self.signal = sig


def error_number(e: BaseException) -> int | None:
    """The errno behind an OSError, or the one h5py wrote into its message."""
    if isinstance(e, OSError) and e.errno:
        return int(e.errno)
    m = _H5_ERRNO.search(str(e))
    return int(m.group(1)) if m else None


_report: Callable[[dict[str, Any]], None] | None = None  # set in the child only


def report_error(e: BaseException) -> None:
    """Send ``e`` to the parent now, from the child, before HDF5 gets a chance to crash while
    cleaning up after it (h5py's close after a failed write is where SIGSEGV struck)."""
    if _report is not None:
        _report({"error": describe(e), "errno": error_number(e)})


@contextlib.contextmanager
def errors_reported_first() -> Iterator[None]:
    """Inside ``with h5py.File(...) as h, errors_reported_first():`` an error in the body is
    reported before the file's close runs."""
    try:
        yield
    except BaseException as e:
        report_error(e)
        raise


def run_in_child(fn: Callable[[], Any]) -> Any:
    """``fn()`` in a forked child (``kbpack.runtime.child.Forked``); its JSON-able result, or
    ``ChildFailed``. No time limit: a large write takes what it takes.

    Ctrl-C or SIGTERM in the parent kills the child (SIGKILL) before the exception goes on.
    A SIGKILLed writer's child dies with it (``die_with_parent``): it otherwise went on writing
    the temp file for up to the whole HDF5 phase (measured by bench/faults.py: alive 1-2 s after
    its parent on the test corpus), and one forked just before the kill could create the file
    after the next build had removed the dead writer's temp files, leaving one behind. The
    writer's thread waits for the child, so the thread-tied death signal cannot fire early.
    """
    parent = os.getpid()

    def body(reply: Reply) -> None:
        global _report
        die_with_parent(parent)
        _report = reply.send
        payload: dict[str, Any]
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides, and kills us
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            faulthandler.disable()  # a crash is reported by the parent, in one line
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 2)  # HDF5 prints its error stack on stderr
            payload = {"ok": fn()}
        except BaseException as e:
            payload = {"error": describe(e), "errno": error_number(e)}
        reply.send(payload)

    child = Forked(body)
    try:
        data, status = child.outcome()
    finally:
        child.kill()  # at once on Ctrl-C; after the outcome, it only closes the pipe
    if not data:
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        name = signal_name(sig) if sig is not None else f"status {status}"
        raise ChildFailed(f"HDF5 crashed while writing ({name})", sig=sig)
    payload = json.loads(data)
    if "error" in payload:
        raise ChildFailed(payload["error"], err=payload.get("errno"))
    return payload["ok"]


def free_bytes(folder: Path) -> int | None:
    with contextlib.suppress(OSError):
        return shutil.disk_usage(folder).free
    return None


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n < 10e9 else f"{n / 1e9:.1f} GB"


def no_space_error(out: Path, needed: int, err: int | None = None, spools: int = 0) -> PackError:
    """The one line for a pack that does not fit where it is written (``spools``: bytes of the
    writer's temp files beside it while it writes, removed since)."""
    free = free_bytes(out.parent)
    have = f"{_mb(free)} free" if free is not None else "free space unknown"
    if err in TOO_LARGE:
        why = f"the file system of {out.parent} refuses a file this large (File too large)"
    else:
        why = f"no space left on the device of {out.parent}"
    during = f" ({_mb(needed + spools)} while it is written)" if spools else ""
    return PackError(
        f"{out}: {why}: the pack needs about {_mb(needed)}{during}; {have}. Free some space or "
        "write the pack elsewhere with -o; the existing file is untouched"
    )


ALMOST_FULL = 2**20  # free bytes under which a crashed write is taken for a full disk


def _at_file_size_limit(written: int) -> bool:
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    return soft != resource.RLIM_INFINITY and written + ALMOST_FULL >= soft


def write_failure(
    out: Path,
    e: ChildFailed | OSError,
    needed: int,
    free_at_failure: int | None,
    spools: int = 0,
    written: int = 0,
) -> PackError:
    """A failed or crashed HDF5 write as one line: disk full when it was (or looks) full.

    ``free_at_failure`` and ``written`` (the temp file's size): measured before the temp files
    were removed, to tell why a crashed child crashed.
    """
    err = e.errno if isinstance(e, ChildFailed) else error_number(e)
    if err in FULL or err in TOO_LARGE:
        return no_space_error(out, needed, err, spools)
    if isinstance(e, ChildFailed) and e.signal is not None:  # HDF5 died: find out why
        if _at_file_size_limit(written):
            return no_space_error(out, needed, errno.EFBIG, spools)
        if free_at_failure is not None and free_at_failure < ALMOST_FULL:
            return no_space_error(out, needed, spools=spools)
    detail = e.detail if isinstance(e, ChildFailed) else describe(e)
    return PackError(f"{out}: writing the pack failed ({detail}); the existing file is untouched")


__all__ = [
    "ChildFailed",
    "error_number",
    "free_bytes",
    "no_space_error",
    "run_in_child",
    "write_failure",
]
