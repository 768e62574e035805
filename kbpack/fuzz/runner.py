"""The fuzz loop: mutate, run in a worker process, judge, keep findings.

Commands run in a long-lived worker process (imports paid once); the parent
waits on it with a timeout per command. A worker killed by a signal is a **crash**, one that
does not answer in time is a **hang**; either way it is replaced and the loop goes on. Each
execution draws from its own ``random.Random(f"{seed}:{index}")``, so a finding is replayed
from the two numbers it prints.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import kbpack
from kbpack.fuzz.pack_mutations import Mutant, Seed, mutate
from kbpack.fuzz.pack_target import CommandRun, PackCommands, judge, run_all

FINDING_KINDS = (
    "crash",
    "hang",
    "internal-error",
    "not-one-line",
    "silent-wrong-data",
    "verify-missed",
)


@dataclass(frozen=True)
class Finding:
    kind: str
    seed: int  # the run's seed and the execution's index replay it: replay(seed, index)
    index: int
    mutation: str
    command: str
    detail: str

    def line(self) -> str:
        return (
            f"{self.kind}: #{self.seed}:{self.index} {self.mutation}: {self.command}: {self.detail}"
        )


@dataclass
class FuzzResult:
    target: str
    executions: int = 0
    commands: int = 0
    seconds: float = 0.0
    findings: list[Finding] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)  # per command: ok, error exit, ...

    def counts(self) -> dict[str, int]:
        by = Counter(f.kind for f in self.findings)
        return {k: by.get(k, 0) for k in FINDING_KINDS}

    def as_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "executions": self.executions,
            "commands": self.commands,
            "seconds": round(self.seconds, 1),
            "findings": self.counts(),
            "outcomes": dict(self.outcomes),
            "examples": [asdict(f) for f in self.findings[:50]],
        }


def scratch_dir() -> Path:
    """tmpfs when there is one: a mutant is written and read back thousands of times."""
    shm = Path("/dev/shm")
    base = shm if shm.is_dir() and os.access(shm, os.W_OK) else None
    return Path(tempfile.mkdtemp(prefix="kbpack-fuzz-", dir=base))


# -- the worker --------------------------------------------------------------------------------


def serve(fd: int) -> None:
    """The worker's loop: receive (commands, pack path), report each command as it starts,
    send back every ``CommandRun``; None stops it."""
    conn = Connection(fd)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return
        commands, pack = job
        runs = run_all(commands, Path(pack), lambda name: conn.send(("start", name)))
        conn.send(("done", runs))


class Worker:
    """A worker process running pack commands; replaced after a crash or a hang.

    A fresh interpreter (as the extraction worker is), not a fork: the caller (a test session)
    may have run llama.cpp, whose OpenMP thread pool does not survive a fork, and
    multiprocessing's spawn would re-run the caller's ``__main__``.
    """

    def __init__(self, cache_dir: Path) -> None:
        parent, child = socket.socketpair()
        self.conn = Connection(os.dup(parent.fileno()))
        parent.close()
        env = dict(os.environ)
        root = str(Path(kbpack.__file__).resolve().parents[1])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        env["KBPACK_CACHE_DIR"] = str(cache_dir)  # the verified-pack memo of this run only
        env.pop("KBPACK_DEBUG", None)
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import sys; from kbpack.fuzz.runner import serve; serve(int(sys.argv[1]))",
                str(child.fileno()),
            ],
            pass_fds=(child.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        child.close()

    def run(
        self, commands: PackCommands, pack: Path, timeout_s: float
    ) -> tuple[list[CommandRun] | None, str, str]:
        """(runs, "", "") or (None, "crash" | "hang", the command that was running + detail)."""
        self.conn.send((commands, str(pack)))
        current = "(start)"
        while True:
            if not self.conn.poll(timeout_s):
                self.kill()
                return None, "hang", f"{current}: no answer within {timeout_s:g} s"
            try:
                kind, payload = self.conn.recv()
            except (EOFError, OSError):
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.process.wait(5)
                code = self.process.returncode
                self.kill()
                if code is not None and code < 0:
                    return None, "crash", f"{current}: killed by {signal.Signals(-code).name}"
                return None, "crash", f"{current}: worker exited with status {code}"
            if kind == "start":
                current = payload
            else:
                return payload, "", ""

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.conn.close()

    def stop(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.conn.send(None)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(5)
        self.kill()


# -- the loop ----------------------------------------------------------------------------------


@dataclass
class PackSeed:
    seed: Seed
    commands: PackCommands
    baseline: list[CommandRun] = field(default_factory=list)


class PackFuzzer:
    """Mutants of the seeds through every command; see the module docstring."""

    def __init__(
        self,
        seeds: Sequence[tuple[Path, PackCommands]],
        timeout_s: float = 60.0,
        keep_dir: Path | None = None,
    ) -> None:
        self.timeout_s = timeout_s
        self.keep_dir = keep_dir
        self.scratch = scratch_dir()
        self.seeds = [PackSeed(Seed.load(p), c) for p, c in seeds]
        self.worker = Worker(self.scratch / "cache")
        for s in self.seeds:
            path = self.scratch / f"seed-{s.seed.name}"
            path.write_bytes(s.seed.data)
            runs, kind, detail = self.worker.run(s.commands, path, timeout_s)
            if runs is None:
                raise RuntimeError(f"the intact seed {s.seed.name} failed: {kind} {detail}")
            s.baseline = runs

    def close(self) -> None:
        self.worker.stop()
        shutil.rmtree(self.scratch, ignore_errors=True)

    def __enter__(self) -> PackFuzzer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def one(self, run_seed: int, index: int) -> tuple[Mutant, list[Finding], list[CommandRun]]:
        """Execution ``index`` of the run seeded ``run_seed``."""
        rng = random.Random(f"{run_seed}:{index}")
        s = rng.choice(self.seeds)
        target = self.scratch / "mutant.kbpack"
        mutant = mutate(s.seed, rng, target)

        def finding(kind: str, command: str, detail: str) -> Finding:
            return Finding(kind, run_seed, index, mutant.describe(), command, detail)

        runs, kind, detail = self.worker.run(s.commands, target, self.timeout_s)
        if runs is None:
            self.worker = Worker(self.scratch / "cache")
            command, _, why = detail.partition(": ")
            return mutant, [finding(kind, command, why)], []
        found = []
        for run, base in zip(runs, s.baseline, strict=True):
            verdict = judge(run, base, mutant.claims_seed)
            if verdict:
                found.append(finding(verdict[0], run.name, verdict[1]))
        by_name = {r.name: r for r in runs}
        failed = [r.name for r in runs if r.name != "verify" and r.exit_code == 1]
        if failed and by_name["verify"].exit_code == 0:
            first = by_name[failed[0]].stderr.strip().splitlines()
            found.append(
                finding("verify-missed", "verify", f"{failed[0]} said: {(first or [''])[0][:200]}")
            )
        return mutant, found, runs

    def run(
        self,
        executions: int,
        run_seed: int = 1,
        start: int = 0,
        progress: Callable[[FuzzResult], None] | None = None,
        deadline_s: float | None = None,
    ) -> FuzzResult:
        result = FuzzResult("pack reader + verify")
        t0 = time.monotonic()
        for index in range(start, start + executions):
            if deadline_s is not None and time.monotonic() - t0 > deadline_s:
                break
            _, found, runs = self.one(run_seed, index)
            result.executions += 1
            result.commands += len(runs)
            for r in runs:
                result.outcomes[f"exit {r.exit_code}"] += 1
            if found and self.keep_dir is not None:
                self.keep_dir.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(
                    self.scratch / "mutant.kbpack", self.keep_dir / f"{run_seed}-{index}.kbpack"
                )
            result.findings.extend(found)
            if progress is not None and result.executions % 50 == 0:
                result.seconds = time.monotonic() - t0
                progress(result)
        result.seconds = time.monotonic() - t0
        return result


def iter_lines(findings: Sequence[Finding], limit: int = 20) -> Iterator[str]:
    for f in findings[:limit]:
        yield f.line()
