"""Where a pack write can fail, and how a test makes it fail there (the SQLite way: an I/O
error injected at each point, the product code unchanged).

Each phase names the call that does that phase's I/O; :func:`inject` makes that call raise
``OSError(err)`` naming the file it was writing, exactly as the OS would. The HDF5 phase runs in
the writer's forked child, which inherits the injection. Used by tests/hostile/test_fault_matrix.py
(a bounded matrix in the suite) and bench/faults.py (the whole matrix, with signals).
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

# The phases of a write, in the order a build meets them.
PHASES = ("discover", "extract", "spool", "embed", "hdf5", "header", "fsync", "rename")
FAULTS = {"ENOSPC": errno.ENOSPC, "EIO": errno.EIO}


def _oserror(err: int, path: object) -> OSError:
    return OSError(err, os.strerror(err), str(path))


class _FaultyFile:
    """A file whose writes fail with ``err`` (a full disk, a dying disk) after ``ok`` writes."""

    def __init__(self, f: Any, err: int, ok: int = 0) -> None:
        self._f, self._err, self._ok = f, err, ok

    def write(self, data: bytes) -> int:
        if self._ok <= 0:
            raise _oserror(self._err, self._f.name)
        self._ok -= 1
        return int(self._f.write(data))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


@contextlib.contextmanager
def _patched(owner: Any, name: str, replacement: Any) -> Iterator[None]:
    old = getattr(owner, name)
    setattr(owner, name, replacement)
    try:
        yield
    finally:
        setattr(owner, name, old)


def _failing(err: int, path: Callable[..., object], after: int = 0) -> Callable[..., Any]:
    """A stand-in that raises ``OSError(err)`` on its call number ``after + 1``."""
    calls = {"n": 0}

    def fail(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] > after:
            raise _oserror(err, path(*args, **kwargs))
        return fail.real(*args, **kwargs)  # type: ignore[attr-defined]

    return fail


@contextlib.contextmanager
def inject(phase: str, err: int, out: Path) -> Iterator[None]:
    """While inside, the write of ``out`` fails at ``phase`` with ``err``."""
    import builtins

    from kbpack.ops import build
    from kbpack.pack import write, write_hdf5, write_spools

    if phase == "discover":  # reading the source folders
        f = _failing(err, lambda sources, *a, **k: sources[0])
        f.real = build.discover  # type: ignore[attr-defined]
        with _patched(build, "discover", f):
            yield
    elif phase == "extract":  # the second document's file cannot be read
        real = build.extract_all

        def extract_all(candidates: Any, *a: Any, **k: Any) -> Iterator[Any]:
            for n, doc in enumerate(real(candidates, *a, **k)):
                if n == 1:
                    raise _oserror(err, doc.source_path)
                yield doc

        with _patched(build, "extract_all", extract_all):
            yield
    elif phase == "spool":  # the text spool beside the output: the first write fails
        real_open = builtins.open

        def open_(path: Any, *a: Any, **k: Any) -> Any:
            f = real_open(path, *a, **k)
            return _FaultyFile(f, err) if str(path).endswith(".text") else f

        spools = write_spools
        with _patched(spools, "open", open_) if hasattr(spools, "open") else _set(spools, open_):
            yield
    elif phase == "embed":  # the model file cannot be read while embedding
        f = _failing(err, lambda embedder, *a, **k: embedder.path)
        f.real = build._embed  # type: ignore[attr-defined]
        with _patched(build, "_embed", f):
            yield
    elif phase == "hdf5":  # a dataset write fails inside the HDF5 child
        f = _failing(err, lambda h, path, **k: h.filename, after=4)
        f.real = write_hdf5.create_dataset  # type: ignore[attr-defined]
        with _patched(write_hdf5, "create_dataset", f):
            yield
    elif phase == "header":  # the manifest into the user block
        f = _failing(err, lambda path, *a, **k: path)
        f.real = write.write_header  # type: ignore[attr-defined]
        with _patched(write, "write_header", f):
            yield
    elif phase == "fsync":  # fsync of the complete temp file (where a dying disk says EIO)
        f = _failing(err, lambda path: path)
        f.real = write._fsync_file  # type: ignore[attr-defined]
        with _patched(write, "_fsync_file", f):
            yield
    elif phase == "rename":  # os.replace onto the output
        real_replace = os.replace

        def replace(src: Any, dst: Any, *a: Any, **k: Any) -> None:
            # a rename that publishes: onto a visible name beside the output (split's members
            # too), not the hidden intermediate renames
            if Path(dst).parent == out.parent and not Path(dst).name.startswith("."):
                raise _oserror(err, dst)
            real_replace(src, dst, *a, **k)

        with _patched(os, "replace", replace):
            yield
    else:
        raise ValueError(f"unknown phase {phase!r}; one of {PHASES}")


@contextlib.contextmanager
def _set(module: Any, open_: Any) -> Iterator[None]:
    """``module.open`` where the module uses the builtin (no attribute to save)."""
    module.open = open_
    try:
        yield
    finally:
        del module.open


# A killed write reports the phase it was in: ``startup`` (the interpreter starting, before any
# kbpack code), ``imports`` (kbpack/cli/entry.py answers signals; the CLI is being imported), the
# phases above as the build meets them, then ``published`` (the rename onto the output is done;
# the process is finishing).
KILL_PHASES = ("startup", "imports", *PHASES, "published")


@contextlib.contextmanager
def trace(log: Path, out: Path, kill: tuple[str, int, float, int] | None = None) -> Iterator[None]:
    """While inside, each phase of a write of ``out`` appends ``PHASE TIME PID`` to ``log`` as
    it starts (``published`` once the rename onto ``out`` is done), so that a process killed at
    a random moment tells which phase the signal hit. The HDF5 child appends too.

    ``kill=(PHASE, N, DELAY, SIGNAL)``: ``DELAY`` seconds after ``PHASE`` is traced for the
    ``N``-th time (from 1; phases such as extract and embed recur, once per document), send
    ``SIGNAL`` to the writing process (from a thread of whichever process traced the phase: the
    HDF5 child's kills its parent, as a kill from outside would), after appending
    ``signal TIME PID``. A thread started in the child dies with it: a delay longer than the
    child's life sends nothing.
    """
    import threading
    import time

    from kbpack.ops import build
    from kbpack.pack import write, write_hdf5

    writer = os.getpid()
    seen = {"n": 0}

    def append(line: str) -> None:
        with open(log, "a") as f:
            f.write(f"{line} {time.time():.6f} {os.getpid()}\n")

    def fire(sig: int) -> None:
        append("signal")
        os.kill(writer, sig)

    def mark(phase: str) -> None:
        append(phase)
        if kill is None or phase != kill[0]:
            return
        seen["n"] += 1
        if seen["n"] == kill[1]:
            if kill[2] <= 0:
                fire(kill[3])
            else:
                t = threading.Timer(kill[2], fire, (kill[3],))
                t.daemon = True
                t.start()

    def wrapped(phase: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            mark(phase)
            return real(*args, **kwargs)

        return call

    real_extract = build.extract_all

    def extract_all(candidates: Any, *a: Any, **k: Any) -> Iterator[Any]:
        for doc in real_extract(candidates, *a, **k):
            mark("extract")
            yield doc

    real_add = write.PackWriter.add_document
    real_replace = os.replace

    def replace(src: Any, dst: Any, *a: Any, **k: Any) -> None:
        publish = Path(dst).parent == out.parent and not Path(dst).name.startswith(".")
        if publish:
            mark("rename")
        real_replace(src, dst, *a, **k)
        if publish:
            mark("published")

    with contextlib.ExitStack() as stack:
        stack.enter_context(_patched(build, "discover", wrapped("discover", build.discover)))
        stack.enter_context(_patched(build, "extract_all", extract_all))
        stack.enter_context(_patched(build, "_embed", wrapped("embed", build._embed)))
        stack.enter_context(_patched(write.PackWriter, "add_document", wrapped("spool", real_add)))
        stack.enter_context(
            _patched(write_hdf5, "create_dataset", wrapped("hdf5", write_hdf5.create_dataset))
        )
        stack.enter_context(_patched(write, "write_header", wrapped("header", write.write_header)))
        stack.enter_context(_patched(write, "_fsync_file", wrapped("fsync", write._fsync_file)))
        stack.enter_context(_patched(os, "replace", replace))
        yield


def read_trace(log: Path) -> list[tuple[str, float, int]]:
    """``trace``'s log as (phase, time, pid), in the order written."""
    rows = []
    if log.exists():
        for line in log.read_text().splitlines():
            parts = line.split()
            if len(parts) == 3:
                rows.append((parts[0], float(parts[1]), int(parts[2])))
    return rows


def temp_files(folder: Path) -> list[str]:
    """What a write left beside its output: every hidden name (kbpack's temp files are all
    ``.NAME.tmp-...``; the test folders hold nothing else that is hidden)."""
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


__all__ = ["FAULTS", "KILL_PHASES", "PHASES", "inject", "read_trace", "temp_files", "trace"]
