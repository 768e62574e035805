"""Run a function in a forked child that may crash, hang or blow up its memory, safely.

``verify`` parses untrusted HDF5 here: the HDF5 C library has had 130+ CVEs for crafted files,
so the child (``kbpack.runtime.child.Forked``) gets an address-space limit, a wall-clock
timeout, no core dumps, no right to write files and stdio on /dev/null, and a crash becomes one
``SandboxFailure``, not a dead CLI. The result comes back as JSON through a pipe.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import resource
import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kbpack.errors import describe
from kbpack.runtime.child import Forked, Reply, signal_name


@dataclass(frozen=True)
class Limits:
    """Limits of the child that parses HDF5."""

    timeout_s: float = 600.0
    memory_bytes: int = 4 * 2**30


class SandboxFailure(Exception):
    """The child crashed, hung or ran out of memory; ``code`` is the verify finding code."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


class Isolated:
    """``fn(*args)`` in a forked child (``kbpack.runtime.child.Forked``) with an address-space
    limit, a wall-clock timeout, no core dumps, no right to write files, and stdio on /dev/null.

    The child runs ``preload`` at once, then waits for ``result()`` to release it, so slow
    imports overlap the parent's work while nothing is parsed before the parent says so.
    ``result()`` returns fn's JSON-able value; a crash, hang or memory blow-up raises
    SandboxFailure with a one-line detail. ``cancel()`` is safe to call at any time.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        limits: Limits,
        preload: Callable[[], None] | None = None,
    ) -> None:
        self.limits = limits

        def body(reply: Reply) -> None:
            payload: dict[str, Any] = {}
            try:
                _confine(limits)
                if preload is not None:
                    preload()
                if not reply.go():
                    return  # cancelled
                payload = {"ok": fn(*args)}
            except MemoryError:
                payload = {"error": "sandbox-memory", "detail": "over the verify memory limit"}
            except BaseException as e:
                payload = {"error": "hdf5-unreadable", "detail": describe(e)}
            reply.send(payload)

        self.child = Forked(body, gated=True)

    def result(self) -> Any:
        self.child.go()
        try:
            data, status = self.child.outcome(self.limits.timeout_s)
        except TimeoutError:
            raise SandboxFailure(
                "sandbox-timeout",
                f"HDF5 parsing took longer than {self.limits.timeout_s:g} s and was stopped",
            ) from None
        if os.WIFSIGNALED(status) and not data:
            name = signal_name(os.WTERMSIG(status))
            raise SandboxFailure("sandbox-crash", f"HDF5 parsing crashed the reader ({name})")
        try:
            payload = json.loads(data)
        except ValueError as e:
            raise SandboxFailure("sandbox-crash", "the reader died before reporting") from e
        if "error" in payload:
            raise SandboxFailure(payload["error"], payload["detail"])
        return payload["ok"]

    def cancel(self) -> None:
        self.child.kill()


def run_isolated(fn: Callable[..., Any], args: tuple[Any, ...], limits: Limits) -> Any:
    """``Isolated(fn, args, limits).result()``, always cleaned up."""
    child = Isolated(fn, args, limits)
    try:
        return child.result()
    finally:
        child.cancel()


def _confine(limits: Limits) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and kills us
    faulthandler.disable()  # a crash is reported by the parent, in one line
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/statm") as f:
            used = int(f.read().split()[0]) * resource.getpagesize()
        cap = used + limits.memory_bytes
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
