"""Extraction in a long-lived child process, so a hung or crashing parser costs one document.

The parent sends one file at a time and gives the worker ``Limits.timeout_s`` seconds of CPU
time for it (on Linux, read from /proc: a busy machine that shares the cores does not fail
genuine documents), or ten times that in wall time for a parser that waits without computing.
A worker over either limit is killed (the document fails with stage ``timeout``);
one that dies (segfault, killed for memory) fails its document with stage ``crash``. Either
way a fresh worker takes the next file. While the caller works on document *i* the worker
already extracts document *i + 1*, so at most two documents are held at once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from multiprocessing.connection import Connection
from pathlib import Path

from kbpack.errors import KbpackError
from kbpack.extract.common import blank_document, failed, file_identity
from kbpack.extract.discover import Candidate
from kbpack.extract.limits import Limits
from kbpack.runtime.child import Interpreter, how_it_ended, jobs
from kbpack.text.document import Document

_START_TIMEOUT_S = 120.0  # importing pypdfium2 and python-docx in a fresh interpreter
_STOP_TIMEOUT_S = 5.0
_WALL_FACTOR = 10.0  # wall-time limit = this x the CPU-time limit (a parser blocked, not computing)
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a live process (Linux /proc), or None where unknown."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS
    except (OSError, IndexError, ValueError):
        return None


def serve(conn: Connection, memory_limit: str) -> None:
    """The worker's loop (in a ``kbpack.runtime.child.Interpreter``): receive (path, name,
    limits), send back a Document; None stops it. ``memory_limit``: bytes, 0 for none."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops us
    if int(memory_limit) > 0:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (int(memory_limit), int(memory_limit)))
    # Import every extractor before saying ready, so a timeout measures extraction only.
    import kbpack.extract.docx
    import kbpack.extract.html
    import kbpack.extract.pdf  # noqa: F401
    from kbpack.extract.file import extract_file

    conn.send("ready")
    for path, name, limits in jobs(conn):
        conn.send(extract_file(path, name, limits))


class _Worker(Interpreter):
    """A child interpreter running :func:`serve` (``kbpack.runtime.child.Interpreter``: a
    fresh interpreter, not a fork of a parent that may hold llama.cpp's threads)."""

    def __init__(self, limits: Limits) -> None:
        memory = str(limits.max_worker_memory_bytes)
        super().__init__("kbpack.extract.worker:serve", [memory])
        if not self.conn.poll(_START_TIMEOUT_S) or self._recv() != "ready":
            self.kill()
            raise KbpackError(
                f"the extraction worker process did not start ({sys.executable}); check that kbpack and its dependencies are installed"
            )

    def _recv(self) -> object:
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            return None

    def send(self, candidate: Candidate, limits: Limits) -> None:
        self.sent_at = time.monotonic()
        self.cpu_at_send = _cpu_seconds(self.process.pid)
        self.conn.send((candidate.path, candidate.name, limits))

    def _answered(self, timeout_s: float) -> bool:
        """Whether the worker answered before spending ``timeout_s`` CPU seconds on the job
        (wall seconds where the CPU time cannot be read), or ``_WALL_FACTOR`` times that in
        wall time."""
        wall_end = self.sent_at + timeout_s * _WALL_FACTOR
        while True:
            now = time.monotonic()
            cpu = _cpu_seconds(self.process.pid)
            if cpu is None or self.cpu_at_send is None:
                left = self.sent_at + timeout_s - now  # no CPU clock: wall time only
            else:
                # One thread cannot spend more CPU than wall time: sleeping what is left of
                # the CPU budget never overshoots it (by more than a clock tick).
                left = min(timeout_s - (cpu - self.cpu_at_send), wall_end - now)
            if left <= 0:
                return self.conn.poll(0)
            if self.conn.poll(min(max(left, 0.01), 1.0)):
                return True

    def wait(self, timeout_s: float) -> Document | str:
        """The Document, or 'timeout' / 'crash:<detail>' (the worker is then dead)."""
        if not self._answered(timeout_s):
            self.kill()
            return "timeout"
        result = self._recv()
        if isinstance(result, Document):
            return result
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(_STOP_TIMEOUT_S)
        code = self.process.returncode
        self.kill()
        return f"crash:{how_it_ended(code)}"


def _lost(candidate: Candidate, outcome: str, limits: Limits) -> Document:
    """The failed record of a document whose worker hung or died."""
    doc = blank_document(candidate.path, candidate.name, candidate.kind)
    try:
        if stat.S_ISREG(os.stat(candidate.path).st_mode):
            size, digest = file_identity(Path(candidate.path))
            doc = replace(doc, source_size=size, source_sha256=digest)
    except OSError:
        pass
    if outcome == "timeout":
        return failed(
            doc,
            f"extraction did not finish within {limits.timeout_s:g} s of CPU time and was "
            "stopped; raise the time limit (--timeout) if the file is genuine",
            "timeout",
        )
    detail = outcome.removeprefix("crash:")
    return failed(doc, f"the extractor process died ({detail}); the file may be hostile", "crash")


def extract_all(
    candidates: Sequence[Candidate], limits: Limits | None = None
) -> Iterator[Document]:
    """One Document per candidate, in order, each extracted in the worker process."""
    limits = limits or Limits()
    worker: _Worker | None = None
    try:
        for i, candidate in enumerate(candidates):
            if i == 0:
                worker = _Worker(limits)
                worker.send(candidate, limits)
            assert worker is not None
            outcome = worker.wait(limits.timeout_s)
            doc = outcome if isinstance(outcome, Document) else _lost(candidate, outcome, limits)
            if candidate.note:
                doc.warnings = [candidate.note, *doc.warnings]
            if not isinstance(outcome, Document):
                worker = None
            if i + 1 < len(candidates):
                worker = worker or _Worker(limits)
                worker.send(candidates[i + 1], limits)
            yield doc
    except BaseException:
        # Ctrl-C, an error, or a caller that stopped early: the current job is abandoned.
        if worker is not None:
            worker.kill()
            worker = None
        raise
    finally:
        if worker is not None:
            worker.stop(_STOP_TIMEOUT_S)
