"""``kbpack serve --workers N``: one server process per core, all forked from one checked library.

One server process answers on about one core whatever the machine has: the requests' own steps
(BM25, ranking, citations, HTTP) hold Python's GIL (bench/RESULTS.md "Serve in batches"). So
the supervisor (the ``kbpack serve`` process) opens and checks the packs once, makes the
bfloat16 copies that batches scan, binds the socket, and then forks the workers: each runs the
web app on the shared socket with its own threads, batches and llama.cpp contexts, and shares
with the others, copy on write, everything made before the fork (the vectors' copies, the BM25
arrays, the model's weights). Nothing is re-opened after the check: the workers serve the very
files the supervisor checked.

A pack whose file changes at its path is checked by the supervisor alone (``Library.refresh``,
the single-process rule: the held file is served until the new one passed); the workers show
its note (``Board``). Once the new file passed, the workers are replaced: the old ones stop
taking connections and drain (each answers the requests of the connections it holds, the
next one with ``Connection: close``, so that the client's next request opens a connection to a
new worker; closing a kept-alive connection outright would reset a request a client sent on it
in that instant), while new ones are forked from the supervisor, which holds the new file. So
a connection never gets the new file and then the old one; two connections may, for the
moment a swap takes. A worker that dies unexpectedly is replaced, unless workers keep dying.

The supervisor never runs llama.cpp nor answers a request, so it holds no thread when it forks
(llama.cpp's OpenMP threads do not survive a fork; kbpack.runtime.child says the same).
"""

from __future__ import annotations

import contextlib
import gc
import json
import mmap
import os
import signal
import struct
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from kbpack.errors import KbpackError, describe
from kbpack.runtime.child import how_it_ended
from kbpack.runtime.terminal import printable

POLL_S = 0.5  # how often the supervisor looks at the pack files and its workers
STOP_S = 10.0  # a stopping worker's time to finish its requests (uvicorn's own grace is 5 s)
# a replaced worker's time to drain its connections (an idle one is closed by uvicorn's
# keep-alive timeout, 5 s); then it stops as on SIGTERM, and is killed STOP_S later
DRAIN_S = 10.0
RESTARTS = 5  # workers that may die unexpectedly within RESTART_WINDOW_S before serve gives up
RESTART_WINDOW_S = 60.0


def default_workers() -> int:
    """``--workers``' default: one per core the process may use, at most 8, on Linux (where
    forking a process that holds HDF5 files and a loaded model is what this module is tested
    on); 1 elsewhere."""
    if not sys.platform.startswith("linux"):
        return 1
    from kbpack.model.embedder import available_threads

    return max(1, min(8, available_threads()))


class Board:
    """Notes the supervisor writes and its workers read: one JSON document in an anonymous
    shared mapping, made before the fork (so every worker maps the same pages), guarded by a
    sequence number that is odd while it is written (one writer, the supervisor)."""

    SIZE = 1 << 16
    _HEAD = struct.Struct("<QI")  # sequence, length of the JSON that follows

    def __init__(self) -> None:
        self._map = mmap.mmap(-1, self.SIZE)  # MAP_SHARED | MAP_ANONYMOUS
        self._seq = 0
        self._last: dict[str, str | None] | None = None
        self.write({})

    def write(self, notes: dict[str, str | None]) -> None:
        if notes == self._last:
            return
        body = json.dumps(notes).encode()
        room = self.SIZE - self._HEAD.size
        if len(body) > room:  # notes are a line each: only paths of extreme length get here
            cut = {k: (v[:200] + "...") if v else v for k, v in notes.items()}
            body = json.dumps(cut).encode()[:room]
        self._seq += 1
        self._map[0:8] = struct.pack("<Q", self._seq)  # odd: being written
        self._map[self._HEAD.size : self._HEAD.size + len(body)] = body
        self._map[8:12] = struct.pack("<I", len(body))
        self._seq += 1
        self._map[0:8] = struct.pack("<Q", self._seq)
        self._last = dict(notes)

    def read(self) -> dict[str, str | None]:
        for _ in range(1000):
            seq, n = self._HEAD.unpack_from(self._map, 0)
            if seq % 2:
                time.sleep(0.0001)
                continue
            body = self._map[self._HEAD.size : self._HEAD.size + n]
            if self._HEAD.unpack_from(self._map, 0)[0] != seq:
                continue
            with contextlib.suppress(ValueError):
                got = json.loads(body)
                if isinstance(got, dict):
                    return got
        return {}


class Closing:
    """ASGI middleware: once ``on``, every response says ``Connection: close`` (uvicorn then
    closes the connection after it), so a draining worker's clients move to new workers."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.on = False

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if not self.on or scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def closing(message: Any) -> None:
            if message["type"] == "http.response.start":
                kept = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"connection"]
                message = {**message, "headers": [*kept, (b"connection", b"close")]}
            await send(message)

        await self.app(scope, receive, closing)


def worker_server(app: Any, sock: Any, config: dict[str, Any]) -> Callable[[], None]:
    """What a worker runs: uvicorn on the shared socket; SIGUSR1 drains it (``Closing``,
    then uvicorn's own shutdown)."""
    import asyncio

    import uvicorn

    closing = Closing(app)

    class Draining(uvicorn.Server):
        draining = False

        async def shutdown(self, sockets: list[Any] | None = None) -> None:
            if self.draining:
                for server in self.servers:
                    server.close()  # no new connections: the new workers take them
                loop = asyncio.get_running_loop()
                end = loop.time() + DRAIN_S
                while self.server_state.connections and not self.force_exit:
                    if loop.time() > end:
                        break
                    await asyncio.sleep(0.05)
            await super().shutdown(sockets)

    server = Draining(uvicorn.Config(closing, **config))

    def drain(*_: Any) -> None:
        closing.on = server.draining = server.should_exit = True

    def run() -> None:
        signal.signal(signal.SIGUSR1, drain)
        server.run(sockets=[sock])

    return run


class Workers:
    """Forks ``count`` workers that each run ``serve()`` (``worker_server``: the web app on
    the shared socket) and supervises them until KeyboardInterrupt (SIGINT or SIGTERM, as
    every kbpack command): then every worker is stopped and waited for."""

    def __init__(
        self,
        library: Any,
        serve: Callable[[], None],
        count: int,
        say: Callable[[str], None] = lambda _: None,
    ) -> None:
        self.library = library
        self.serve = serve
        self.count = count
        self.say = say
        self.board = Board()
        self.pids: set[int] = set()
        self.draining: dict[int, float] = {}  # replaced workers, and when they are killed
        self.generations = 0  # sets of workers forked (1 + the files swapped in)
        self._forked_with: list[int] = []
        self._deaths: deque[float] = deque()

    def run(self) -> None:
        try:
            self._start()
            while True:
                time.sleep(POLL_S)
                self._reap()
                self._watch_files()
        finally:
            self._stop(self.pids | set(self.draining))

    # -- the supervisor ---------------------------------------------------------------------
    def _readers(self) -> list[int]:
        return [id(p.reader) for p in self.library.packs.values()]

    def _start(self) -> None:
        """Fork a full set of workers from what the supervisor holds now."""
        gc.collect()  # a replaced pack's copies give their budget back first
        self.library.make_vector_copies()  # before the fork: one copy, shared by every worker
        self._forked_with = self._readers()
        self.generations += 1
        for _ in range(self.count):
            self.pids.add(self._fork())

    def _watch_files(self) -> None:
        """The single-process rule, run here: a changed file is checked (in a thread the
        supervisor waits for: no thread may run at a fork), the workers see its note, and a
        new file that passed replaces the workers."""
        for t in self.library.refresh():
            t.join()
        self.board.write({p.name: p.change for p in self.library.packs.values()})
        if self._readers() != self._forked_with:
            kill_at = time.monotonic() + DRAIN_S + STOP_S
            for pid in self.pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGUSR1)
                self.draining[pid] = kill_at
            self.pids = set()
            self._start()

    def _reap(self) -> None:
        for pid, kill_at in list(self.draining.items()):
            if _ended(pid, kill_at):
                del self.draining[pid]
        for pid in list(self.pids):
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done, status = pid, 0
            if done == 0:
                continue
            self.pids.discard(pid)
            code = os.waitstatus_to_exitcode(status)
            now = time.monotonic()
            self._deaths.append(now)
            while self._deaths and now - self._deaths[0] > RESTART_WINDOW_S:
                self._deaths.popleft()
            ended = how_it_ended(code)
            if len(self._deaths) > RESTARTS:
                raise KbpackError(
                    f"kbpack serve: workers keep stopping (the last: {ended}); see the lines "
                    "above, or run with --workers 1"
                )
            self.say(f"kbpack serve: a worker stopped ({ended}); starting another")
            self.pids.add(self._fork())

    def _stop(self, pids: set[int]) -> None:
        """SIGTERM (uvicorn stops taking connections and finishes its requests), then wait;
        SIGKILL what is still running after STOP_S."""
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_S
        left = set(pids)
        while left:
            left = {pid for pid in left if not _ended(pid, deadline)}
            if left:
                time.sleep(0.02)
        self.pids -= pids
        for pid in pids:
            self.draining.pop(pid, None)

    # -- a worker -----------------------------------------------------------------------------
    def _fork(self) -> int:
        others = [t for t in threading.enumerate() if t is not threading.main_thread()]
        for t in others:  # (a thread that is ending: a check's, a browser's launcher)
            t.join(timeout=STOP_S)
        alive = [t.name for t in others if t.is_alive()]
        if alive:  # a bug, not a user error: a fork now could deadlock the worker
            raise KbpackError(f"kbpack serve: cannot fork a worker while threads run ({alive})")
        sys.stdout.flush()
        sys.stderr.flush()
        parent = os.getpid()
        pid = os.fork()
        if pid:
            return pid
        code = 1
        try:  # the worker: never returns
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.signal(signal.SIGTERM, signal.default_int_handler)
            self.library.follow(self.board)
            self.library.share_cores(self.count)
            _die_with(parent)
            self.serve()
            code = 0
        except KeyboardInterrupt:
            code = 0
        except BaseException as e:
            why = str(e) if isinstance(e, KbpackError) else describe(e)
            with contextlib.suppress(Exception):
                line = printable(f"kbpack serve: worker {os.getpid()}: {why}")  # (a pack's text)
                print(line, file=sys.stderr, flush=True)
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)


def _ended(pid: int, kill_at: float) -> bool:
    """Whether worker ``pid`` has ended (and is reaped); one still running past ``kill_at``
    is killed and reaped."""
    try:
        if os.waitpid(pid, os.WNOHANG)[0]:
            return True
    except ChildProcessError:
        return True
    if time.monotonic() < kill_at:
        return False
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        os.waitpid(pid, 0)
    return True


def _die_with(parent: int) -> None:
    """Stop this worker (as SIGTERM would) when the supervisor is gone, even killed."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, daemon=True, name="kbpack-supervisor-watch").start()
