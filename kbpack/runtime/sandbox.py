"""Run a function in a forked child that may crash, hang or blow up its memory, safely.

``verify`` parses untrusted HDF5 here: the HDF5 C library has had 130+ CVEs for crafted files,
so the child gets an address-space limit, a wall-clock timeout, no core dumps, no right to
write files and stdio on /dev/null, and a crash becomes one ``SandboxFailure``, not a dead CLI.
The result comes back as JSON through a pipe.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import resource
import select
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kbpack.errors import describe


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
    """``fn(*args)`` in a forked child with an address-space limit, a wall-clock timeout, no
    core dumps, no right to write files, and stdio on /dev/null.

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
        r, w = os.pipe()
        gate_r, gate_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            os.close(r)
            os.close(gate_w)
            payload: dict[str, Any] = {}
            try:
                _confine(limits)
                if preload is not None:
                    preload()
                if os.read(gate_r, 1) != b"g":
                    os._exit(0)  # cancelled
                payload = {"ok": fn(*args)}
            except MemoryError:
                payload = {"error": "sandbox-memory", "detail": "over the verify memory limit"}
            except BaseException as e:
                payload = {"error": "hdf5-unreadable", "detail": describe(e)}
            try:
                view = memoryview(json.dumps(payload).encode())
                while view:
                    view = view[os.write(w, view) :]
            finally:
                os._exit(0)
        os.close(w)
        os.close(gate_r)
        self.pid: int | None = pid
        self.out = r
        self.gate: int | None = gate_w

    def result(self) -> Any:
        assert self.pid is not None and self.gate is not None
        os.write(self.gate, b"g")
        os.close(self.gate)
        self.gate = None
        chunks: list[bytes] = []
        deadline = time.monotonic() + self.limits.timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise SandboxFailure(
                    "sandbox-timeout",
                    f"HDF5 parsing took longer than {self.limits.timeout_s:g} s and was stopped",
                )
            ready, _, _ = select.select([self.out], [], [], left)
            if ready:
                data = os.read(self.out, 1 << 20)
                if not data:
                    break
                chunks.append(data)
        _, status = os.waitpid(self.pid, 0)
        self.pid = None
        if os.WIFSIGNALED(status) and not chunks:
            sig = os.WTERMSIG(status)
            name = signal.Signals(sig).name if sig in set(signal.Signals) else sig
            raise SandboxFailure("sandbox-crash", f"HDF5 parsing crashed the reader ({name})")
        try:
            payload = json.loads(b"".join(chunks))
        except ValueError as e:
            raise SandboxFailure("sandbox-crash", "the reader died before reporting") from e
        if "error" in payload:
            raise SandboxFailure(payload["error"], payload["detail"])
        return payload["ok"]

    def cancel(self) -> None:
        if self.gate is not None:
            os.close(self.gate)  # the child reads EOF at its gate and leaves
            self.gate = None
        if self.pid is not None:
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                os.waitpid(self.pid, 0)
            self.pid = None
        if self.out >= 0:
            with contextlib.suppress(OSError):
                os.close(self.out)
            self.out = -1


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
