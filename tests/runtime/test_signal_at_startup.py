"""A Ctrl-C or SIGTERM while the ``kbpack`` command is still importing its CLI (before
kbpack/cli/main.py installs its handlers) ends in the same one line as later: ``kbpack:
interrupted``, exit 130 (kbpack/cli/entry.py). It was a 25-55 line KeyboardInterrupt traceback
(SIGINT) or rc -15 with no word (SIGTERM) in bench/faults.py's startup row."""

from __future__ import annotations

import subprocess
import sys

import pytest

import kbpack

# the signal arrives while ``kbpack.cli.main`` is being imported: the slow part of start-up
DURING_IMPORT = """
import builtins, os, signal, sys
sig = getattr(signal, sys.argv[1])
real = builtins.__import__
def hooked(name, *args, **kwargs):
    if name == "kbpack.cli.main":
        builtins.__import__ = real
        os.kill(os.getpid(), sig)
    return real(name, *args, **kwargs)
builtins.__import__ = hooked
sys.argv = ["kbpack", "--version"]
from kbpack.cli.entry import main
main()
"""


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_a_signal_while_the_cli_imports_is_one_line(sig: str) -> None:
    r = subprocess.run(
        [sys.executable, "-c", DURING_IMPORT, sig], capture_output=True, text=True, timeout=120
    )
    assert (r.returncode, r.stderr, r.stdout) == (130, "kbpack: interrupted\n", "")


def test_python_m_kbpack_is_the_command() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "kbpack", "--version"], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0 and kbpack.__version__ in r.stdout, r.stderr
