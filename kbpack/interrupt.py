"""Ctrl-C and SIGTERM that cannot be lost.

The CLI's signal handler records the request here and raises KeyboardInterrupt. Python prints
and swallows an exception raised inside a finalizer (h5py closes objects from weakref
callbacks) or a ctypes callback (llama.cpp's log hook): the interrupt would then be lost and
the build would go on to replace the output. So the last step before anything becomes
visible -- the writer's ``os.replace`` -- calls :func:`check`, and long loops call it too.
"""

from __future__ import annotations

_requested = False


def request() -> None:
    global _requested
    _requested = True


def requested() -> bool:
    return _requested


def reset() -> None:
    global _requested
    _requested = False


def check() -> None:
    """Raise KeyboardInterrupt if an interrupt was requested, even one swallowed earlier."""
    if _requested:
        raise KeyboardInterrupt
