"""The ``kbpack`` command's first lines: a Ctrl-C or SIGTERM during start-up gets the same one
line as one later on.

Importing the CLI (click, numpy and the rest: 50 ms on a quiet machine, 0.2-0.5 s under load)
comes before kbpack/cli/main.py can install its handlers. A signal then met Python's defaults:
SIGINT printed a KeyboardInterrupt traceback of 25-55 lines and SIGTERM ended the process with
rc -15 and no word (bench/faults.py, the ``startup`` row). Nothing is open for writing yet, so
the true answer is the plain ``kbpack: interrupted``, exit 130. What is left uncovered is the
interpreter's own start (~25 ms quiet), before any kbpack code runs.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any


def _interrupted(signum: int, frame: Any) -> None:
    os.write(2, b"kbpack: interrupted\n")
    os._exit(130)  # nothing to clean up: no command has started


def answer_signals_early() -> None:
    """Until kbpack/cli/main.py's ``main`` replaces them: a signal ends the process in one line."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _interrupted)


def main() -> None:
    """The console script ``kbpack`` and ``python -m kbpack``."""
    answer_signals_early()
    from kbpack.model import early as early_model

    args = sys.argv[1:]
    query = args[:1] == ["query"]
    if query:
        early_model.start(args[1:])  # the model loads while click and the pack open
    try:
        from kbpack.cli.main import main as cli_main  # installs its own handlers first thing

        cli_main()
    except SystemExit as e:
        early_model.settle()  # an early load nobody claimed ends before the process does
        if query:
            from kbpack.cli.fast_exit import exit_now

            exit_now(e.code)  # no interpreter teardown (returns where one is needed)
        raise
    finally:
        early_model.settle()
