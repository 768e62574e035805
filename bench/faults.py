"""The fault-injection matrix, larger than the suite's: I/O errors at every phase of every
command that writes a pack, and kills at seeded random moments of a build.

Part 1 (in-process, tests/fault_points.py ``inject``): ENOSPC and EIO at each phase (discover,
extract, spool, embed, hdf5, header, fsync, rename) of ``build``, ``update`` (after a source
changed), ``merge``, ``migrate`` (re-embedding) and ``build --split-size``. Outcomes:

* **clean** -- exit 1, one line, the old pack byte for byte, no temp file;
* **not reached** -- the command never does that phase's I/O (merge does not extract);
* anything else is a failure of the promise, named (``old changed``, ``temp left``, ...).

Part 2 (subprocesses, ``trace``): SIGKILL, SIGINT and SIGTERM sent after a seeded random delay
to a dense build replacing an old pack; the phase the signal hit is the last one the build
traced. Outcomes: **old** (the old pack, byte for byte) or **new** (a complete pack that
verifies), never **partial**; for SIGINT/SIGTERM exit 130 and one line; and after the next
build, 0 temp files.

    python bench/faults.py                    # 60 kills, seed 1
    python bench/faults.py --kills 150 --seed 7 --json
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from fault_points import FAULTS, PHASES, inject, temp_files  # noqa: E402
from tiny_gguf import build_tiny_gguf  # noqa: E402

DOCS = ROOT / "fixtures" / "docs"
COMMANDS = ("build", "update", "merge", "migrate", "split")

TRACED_BUILD = """
import sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from fault_points import trace
from kbpack.cli import main
log, out = Path(sys.argv[1]), Path(sys.argv[2])
sys.argv = ["kbpack", *sys.argv[3:]]
with trace(log, out):
    main()
"""


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else ""


def cli(*args: str) -> tuple[int, str]:
    """``kbpack ARGS`` in-process: (exit code, stderr)."""
    from click.testing import CliRunner

    from kbpack.cli import cli as group

    r = CliRunner().invoke(group, list(args))
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        return -1, f"crash: {type(r.exception).__name__}: {r.exception}"
    return r.exit_code, r.stderr


def verifies(path: Path) -> bool:
    from kbpack.verify.pipeline import verify_pack

    with contextlib.redirect_stdout(io.StringIO()):
        return bool(verify_pack(path).intact)


class World:
    """Sources (a copy of fixtures/docs), a tiny model, and an old pack of them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.src = root / "src"
        shutil.copytree(DOCS, self.src)
        self.model = build_tiny_gguf(root / "tiny.gguf", name="tiny", window=128)
        self.old = root / "old.kbpack"
        code, err = cli(
            "build", str(self.src), "-o", str(self.old), "--model", str(self.model), "-q"
        )
        assert code == 0, err
        self.other = root / "other.kbpack"  # a second pack for merge (another name per doc)
        other_src = root / "other-src"
        other_src.mkdir()
        (other_src / "extra.md").write_text("# Extra\n\nA document only the other pack holds.\n")
        code, err = cli(
            "build", str(other_src), "-o", str(self.other), "--model", str(self.model), "-q"
        )
        assert code == 0, err

    def args(self, command: str, out: Path) -> list[str]:
        src, model = str(self.src), str(self.model)
        return {
            "build": ["build", src, "-o", str(out), "--model", model, "-q"],
            "update": ["update", str(out), src, "--model", model, "-q"],
            "merge": ["merge", str(self.old), str(self.other), "-o", str(out), "-q"],
            "migrate": [
                "migrate",
                str(self.old),
                "-o",
                str(out),
                "--model",
                model,
                "--doc-prefix",
                "d: ",
                "-q",
            ],
            "split": ["build", src, "-o", str(out), "--model", model, "--split-size", "1M", "-q"],
        }[command]


def io_case(world: World, command: str, phase: str, fault: str) -> str:
    folder = Path(tempfile.mkdtemp(dir=world.root))
    out = folder / "p.kbpack"
    target = folder / "p-001.kbpack" if command == "split" else out
    shutil.copyfile(world.old, target)
    before = sha(target)
    if command == "update":  # a changed source, so that update extracts and embeds it
        (world.src / "changed.md").write_text(f"# Changed\n\nEdited for {phase} {fault}.\n")
    try:
        with inject(phase, FAULTS[fault], out):
            code, err = cli(*world.args(command, out))
    finally:
        (world.src / "changed.md").unlink(missing_ok=True)
    lines = err.strip().splitlines()
    left = temp_files(folder)
    shutil.rmtree(folder)
    if code == 0 and not left:
        return "not reached"
    if code == -1:
        return "crash"
    problems = []
    if code != 1:
        problems.append(f"exit {code}")
    if len(lines) != 1:
        problems.append(f"{len(lines)} lines")
    if sha(target) != before and target.exists():
        problems.append("old changed")
    if left:
        problems.append("temp left")
    return ", ".join(problems) or "clean"


def kill_case(world: World, sig: signal.Signals, delay: float) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(dir=world.root))
    out = folder / "p.kbpack"
    shutil.copyfile(world.old, out)
    before = sha(out)
    log = folder.parent / f"{folder.name}.trace"
    code = TRACED_BUILD.format(tests=str(ROOT / "tests"))
    args = [sys.executable, "-c", code, str(log), str(out), *world.args("build", out)]
    # a fresh name per build so that the new pack differs from the old one
    (world.src / "stamp.md").write_text(f"# Stamp\n\nBuild {folder.name}.\n")
    began = time.time()
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with contextlib.suppress(subprocess.TimeoutExpired):
        p.wait(timeout=delay)
    sent = p.poll() is None
    if sent:
        p.send_signal(sig)
    _stdout, stderr = p.communicate(timeout=600)
    wall = time.time() - began
    phases = log.read_text().split() if log.exists() else []
    log.unlink(missing_ok=True)
    hit = (phases[-1] if phases else "startup") if sent else "finished"
    state = "old" if sha(out) == before else "new" if verifies(out) else "partial"
    lines = stderr.strip().splitlines()
    one_line = sig == signal.SIGKILL or not sent or len(lines) == 1
    rc_ok = (
        p.returncode == -signal.SIGKILL
        if sig == signal.SIGKILL and sent
        else p.returncode in ((130,) if sent else (0, 130))
    )
    left_by_kill = len(temp_files(folder))
    rebuild, _err = cli(*world.args("build", out))
    left_after = temp_files(folder)
    shutil.rmtree(folder)
    return {
        "signal": sig.name,
        "delay": round(delay, 3),
        "wall": round(wall, 3),
        "phase": hit,
        "state": state,
        "rc": p.returncode,
        "rc_ok": rc_ok,
        "one_line": one_line,
        "temp_left_by_kill": left_by_kill,
        "temp_after_next_build": len(left_after),
        "next_build_ok": rebuild == 0,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=60, help="signals sent, split over the three")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-io", action="store_true", help="signals only (skip part 1)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["KBPACK_CACHE_DIR"] = str(Path(tmp) / "cache")
        world = World(Path(tmp))
        io_table: dict[str, Counter[str]] = defaultdict(Counter)
        for command in () if a.no_io else COMMANDS:
            for phase in PHASES:
                for fault in FAULTS:
                    io_table[f"{command} {phase}"][
                        f"{fault}: " + io_case(world, command, phase, fault)
                    ] += 1
        # a clean traced build's duration in a subprocess (imports included), to spread the
        # kills over the whole of it
        probe = kill_case(world, signal.SIGTERM, 600.0)  # never sent: the build finishes first
        assert probe["phase"] == "finished" and probe["next_build_ok"], probe
        span = probe["wall"]
        kills = []
        sigs = [signal.SIGKILL, signal.SIGINT, signal.SIGTERM]
        for i in range(a.kills):
            kills.append(kill_case(world, sigs[i % 3], rng.uniform(0.05, span)))
    elapsed = time.time() - t0
    kill_table: dict[str, Counter[str]] = defaultdict(Counter)
    for k in kills:
        kill_table[k["phase"]][f"{k['signal']} {k['state']}"] += 1
    failures = [
        k for k in kills
        if k["state"] == "partial" or not k["rc_ok"] or not k["one_line"]
        or k["temp_after_next_build"] or not k["next_build_ok"]
    ]  # fmt: skip
    summary = {
        "io_cases": sum(sum(c.values()) for c in io_table.values()),
        "io_not_clean": sum(
            n
            for c in io_table.values()
            for k, n in c.items()
            if not k.endswith(("clean", "not reached"))
        ),
        "kills": len(kills),
        "kill_failures": len(failures),
        "partial_packs": sum(k["state"] == "partial" for k in kills),
        "temp_files_after_next_build": sum(k["temp_after_next_build"] for k in kills),
        "temp_files_left_by_sigkill": sum(k["temp_left_by_kill"] for k in kills),
        "seconds": round(elapsed, 1),
        "load": os.getloadavg()[0],
    }
    if a.json:
        print(json.dumps({"summary": summary, "io": io_table, "kills": kills,
                          "failures": failures}, indent=1))  # fmt: skip
    else:
        print("I/O faults (command phase: fault: outcome = count)")
        for key, counts in io_table.items():
            print(f"  {key:22} " + "; ".join(f"{k} = {n}" for k, n in sorted(counts.items())))
        print("Signals (phase hit: signal outcome = count)")
        for phase, counts in sorted(kill_table.items()):
            print(f"  {phase:10} " + "; ".join(f"{k} = {n}" for k, n in sorted(counts.items())))
        for f in failures:
            print("FAILURE", json.dumps(f))
        print(json.dumps(summary))
    return 1 if summary["io_not_clean"] or failures else 0


if __name__ == "__main__":
    sys.exit(main())
