"""Child processes, the two kinds kbpack uses, written once.

* :class:`Forked`: a ``fork`` of this process that runs a function and sends back one JSON
  document through a pipe. It shares the parent's memory copy on write (nothing is pickled) and
  starts in a millisecond. A crash, a hang or a blown memory limit ends only the child; the
  parent sees how it ended. Used by the sandbox that parses untrusted HDF5 and loads untrusted
  models (``kbpack.runtime.sandbox``: limits, a gate, a timeout) and by the writer's HDF5 phase
  (``kbpack.pack.write_child``: errors reported before HDF5 cleans up, the child dies with
  its parent).
* :class:`Interpreter`: a fresh Python interpreter running ``module:function(conn, *args)``
  with a ``multiprocessing.connection.Connection`` over a socket pair. No fork of a parent that
  may hold threads (llama.cpp's), and no re-import of the caller's ``__main__`` as
  multiprocessing's spawn would do. Used by the extraction worker (``kbpack.extract.worker``:
  one long-lived child, a CPU-time limit per document) and by the fuzzer's fork server
  (``kbpack.testing.fuzz.fork_server``, which then forks one child per mutant from its warm,
  imported state: a fresh interpreter per mutant would cost a second of imports each).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any


def signal_name(sig: int) -> str:
    """``SIGSEGV`` for 11; the number for a signal Python does not name."""
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def how_it_ended(status: int | None) -> str:
    """A child's end in words, from a wait status (``os.waitpid``) or a ``Popen.returncode``
    (negative: the signal), None: still running."""
    if status is None:
        return "did not exit"
    if status < 0:
        return f"killed by {signal_name(-status)}"
    return f"exit status {status}"


class Reply:
    """The child's end of a :class:`Forked`: one JSON document to send (the first sent is
    the one the parent reads) and, for a gated child, the parent's go."""

    def __init__(self, out: int, gate: int) -> None:
        self._out = out
        self._gate = gate
        self.sent = False

    def send(self, payload: Mapping[str, Any]) -> None:
        if self.sent:
            return  # the first report is the cause; later ones are consequences
        self.sent = True
        view = memoryview(json.dumps(payload).encode())
        while view:
            view = view[os.write(self._out, view) :]

    def go(self) -> bool:
        """Wait for the parent's go (:meth:`Forked.go`); False: it cancelled instead."""
        return os.read(self._gate, 1) == b"g"


class Forked:
    """``body(reply)`` in a forked child, which then exits; the parent reads what it sent.

    ``gated``: the child may prepare (slow imports overlap the parent's work) and then wait at
    :meth:`Reply.go` until the parent calls :meth:`go`. :meth:`outcome` returns the bytes the
    child sent and its wait status; :meth:`kill` (safe at any time) ends and reaps it.
    """

    def __init__(self, body: Callable[[Reply], None], *, gated: bool = False) -> None:
        r, w = os.pipe()
        gate_r, gate_w = os.pipe() if gated else (-1, -1)
        pid = os.fork()
        if pid == 0:  # the child: never returns
            try:
                os.close(r)
                if gated:
                    os.close(gate_w)
                body(Reply(w, gate_r))
            finally:
                os._exit(0)
        os.close(w)
        if gated:
            os.close(gate_r)
        self.pid: int | None = pid
        self.out = r
        self.gate: int | None = gate_w if gated else None

    def go(self) -> None:
        if self.gate is not None:
            os.write(self.gate, b"g")
            os.close(self.gate)
            self.gate = None

    def outcome(self, timeout_s: float | None = None) -> tuple[bytes, int]:
        """What the child sent and its wait status, once it has closed its end; TimeoutError
        (the child still running: :meth:`kill` it) after ``timeout_s``."""
        assert self.pid is not None
        chunks: list[bytes] = []
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(self.pid)
                ready, _, _ = select.select([self.out], [], [], left)
                if not ready:
                    continue
            data = os.read(self.out, 1 << 20)
            if not data:
                break
            chunks.append(data)
        _, status = os.waitpid(self.pid, 0)
        self.pid = None
        return b"".join(chunks), status

    def kill(self) -> None:
        if self.gate is not None:
            os.close(self.gate)  # a gated child reads EOF at its gate and leaves
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


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(parent: int) -> None:
    """In a forked child: SIGKILL it when the parent (pid ``parent``) dies, where Linux allows
    it; exit at once if the parent is already gone. Tied to the forking thread, which must
    therefore wait for the child."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(1)


class Interpreter:
    """A fresh interpreter running ``target`` (``"package.module:function"``), called as
    ``function(conn, *args)`` with this side's :attr:`conn` at the other end. Its stdio is
    /dev/null; its environment is this process's with ``env`` on top (None: removed); this
    checkout of kbpack is first on its ``PYTHONPATH``."""

    def __init__(
        self,
        target: str,
        args: Sequence[str] = (),
        env: Mapping[str, str | None] | None = None,
    ) -> None:
        parent, child = socket.socketpair()
        self.conn = Connection(os.dup(parent.fileno()))
        parent.close()
        environ = dict(os.environ)
        for name, value in (env or {}).items():
            if value is None:
                environ.pop(name, None)
            else:
                environ[name] = value
        package_root = str(Path(__file__).resolve().parents[2])  # above kbpack/
        paths = (package_root, environ.get("PYTHONPATH"))
        environ["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        launch = "import sys; from kbpack.runtime.child import run_target; run_target(sys.argv[1:])"
        self.process = subprocess.Popen(
            [sys.executable, "-c", launch, target, str(child.fileno()), *args],
            pass_fds=(child.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,  # what matters comes back over the connection
            env=environ,
        )
        child.close()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.conn.close()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Ask the target to return (it receives None), wait ``timeout_s``, then kill."""
        with contextlib.suppress(OSError, ValueError, subprocess.TimeoutExpired):
            self.conn.send(None)
            self.process.wait(timeout_s)
        self.kill()


def jobs(conn: Connection) -> Iterator[Any]:
    """In an :class:`Interpreter`'s target: the messages the parent sends, until it sends None
    (:meth:`Interpreter.stop`) or goes away."""
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return
        yield job


def run_target(argv: list[str]) -> None:
    """In an :class:`Interpreter`: ``argv`` = [target, connection fd, args...]."""
    module, _, function = argv[0].partition(":")
    getattr(importlib.import_module(module), function)(Connection(int(argv[1])), *argv[2:])


__all__ = [
    "Forked",
    "Interpreter",
    "Reply",
    "die_with_parent",
    "how_it_ended",
    "jobs",
    "run_target",
    "signal_name",
]
