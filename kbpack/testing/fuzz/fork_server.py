"""The process that runs pack commands for the fuzzer: a fork server.

A fresh interpreter (the *server*) imports kbpack, click, h5py, numpy and llama_cpp once, then
forks one child per mutant. The child runs every command on the mutant, sends the results back
and exits, so a crash kills only that child, a hang is ended by killing its process group (the
verify and pre-flight sandboxes it forked go with it), and nothing one mutant leaves in memory
(h5py's object cache, memos, a half-built searcher) reaches the next. Forking a warm process
costs a few milliseconds; starting a fresh interpreter and importing costs about a second.

The server itself never runs a command: llama.cpp's OpenMP thread pool does not survive a
fork, so only children load models. It is started with ``subprocess`` rather than
``multiprocessing`` because the caller (a test session) may have run llama.cpp itself, and
multiprocessing's spawn would re-run the caller's ``__main__``.

Messages on the socket, all from the server or its current child:
``("child", pid)`` from the server (the child waits at a pipe until it is sent, so that the two
never write at once), ``("start", command)`` from the child before each command, ``("done",
runs)`` at its end, then ``("reaped", wait status)`` from the server.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
from multiprocessing.connection import Connection
from pathlib import Path

from kbpack.runtime.child import Interpreter, jobs, signal_name
from kbpack.testing.fuzz.pack_target import CommandRun, PackCommands, run_all

# What the commands import lazily, imported once in the server so that no child pays for it.
PRELOAD = (
    "kbpack.cli.main",
    "kbpack.cli.commands.inspect",
    "kbpack.cli.commands.export",
    "kbpack.cli.commands.query",
    "kbpack.cli.commands.verify",
    "kbpack.api",
    "kbpack.search.searcher",
    "kbpack.model.embedder",
    "kbpack.model.rerank",
    "kbpack.verify.pipeline",
    "kbpack.verify.examine",
    "kbpack.pack.read",
    "kbpack.ops.migrate",
    "kbpack.pack.sign",
    "kbpack.pack.write",
    "kbpack.ops.merge",
    "kbpack.ops.split",
    "kbpack.ops.restore",
    "kbpack.pack.verified",
    "kbpack.runtime.progress",
    "kbpack.ops.outpath",
    "h5py",
    "numpy",
    "numpy.ctypeslib",
    "simsimd",
    "llama_cpp",  # imported, never used here: no thread pool exists before a fork
)
REAP_TIMEOUT_S = 30.0  # after its child was killed, the server must answer within this


def serve(conn: Connection) -> None:
    """The server's loop (in a ``kbpack.runtime.child.Interpreter``): receive (commands, pack
    path, the seed's data digests), fork a child that runs them, report how the child ended;
    None stops it.

    The children are forked here by hand, not with ``kbpack.runtime.child.Forked``: a child
    talks to the fuzzer directly over the server's connection (start and done messages), runs
    in its own process group (a hang is killed with the sandboxes it forked), and its end is
    reported by the server, which reaps it; none of that is a function's one JSON result."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us
    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    from kbpack.model.embedder import Embedder  # noqa: F401  (it sets OMP_WAIT_POLICY before llama_cpp)

    with contextlib.suppress(ImportError, AttributeError):
        import llama_cpp

        # ggml's one-time set-up (its float16 tables, the CPU backend): ~50 ms of CPU in every
        # child that loads a model otherwise. It starts no thread (measured: the server keeps
        # only numpy's OpenBLAS thread, which handles fork itself).
        llama_cpp.llama_backend_init()
    for job in jobs(conn):
        gate_r, gate_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            status = 0
            try:
                os.setpgid(0, 0)  # its own group: a hang is killed with its sandboxes
                os.close(gate_w)
                os.read(gate_r, 1)  # the server has said who we are: the socket is ours now
                commands, pack, expected = job
                runs = run_all(commands, Path(pack), lambda n: conn.send(("start", n)), expected)
                conn.send(("done", runs))
            except BaseException:
                status = 70  # the harness itself failed: reported as an exit, not hidden
            finally:
                os._exit(status)
        with contextlib.suppress(OSError):
            os.setpgid(pid, pid)  # also here: the parent may kill the group at once
        conn.send(("child", pid))
        os.write(gate_w, b"g")
        os.close(gate_w)
        os.close(gate_r)
        _, wait_status = os.waitpid(pid, 0)
        conn.send(("reaped", wait_status))


class Worker(Interpreter):
    """A fork server and the child running the current mutant; replaced only if the server
    itself stops answering."""

    def __init__(self, cache_dir: Path) -> None:
        # the memos of this run only; tracebacks of the commands' internal errors stay off
        env = {"KBPACK_CACHE_DIR": str(cache_dir), "KBPACK_DEBUG": None}
        super().__init__("kbpack.testing.fuzz.fork_server:serve", env=env)
        self.child = 0  # the pid (and process group) of the child running the current mutant

    def run(
        self,
        commands: PackCommands,
        pack: Path,
        timeout_s: float,
        expected: dict[str, str] | None = None,
    ) -> tuple[list[CommandRun] | None, str, str]:
        """(runs, "", "") or (None, "crash" | "hang", the command that was running + detail).
        ``timeout_s`` applies to each command (and to the fork)."""
        self.conn.send((commands, str(pack), expected))
        current, runs = "(start)", None
        self.child = child = 0
        while True:
            if not self.conn.poll(timeout_s):
                if not child or not self._kill_child(child):
                    self.kill()
                return None, "hang", f"{current}: no answer within {timeout_s:g} s"
            try:
                kind, payload = self.conn.recv()
            except (EOFError, OSError):
                self.kill()
                return None, "crash", f"{current}: the fork server died"
            if kind == "child":
                self.child = child = payload
            elif kind == "start":
                current = payload
            elif kind == "done":
                runs = payload
            elif kind == "reaped":
                return self._ended(runs, current, payload)

    @staticmethod
    def _ended(
        runs: list[CommandRun] | None, current: str, wait_status: int
    ) -> tuple[list[CommandRun] | None, str, str]:
        if os.WIFSIGNALED(wait_status):
            return None, "crash", f"{current}: killed by {signal_name(os.WTERMSIG(wait_status))}"
        code = os.WEXITSTATUS(wait_status)
        if runs is None or code != 0:
            return None, "crash", f"{current}: the child exited with status {code}"
        return runs, "", ""

    def _kill_child(self, pid: int) -> bool:
        """Kill a hung child's process group and wait for the server to reap it; False if the
        server does not answer (then it is killed too)."""
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)
        while self.conn.poll(REAP_TIMEOUT_S):
            try:
                kind, _ = self.conn.recv()
            except (EOFError, OSError):
                return False
            if kind == "reaped":
                return True
        return False

    def kill(self) -> None:
        """Kill the server and the current child's process group (which would otherwise run
        on, orphaned, until its command ends)."""
        if self.child:
            with contextlib.suppress(OSError):
                os.killpg(self.child, signal.SIGKILL)
            self.child = 0
        super().kill()
