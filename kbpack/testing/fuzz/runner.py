"""The fuzz loop: mutate, run in a forked child, judge, keep findings.

Commands run in a child forked per mutant from a warm fork server (``fork_server``: imports
paid once, nothing leaks from one mutant to the next); the parent waits on it with a timeout per
command. A child killed by a signal is a **crash**, one that does not answer in time is a
**hang** (its process group is killed); either way the loop goes on. Each execution draws from
its own ``random.Random(f"{seed}:{index}")``, so a finding is replayed from the two numbers it
prints.
"""

from __future__ import annotations

import dataclasses
import os
import random
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from kbpack.testing.fuzz.fork_server import Worker
from kbpack.testing.fuzz.pack_mutations import Mutant, Seed, mutate
from kbpack.testing.fuzz.pack_target import CommandRun, PackCommands, judge

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
    per_command: Counter[str] = field(default_factory=Counter)  # completed runs of each command
    interrupted: bool = False  # stopped before its count: the figures are what it reached

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
            "per_command": dict(self.per_command),
            "interrupted": self.interrupted,
            "examples": [asdict(f) for f in self.findings[:50]],
        }


def scratch_dir() -> Path:
    """tmpfs when there is one: a mutant is written and read back thousands of times."""
    shm = Path("/dev/shm")
    base = shm if shm.is_dir() and os.access(shm, os.W_OK) else None
    return Path(tempfile.mkdtemp(prefix="kbpack-fuzz-", dir=base))


FORGET_EVERY = 1000  # executions between two ``forget_memos``
PROGRESS_S = 30.0  # ``progress`` is called at least this often (and every 50 executions)

# -- the loop ----------------------------------------------------------------------------------


@dataclass
class PackSeed:
    seed: Seed
    commands: PackCommands
    baseline: list[CommandRun] = field(default_factory=list)
    expected: dict[str, str] = field(default_factory=dict)  # data_sha of each data command


class PackFuzzer:
    """Mutants of the seeds through every command; see the module docstring."""

    def __init__(
        self,
        seeds: Sequence[tuple[Path, PackCommands]],
        timeout_s: float = 60.0,
        keep_dir: Path | None = None,
        verify_every: int = 1,
    ) -> None:
        self.timeout_s = timeout_s
        # verify on every N-th execution only (index % N == 0); the reader commands run on
        # every one. verify costs as much CPU as the five reader commands together (a forked
        # child reading every element), so a 100,000-execution run of the reader on two cores
        # gives verify its own, smaller count (``per_command``), reported apart.
        self.verify_every = max(1, verify_every)
        self.keep_dir = keep_dir
        self.scratch = scratch_dir()
        self.seeds = [PackSeed(Seed.load(p), c) for p, c in seeds]
        self.worker = Worker(self.scratch / "cache")
        try:
            for s in self.seeds:
                path = self.scratch / f"seed-{s.seed.name}"
                path.write_bytes(s.seed.data)
                runs, kind, detail = self.worker.run(s.commands, path, timeout_s)
                if runs is None:
                    raise RuntimeError(f"the intact seed {s.seed.name} failed: {kind} {detail}")
                s.baseline = runs
                s.expected = {r.name: r.data_sha for r in runs if r.data_sha}
        except BaseException:  # an interrupt too: no server or scratch folder left behind
            self.close()
            raise

    def forget_memos(self) -> None:
        """Drop the per-file-state memos (first-open check, verified marker) of past mutants:
        one per mutant otherwise piles up in the scratch folder (models and hashes stay)."""
        from kbpack.pack.preflight import MEMO_FOLDER
        from kbpack.pack.verified import MARKERS

        for folder in (MEMO_FOLDER, MARKERS):
            shutil.rmtree(self.scratch / "cache" / folder, ignore_errors=True)

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
        return self.judged(s, lambda out: mutate(s.seed, rng, out), run_seed, index)

    def judged(
        self, s: PackSeed, write: Callable[[Path], Mutant], run_seed: int, index: int
    ) -> tuple[Mutant, list[Finding], list[CommandRun]]:
        """The mutant ``write`` makes of ``s``, through the commands, judged. ``run_seed`` and
        ``index`` name it in findings (and decide whether verify runs: ``verify_every``)."""
        target = self.scratch / "mutant.kbpack"
        # a new file (inode) each time: the first-open memo is keyed by path, size, mtime and
        # inode, and two mutants of one size can be written within one mtime tick
        target.unlink(missing_ok=True)
        mutant = write(target)

        def finding(kind: str, command: str, detail: str) -> Finding:
            return Finding(kind, run_seed, index, mutant.describe(), command, detail)

        commands = s.commands
        if index % self.verify_every:
            commands = dataclasses.replace(commands, without=frozenset({"verify"}))
        runs, kind, detail = self.worker.run(commands, target, self.timeout_s, s.expected)
        if runs is None:
            if self.worker.process.poll() is not None:  # the server itself went
                self.worker = Worker(self.scratch / "cache")
            command, _, why = detail.partition(": ")
            return mutant, [finding(kind, command, why)], []
        found = []
        baseline = {r.name: r for r in s.baseline}
        for run in runs:
            verdict = judge(run, baseline[run.name], mutant.claims_seed)
            if verdict:
                found.append(finding(verdict[0], run.name, verdict[1]))
        by_name = {r.name: r for r in runs}
        failed = [r.name for r in runs if r.name != "verify" and r.exit_code == 1]
        if failed and "verify" in by_name and by_name["verify"].exit_code == 0:
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
        indices = range(start, start + executions)
        return self._loop(
            ((i, partial(self.one, run_seed, i)) for i in indices),
            run_seed,
            progress,
            deadline_s,
        )

    def enumerated(self, name: str) -> list[tuple[PackSeed, Callable[[Path], Mutant]]]:
        """The items of the enumeration ``name`` for every seed, in the order they run: seed
        after seed, or taken from each seed in turn for a sampled one (its first N items then
        sample every seed)."""
        from itertools import chain, zip_longest

        from kbpack.testing.fuzz.pack_enumerations import ENUMERATIONS, SAMPLED

        per_seed = [[(s, w) for _, w in ENUMERATIONS[name](s.seed)] for s in self.seeds]
        if name in SAMPLED:
            return [x for x in chain.from_iterable(zip_longest(*per_seed)) if x is not None]
        return list(chain.from_iterable(per_seed))

    def run_enumerated(
        self,
        name: str,
        progress: Callable[[FuzzResult], None] | None = None,
        start: int = 0,
        limit: int | None = None,
    ) -> FuzzResult:
        """Every item of the enumeration ``name`` (``pack_enumerations.ENUMERATIONS``) of every
        seed (or ``limit`` of them from ``start``), each through every command (verify
        included); findings carry run seed 0 and the item's number in this order."""
        items = self.enumerated(name)
        stop = len(items) if limit is None else min(len(items), start + limit)
        every, self.verify_every = self.verify_every, 1
        try:
            return self._loop(
                ((i, partial(self.judged, *items[i], 0, i)) for i in range(start, stop)),
                0,
                progress,
                None,
                target=f"pack reader + verify, enumeration {name}",
            )
        finally:
            self.verify_every = every

    def _loop(
        self,
        executions: Iterable[
            tuple[int, Callable[[], tuple[Mutant, list[Finding], list[CommandRun]]]]
        ],
        run_seed: int,
        progress: Callable[[FuzzResult], None] | None,
        deadline_s: float | None,
        target: str = "pack reader + verify",
    ) -> FuzzResult:
        result = FuzzResult(target)
        t0 = reported = time.monotonic()
        for index, execute in executions:
            if deadline_s is not None and time.monotonic() - t0 > deadline_s:
                break
            try:
                _, found, runs = execute()
            except KeyboardInterrupt:  # stopped (Ctrl-C, or SIGTERM in bench/fuzz.py): report
                result.interrupted = True
                break
            result.executions += 1
            result.commands += len(runs)
            for r in runs:
                result.outcomes[f"exit {r.exit_code}"] += 1
                result.per_command[r.name] += 1
            if result.executions % FORGET_EVERY == 0:
                self.forget_memos()
            if found and self.keep_dir is not None:
                self.keep_dir.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(
                    self.scratch / "mutant.kbpack", self.keep_dir / f"{run_seed}-{index}.kbpack"
                )
            result.findings.extend(found)
            due = time.monotonic() - reported > PROGRESS_S or result.executions % 50 == 0
            if progress is not None and (due or found):
                reported = time.monotonic()
                result.seconds = time.monotonic() - t0
                progress(result)
        result.seconds = time.monotonic() - t0
        return result


def iter_lines(findings: Sequence[Finding], limit: int = 20) -> Iterator[str]:
    for f in findings[:limit]:
        yield f.line()
