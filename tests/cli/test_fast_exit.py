"""A finished ``kbpack query`` ends with ``os._exit`` (kbpack/cli/fast_exit.py): its output must
still arrive whole, with the CLI's exit code; and where Python's normal exit has work to do,
the normal exit is taken."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from kbpack.cli.fast_exit import exit_now
from tests.paths import REPO_ROOT

ROOT = REPO_ROOT


def python(code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)


def test_buffered_output_arrives_and_the_code_is_kept() -> None:
    # stdout is a pipe here, so block-buffered: without the flush the lines would be lost
    done = python(
        "import sys, atexit\n"
        "from kbpack.cli.fast_exit import exit_now\n"
        "atexit.register(lambda: print('teardown ran'))\n"
        "print('answer ' * 5000); print('note', file=sys.stderr)\n"
        "exit_now(3)\n"
        "print('not reached')\n"
    )
    assert done.returncode == 3
    assert done.stdout == "answer " * 5000 + "\n"  # and no 'teardown ran': it was skipped
    assert done.stderr == "note\n"


@pytest.mark.parametrize("code", ["usage", 256, -1, True])
def test_a_code_that_is_not_an_exit_status_takes_the_normal_exit(code: object) -> None:
    exit_now(code)  # returned: the caller raises its SystemExit as before


def test_a_running_thread_takes_the_normal_exit() -> None:
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait)  # not a daemon: Python would wait for it
    worker.start()
    try:
        exit_now(0)
    finally:
        stop.set()
        worker.join()


def test_a_tracer_takes_the_normal_exit() -> None:
    old = sys.gettrace()
    sys.settrace(lambda *a: None)
    try:
        exit_now(0)  # coverage and profilers write their data at exit
    finally:
        sys.settrace(old)


def test_a_profiled_query_process_still_writes_its_profile(tmp_path: Path) -> None:
    out = tmp_path / "prof.out"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "cProfile", "-o", str(out), "-m", "kbpack", "query"]
    done = subprocess.run(
        [*cmd, str(tmp_path / "missing.kbpack"), "x"], capture_output=True, text=True, env=env
    )
    assert "missing.kbpack" in done.stderr  # (cProfile itself exits 0 after a SystemExit)
    assert out.stat().st_size > 0
