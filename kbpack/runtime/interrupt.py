"""Ctrl-C and SIGTERM that cannot be lost, and that never lie about the output.

The CLI's signal handler records the request here and raises KeyboardInterrupt. Python prints
and swallows an exception raised inside a finalizer (h5py closes objects from weakref
callbacks) or a ctypes callback (llama.cpp's log hook): the interrupt would then be lost and
the build would go on to replace the output. So the last step before anything becomes
visible -- the writer's ``os.replace`` -- calls :func:`check`, and long loops call it too.

The rename itself and what follows it are :func:`uninterruptible`: a signal there is recorded
and raised when the block ends, so a pack is never half published (renamed but its folder not
synced, a split set with some members renamed). Writers record what they published
(:func:`published`), so that the CLI's message after a late signal says the new file is
complete instead of claiming the output was left as it was.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

_requested = False
_deferred = 0
_published: list[Path] = []


def request() -> None:
    global _requested
    _requested = True


def requested() -> bool:
    return _requested


def reset() -> None:
    global _requested, _deferred
    _requested = False
    _deferred = 0
    _published.clear()


def check() -> None:
    """Raise KeyboardInterrupt if an interrupt was requested, even one swallowed earlier."""
    if _requested:
        raise KeyboardInterrupt


def deferred() -> bool:
    """Whether a signal must only be recorded now (inside :func:`uninterruptible`)."""
    return _deferred > 0


@contextlib.contextmanager
def uninterruptible() -> Iterator[None]:
    """A signal inside the block is recorded; KeyboardInterrupt is raised when it ends (unless
    the block raised on its own). Keep the block to the few milliseconds of a rename + fsync."""
    global _deferred
    _deferred += 1
    try:
        yield
    finally:
        _deferred -= 1
    if _requested and not _deferred:
        raise KeyboardInterrupt


def hold() -> None:
    """From now on signals are only recorded: the process is ending (the CLI's last steps)."""
    global _deferred
    _deferred += 1


def published(path: Path) -> None:
    """``path`` now holds a complete new file (called right after its ``os.replace``)."""
    _published.append(Path(path))


def published_paths() -> list[Path]:
    return list(_published)


__all__ = [
    "check",
    "deferred",
    "hold",
    "published",
    "published_paths",
    "request",
    "requested",
    "reset",
    "uninterruptible",
]
