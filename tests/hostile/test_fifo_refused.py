"""Every command that reads a pack refuses a FIFO (or any non-regular file) with one line and
exit 2, instead of blocking on it forever. Run as real processes with a time limit: a command
that blocked would fail the test instead of hanging the suite."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

KBPACK = [sys.executable, "-m", "kbpack"]

COMMANDS = {
    "inspect": ["inspect", "{p}"],
    "query": ["query", "{p}", "valve"],
    "export": ["export", "{p}"],
    "verify": ["verify", "{p}"],
    "diff": ["diff", "{p}", "{p}"],
    "migrate": ["migrate", "{p}", "-o", "{d}/out.kbpack"],
    "update": ["update", "{p}", "{d}"],
    "sign": ["sign", "{p}", "--key", "{d}/k.key"],
    "eval": ["eval", "{p}", "{d}/q.jsonl"],
    "calibrate": ["calibrate", "{p}", "--questions", "{d}/q.jsonl", "--ood", "{d}/q.jsonl"],
    "serve": ["serve", "{p}", "--port", "0"],
}


@pytest.fixture(scope="module")
def fifo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("fifo")
    os.mkfifo(d / "pack.kbpack")
    (d / "q.jsonl").write_text('{"id": "q1", "query": "valve", "needle": "Valve V-3 opens."}\n')
    subprocess.run([*KBPACK, "keygen", "-o", str(d / "k")], check=True, capture_output=True)
    return d / "pack.kbpack"


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_fifo_is_refused_by_every_command(fifo: Path, command: str) -> None:
    args = [a.format(p=fifo, d=fifo.parent) for a in COMMANDS[command]]
    r = subprocess.run([*KBPACK, *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert lines == [
        f"kbpack: error: {fifo}: is a named pipe (FIFO), not a regular file, so not a pack; "
        "give a .kbpack file"
    ], r.stderr
