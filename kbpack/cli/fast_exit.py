"""A finished ``kbpack query`` process ends without Python's teardown.

Python's exit tears down every module and object (numpy, h5py, llama.cpp's bindings, click:
~35 ms of a cold query's ~250 on a quiet machine, as long as the bare llama.cpp + h5py
script's; bench/RESULTS.md "Cold query"). Once the answer is written and flushed, nothing of
that teardown is seen by anyone: a query writes no file, its pack is closed, its model load
is over (``kbpack.model.early.settle``). So the process ends with ``os._exit`` and the exit
code the CLI chose.

It exits the normal way whenever the teardown has work to do: a tracer or profiler is set
(coverage, cProfile write their data at exit), a thread other than daemons is still running
(Python would wait for it), or stdout or stderr cannot be flushed (a reader that went away:
Python's own exit reports it, with its exit code, as before).
"""

from __future__ import annotations

import os
import sys
import threading


def exit_now(code: object) -> None:
    """``os._exit(code)`` after flushing stdout and stderr; returns (for a normal exit) in
    the cases the module docstring lists, or for a code that is not a number."""
    if code is None:
        code = 0
    if not isinstance(code, int) or isinstance(code, bool) or not 0 <= code <= 255:
        return
    if sys.gettrace() is not None or sys.getprofile() is not None:
        return
    main = threading.main_thread()
    if any(t is not main and not t.daemon and t.is_alive() for t in threading.enumerate()):
        return
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):
        return
    os._exit(code)
