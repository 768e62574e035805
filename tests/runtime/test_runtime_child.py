"""The child processes kbpack runs (kbpack/runtime/child.py): what a child sends comes back
whole, a crash or a hang ends only the child and is seen for what it was, and nothing is left
running or unreaped."""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import time
from multiprocessing.connection import Connection

import pytest

from kbpack.runtime.child import Forked, Interpreter, Reply, how_it_ended, signal_name


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_what_a_forked_child_sends_comes_back_whole() -> None:
    big = "x" * (3 << 20)  # more than a pipe holds: the parent reads while the child writes
    child = Forked(lambda reply: reply.send({"ok": big}))
    try:
        data, status = child.outcome(timeout_s=60)
    finally:
        child.kill()
    assert json.loads(data) == {"ok": big}
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def test_only_the_first_report_is_sent() -> None:
    def body(reply: Reply) -> None:
        reply.send({"error": "the cause"})
        reply.send({"error": "a consequence"})

    child = Forked(body)
    data, _ = child.outcome()
    child.kill()
    assert json.loads(data) == {"error": "the cause"}


def test_a_crash_is_seen_as_the_signal_that_ended_the_child() -> None:
    def crash(reply: Reply) -> None:
        faulthandler.disable()  # pytest's: it would print the child's stack
        os.kill(os.getpid(), signal.SIGSEGV)

    child = Forked(crash)
    data, status = child.outcome(timeout_s=60)
    child.kill()
    assert data == b""
    assert os.WIFSIGNALED(status) and signal_name(os.WTERMSIG(status)) == "SIGSEGV"


def test_a_hang_times_out_and_kill_reaps_the_child() -> None:
    child = Forked(lambda reply: time.sleep(600))
    pid = child.pid
    assert pid is not None
    with pytest.raises(TimeoutError):
        child.outcome(timeout_s=0.5)
    child.kill()
    with pytest.raises(ChildProcessError):  # reaped: no zombie left behind
        os.waitpid(pid, os.WNOHANG)
    assert not _alive(pid)


def test_a_gated_child_waits_for_the_go_and_leaves_when_cancelled() -> None:
    started = Forked(lambda reply: reply.send({"went": reply.go()}), gated=True)
    started.go()
    data, _ = started.outcome(timeout_s=60)
    started.kill()
    assert json.loads(data) == {"went": True}

    cancelled = Forked(lambda reply: reply.send({"went": reply.go()}), gated=True)
    cancelled.kill()  # closes the gate, kills and reaps: safe before any go
    assert cancelled.pid is None


def echo(conn: Connection, greeting: str) -> None:
    """An Interpreter target: answers every message until None."""
    while (message := conn.recv()) is not None:
        conn.send(f"{greeting} {message} from {os.getpid()}")


def test_an_interpreter_runs_its_target_until_stopped() -> None:
    worker = Interpreter("tests.runtime.test_runtime_child:echo", ["hello"])
    try:
        worker.conn.send("world")
        assert worker.conn.poll(120)
        answer = worker.conn.recv()
        assert answer == f"hello world from {worker.process.pid}"
        assert worker.process.pid != os.getpid()
    finally:
        worker.stop()
    assert worker.process.returncode == 0  # it returned when told to, not killed


def test_an_interpreter_that_dies_is_described() -> None:
    worker = Interpreter("tests.runtime.test_runtime_child:echo", ["hello"])
    os.kill(worker.process.pid, signal.SIGKILL)
    worker.process.wait()
    worker.kill()
    assert how_it_ended(worker.process.returncode) == "killed by SIGKILL"
    assert how_it_ended(3) == "exit status 3" and how_it_ended(None) == "did not exit"
