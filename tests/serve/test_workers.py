"""``kbpack serve --workers N``: one server process per core, forked from the one checked set
of packs (kbpack/serve/workers.py). What a user checks: every worker answers what ``kbpack
query`` answers; a worker that dies is replaced; Ctrl-C stops them all; a killed server does
not leave workers behind. (A pack swapped at its path: tests/serve/test_served_file.py, with
one worker and with two.)"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx", reason="the serve extra is not installed")
pytest.importorskip("starlette", reason="the serve extra is not installed")

from test_serve import Server, run  # noqa: E402

POLL_S = 60.0  # a bound on waiting for processes to come and go, not a timing assertion

DOCS = {
    "pump.md": "# Pump\n\n## Priming\n\nOpen the bleed valve and prime the centrifugal pump "
    "until water flows.\n\n## Seals\n\nReplace the mechanical seal every 4000 hours.\n",
    "boiler.md": "# Boiler\n\n## Pressure\n\nKeep the boiler pressure below 12 bar; the relief "
    "valve opens at 13 bar.\n",
    "crane.md": "# Crane\n\n## Inspection\n\nInspect the hoist rope and the hook latch before "
    "every shift; replace a rope with ten broken wires.\n",
}
QUERIES = [
    ("bm25", "centrifugal pump"),
    ("hybrid", "relief valve bar"),
    ("dense", "how often is the seal replaced"),
    ("hybrid", "hoist rope broken wires"),
]


@pytest.fixture(scope="module")
def pack(tmp_path_factory: pytest.TempPathFactory, wide_model: Path) -> Path:
    src = tmp_path_factory.mktemp("workers-docs")
    for name, text in DOCS.items():
        (src / name).write_text(text)
    out = tmp_path_factory.mktemp("workers-pack") / "plant.kbpack"
    code, _ = run("build", str(src), "-o", str(out), "--model", str(wide_model), "--quiet")
    assert code == 0
    return out


def workers_of(pid: int) -> set[int]:
    """Live children of ``pid`` (from each process's stat: /proc/PID/task/PID/children needs
    a kernel option not every kernel has)."""
    kids: set[int] = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            kids.add(int(stat.parent.name))
    return kids


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_for(what: str, until: object) -> None:
    deadline = time.monotonic() + POLL_S
    while not until():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"not seen within {POLL_S} s: {what}")
        time.sleep(0.05)


def fresh_get(s: Server, params: dict[str, str]) -> dict[str, object]:
    """One request on a new connection: any worker may take it."""
    r = httpx.get(s.base + "/api/search", params=params, timeout=60)
    assert r.status_code == 200, r.text
    got: dict[str, object] = r.json()
    return got


def test_every_worker_answers_what_query_answers(pack: Path, wide_model: Path) -> None:
    s = Server(str(pack), "--model", str(wide_model), "--workers", "2")
    try:
        assert s.info["workers"] == 2
        wait_for("two workers", lambda: len(workers_of(s.proc.pid)) == 2)
        for mode, q in QUERIES:
            code, out = run(
                "query", str(pack), q, "--mode", mode, "--json", "--model", str(wide_model)
            )
            assert code == 0
            want = json.loads(out)["results"]
            assert want, (mode, q)
            for _ in range(6):  # fresh connections: both workers answer, sooner or later
                got = fresh_get(s, {"q": q, "mode": mode})
                assert got["results"] == want, (mode, q)
    finally:
        assert s.stop() == 130


def test_a_worker_that_dies_is_replaced_and_ctrl_c_stops_them_all(pack: Path) -> None:
    s = Server(str(pack), "--workers", "2")
    try:
        wait_for("two workers", lambda: len(workers_of(s.proc.pid)) == 2)
        first = workers_of(s.proc.pid)
        victim = min(first)
        os.kill(victim, signal.SIGKILL)

        def replaced() -> bool:
            now = workers_of(
                s.proc.pid
            )  # one look: two live workers, the killed one not among them
            return len(now) == 2 and victim not in now

        wait_for("a new worker in place of the killed one", replaced)
        for _ in range(4):
            assert fresh_get(s, {"q": "centrifugal pump", "mode": "bm25"})["results"]
        now = workers_of(s.proc.pid)
    finally:
        code = s.stop()
    assert code == 130
    assert not any(alive(p) for p in now)  # Ctrl-C: every worker stopped with the server
    err = s.proc.stderr.read() if s.proc.stderr else ""
    assert "a worker stopped (killed by SIGKILL); starting another" in err
    assert "Traceback" not in err


def test_workers_do_not_outlive_a_killed_server(pack: Path) -> None:
    s = Server(str(pack), "--workers", "2")
    try:
        wait_for("two workers", lambda: len(workers_of(s.proc.pid)) == 2)
        kids = workers_of(s.proc.pid)
        s.proc.kill()  # SIGKILL: the server cannot stop them itself
        s.proc.wait(timeout=60)
        wait_for("the workers to stop", lambda: not any(alive(p) for p in kids))
    finally:
        s.client.close()


def test_one_worker_is_the_single_process_server(pack: Path) -> None:
    s = Server(str(pack), "--workers", "1")
    try:
        assert s.info["workers"] == 1
        assert workers_of(s.proc.pid) == set()
        assert fresh_get(s, {"q": "centrifugal pump", "mode": "bm25"})["results"]
    finally:
        assert s.stop() == 130


def test_served_connections_send_without_waiting_for_an_ack() -> None:
    """The socket serve binds makes asyncio turn Nagle's algorithm off on every connection it
    accepts (TCP_NODELAY): a socket made with protocol 0 did not get it, and each response,
    written as headers then body, waited ~40 ms for the client's delayed ACK."""
    import asyncio
    import socket

    from kbpack.cli.commands.serve import listening_socket

    sock = listening_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    seen: list[int] = []

    async def main() -> None:
        class Note(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                conn = transport.get_extra_info("socket")
                seen.append(conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                transport.close()

        server = await asyncio.get_running_loop().create_server(Note, sock=sock)
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        while not seen:
            await asyncio.sleep(0.01)
        writer.close()
        server.close()

    asyncio.run(asyncio.wait_for(main(), POLL_S))
    assert seen and seen[0] != 0
