"""Temporary files beside a pack being written, and the removal of those a dead writer left.

A writer's files are named ``.NAME.tmp-HOST-PID-TOKEN`` (the HDF5 file), the same plus
``.text``, ``.vec``, ``.pieces`` or ``.gguf`` (its spools) or ``.unsplit``/``.NNN.part`` (a split's
whole pack and members, whose own writers' files start with one more dot), beside the output
``NAME``, so that ``os.replace`` stays on one file system. A SIGKILL or a power cut leaves them behind; the next writer of the same
output removes those whose writer is gone: same host, and no process with that PID. A file
from another host (a shared folder) or from a live process is never touched.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import socket
from pathlib import Path


def _host() -> str:
    # letters, digits and dots only, so that the name parses back unambiguously
    return re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname())[:32] or "host"


def temp_path_for(out: Path) -> Path:
    """A fresh temp path beside ``out`` that names this host and process."""
    return out.with_name(f".{out.name}.tmp-{_host()}-{os.getpid()}-{secrets.token_hex(4)}")


def _pattern(out: Path) -> re.Pattern[str]:
    # kbpack 0.1 wrote ".NAME.tmp-PID-TOKEN" (no host): read as this host's. A name may go on
    # with a dot (spools, split's members and their own writers' files, which start with
    # another dot): everything named after a temp path is that writer's.
    return re.compile(
        rf"\.+{re.escape(out.name)}\.tmp-(?:(?P<host>[A-Za-z0-9._]+)-)?(?P<pid>\d+)-[0-9a-f]{{8}}"
        r"(?:\..*)?"
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's live process
    return True


def stale_temp_files(out: Path) -> list[Path]:
    """Temp files beside ``out`` left by writers on this host that no longer run."""
    pattern, host, me = _pattern(out), _host(), os.getpid()
    stale = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(out.parent):
            m = pattern.fullmatch(entry.name)
            if m is None or (m["host"] or host) != host:
                continue
            pid = int(m["pid"])
            if pid != me and not _alive(pid) and entry.is_file(follow_symlinks=False):
                stale.append(Path(entry.path))
    return sorted(stale)


def remove_stale_temp_files(out: Path) -> list[Path]:
    """Remove what ``stale_temp_files`` finds; returns what was removed."""
    removed = []
    for p in stale_temp_files(out):
        with contextlib.suppress(OSError):
            p.unlink()
            removed.append(p)
    return removed


__all__ = ["remove_stale_temp_files", "stale_temp_files", "temp_path_for"]
