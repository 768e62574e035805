"""The fault-injection matrix, larger than the suite's: I/O errors at every phase of every
command that writes a pack, and kills at seeded random moments of a build.

Part 1 (in-process, tests/fault_points.py ``inject``): ENOSPC and EIO at each phase (discover,
extract, spool, embed, hdf5, header, fsync, rename) of ``build``, ``update`` (after a source
changed), ``merge``, ``migrate`` (re-embedding) and ``build --split-size``. Outcomes:

* **clean** -- exit 1, one line, the old pack byte for byte, no temp file;
* **not reached** -- the command never does that phase's I/O (merge does not extract);
* anything else is a failure of the promise, named (``old changed``, ``temp left``, ...).

Part 2 (subprocesses, ``trace``): SIGKILL, SIGINT and SIGTERM aimed at every phase of a dense
build replacing an old pack (on 4 small documents): each kill takes a phase in turn
(``KILL_PHASES``: interpreter start-up, CLI imports, discover ... rename, published), a seeded
occurrence of it and a seeded delay within that occurrence's length in a clean traced build,
and is sent from inside the build (from here for start-up and imports); the phase hit is the
last one traced before the signal. Outcomes: **old** (the old pack, byte for byte) or **new**
(a complete pack that verifies), never **partial**; for SIGINT/SIGTERM exit 130 and one line
that says the new file is complete exactly when it is; no live child of the build left; and
after the next build, 0 temp files.

    python bench/faults.py                    # 60 kills, seed 1
    python bench/faults.py --no-io --kills 150 --seed 16 --json
    python bench/faults.py --no-io --kills 36 --phases imports hdf5 header fsync rename published
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

from fault_points import (  # noqa: E402
    FAULTS,
    KILL_PHASES,
    PHASES,
    inject,
    read_trace,
    temp_files,
)
from tiny_gguf import build_tiny_gguf  # noqa: E402

DOCS = ROOT / "fixtures" / "docs"
# the kills' corpus: one document of each kind but PDF (62 KB), so that a build takes seconds
# and 150 kills fit in a working session; every phase is still met, extract and embed 4 times
KILL_DOCS = (
    "pypdf/README.md",
    "python-docx/HISTORY.rst",
    "sqlite/sqlite-null-handling.docx",
    "sqlite/datatype3.html",
)
COMMANDS = ("build", "update", "merge", "migrate", "split")

TRACED_BUILD = """
import os, sys, time
from kbpack.cli.entry import answer_signals_early  # what the kbpack command does first
answer_signals_early()
with open(sys.argv[1], "a") as f:
    f.write(f"imports {{time.time():.6f}} {{os.getpid()}}\\n")
from pathlib import Path
sys.path.insert(0, {tests!r})
from fault_points import trace
from kbpack.cli.main import main
log, out, phase, nth, delay, sig = Path(sys.argv[1]), Path(sys.argv[2]), *sys.argv[3:7]
kill = (phase, int(nth), float(delay), int(sig)) if phase != "-" else None
sys.argv = ["kbpack", *sys.argv[7:]]
with trace(log, out, kill):
    main()
"""


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else ""


def cli(*args: str) -> tuple[int, str]:
    """``kbpack ARGS`` in-process: (exit code, stderr)."""
    from click.testing import CliRunner

    from kbpack.cli.main import cli as group

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

    def __init__(self, root: Path, docs: tuple[str, ...] = ()) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.src = root / "src"
        if docs:
            for name in docs:
                (self.src / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(DOCS / name, self.src / name)
        else:
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


def phase_windows(
    rows: list[tuple[str, float, int]], began: float, ended: float
) -> dict[str, list[float]]:
    """How long each occurrence of each phase lasted in a clean traced build: from its mark to
    the next mark (the end of the process after the last); ``startup`` is from the spawn to the
    first mark. Extract, spool and embed recur once per document."""
    rows = sorted(rows, key=lambda r: r[1])
    windows: dict[str, list[float]] = {"startup": [(rows[0][1] if rows else ended) - began]}
    for i, (phase, at, _pid) in enumerate(rows):
        until = rows[i + 1][1] if i + 1 < len(rows) else ended
        windows.setdefault(phase, []).append(until - at)
    return windows


def _living(group: int) -> dict[int, str]:
    """Processes of process group ``group`` that are not zombies: pid -> command (its kind)."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = Path(f"/proc/{entry}/stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[2]) == group and fields[0] != "Z":
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
                kind = "extract worker" if b"extract.worker" in b" ".join(cmd) else "fork"
                found[int(entry)] = kind
    return found


def kill_case(
    world: World,
    sig: signal.Signals,
    phase: str,
    delay: float,
    nth: int = 1,
    command: str = "build",
) -> dict[str, Any]:
    """A traced ``command`` replacing an old pack (or set), sent ``sig`` ``delay`` seconds
    after it traced ``phase`` for the ``nth`` time (``startup``: after the spawn; ``-``:
    never)."""
    folder = Path(tempfile.mkdtemp(dir=world.root))
    out = folder / "p.kbpack"
    targets = [out] if command == "build" else [folder / f"p-{i:03d}.kbpack" for i in (1, 2)]
    for t in targets:
        shutil.copyfile(world.old, t)
    before = [sha(t) for t in targets]
    log = folder.parent / f"{folder.name}.trace"
    code = TRACED_BUILD.format(tests=str(ROOT / "tests"))
    inside = phase not in ("startup", "imports", "-")
    kill = [phase, str(nth), str(delay), str(int(sig))] if inside else ["-", "0", "0", "0"]
    args = [sys.executable, "-c", code, str(log), str(out), *kill, *world.args(command, out)]
    # a fresh name per build so that the new pack differs from the old one
    (world.src / "stamp.md").write_text(f"# Stamp\n\nBuild {folder.name}.\n")
    began = time.time()
    # its own process group: what outlives it (an HDF5 child, an extraction worker) is found
    p = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    hit = None
    if phase in ("startup", "imports"):  # before the trace exists: sent from here
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=delay)
        if p.poll() is None:
            p.send_signal(sig)
            marks = read_trace(log)
            hit = marks[-1][0] if marks else "startup"
    _stdout, stderr = p.communicate(timeout=900)
    ended = time.time()
    rows = read_trace(log)
    log.unlink(missing_ok=True)
    if inside:
        names = [r[0] for r in rows]
        if "signal" in names:
            i = names.index("signal")
            hit = names[i - 1] if i else "startup"
    sent = hit is not None
    # children that outlived the build, not yet dead (an HDF5 child would go on writing a temp
    # file); zombies waiting for init to reap them are dead
    survivors = _living(p.pid)
    if survivors:
        time.sleep(1.0)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)  # ours: started in its own group above
    now = [sha(t) for t in targets]
    if now == before:
        state = "old"
    elif all(t.exists() for t in targets) and all(verifies(t) for t in targets):
        state = "new"
    else:
        state = "partial"
    lines = stderr.strip().splitlines()
    if hit == "startup":
        # before any kbpack code runs (the interpreter starting): Python's defaults (SIGTERM:
        # rc -15, no message; SIGINT: a KeyboardInterrupt traceback); nothing is open for
        # writing, so only the pack and the temp files are judged
        rc_ok = message_ok = True
    elif sig == signal.SIGKILL or not sent:
        message_ok = (not sent and p.returncode == 0) or sig == signal.SIGKILL
        rc_ok = p.returncode == (-signal.SIGKILL if sent else 0)
    else:
        # one line that tells the truth: a complete new file is said to be complete
        rc_ok = p.returncode == 130
        message_ok = len(lines) == 1 and (("after writing" in lines[0]) == (state == "new"))
    left_by_kill = len(temp_files(folder))
    # the next build must remove what the kill left (one that left nothing is not rebuilt)
    rebuild, _err = cli(*world.args(command, out)) if left_by_kill else (0, "")
    left_after = temp_files(folder)
    shutil.rmtree(folder)
    return {
        "command": command,
        "signal": sig.name,
        "target": phase,
        "nth": nth,
        "delay": round(delay, 4),
        "wall": round(ended - began, 3),
        "phase": hit or "finished",
        "state": state,
        "rc": p.returncode,
        "rc_ok": rc_ok,
        "message_ok": message_ok,
        "message": lines[-1][:160] if lines else "",
        "lines": len(lines),
        "orphans": len(survivors),
        "orphan_commands": sorted(set(survivors.values())),
        "temp_left_by_kill": left_by_kill,
        "temp_after_next_build": len(left_after),
        "next_build_ok": rebuild == 0,
        "_rows": rows,
        "_began": began,
        "_ended": ended,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=60, help="signals sent, split over the three")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-io", action="store_true", help="signals only (skip part 1)")
    ap.add_argument("--phases", nargs="+", choices=KILL_PHASES, help="kill only in these")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["KBPACK_CACHE_DIR"] = str(Path(tmp) / "cache")
        world = World(Path(tmp) / "io") if not a.no_io else None
        io_table: dict[str, Counter[str]] = defaultdict(Counter)
        for command in () if a.no_io else COMMANDS:
            for phase in PHASES:
                for fault in FAULTS:
                    io_table[f"{command} {phase}"][
                        f"{fault}: " + io_case(world, command, phase, fault)  # type: ignore[arg-type]
                    ] += 1
        # a clean traced build, to know how long each phase lasts; each kill then picks a
        # phase (every phase and signal in turn) and a seeded delay within that phase
        world = World(Path(tmp) / "kills", KILL_DOCS)
        probe = kill_case(world, signal.SIGTERM, "-", 0.0)
        assert probe["phase"] == "finished" and probe["next_build_ok"], probe
        windows = phase_windows(probe["_rows"], probe["_began"], probe["_ended"])
        print("phase windows (s):", json.dumps({k: [round(x, 4) for x in v]
              for k, v in windows.items()}), file=sys.stderr, flush=True)  # fmt: skip
        kills = []
        sigs = [signal.SIGKILL, signal.SIGINT, signal.SIGTERM]
        phases = [p for p in a.phases or KILL_PHASES if p in windows]
        for i in range(a.kills):
            sig, phase = sigs[i % 3], phases[(i // 3) % len(phases)]
            nth = rng.randrange(len(windows[phase])) + 1
            # a phase shorter than a timer thread's start (header, rename: well under 5 ms) is
            # hit at its start, from inside the traced call
            span = windows[phase][nth - 1]
            delay = rng.uniform(0.0, span) if span > 0.005 else 0.0
            if phase == "imports":  # sent from outside, counted from the spawn
                delay += windows["startup"][0]
            for _ in range(4):  # a child's timer dies with the child: try a shorter delay
                k = kill_case(world, sig, phase, delay, nth)
                if k["phase"] != "finished":
                    break
                delay /= 4
            for key in ("_rows", "_began", "_ended"):
                k.pop(key)
            kills.append(k)
            print(json.dumps(k), file=sys.stderr, flush=True)
    elapsed = time.time() - t0
    kill_table: dict[str, Counter[str]] = defaultdict(Counter)
    for k in kills:
        kill_table[k["phase"]][f"{k['signal']} {k['state']}"] += 1
    failures = [
        k for k in kills
        if k["state"] == "partial" or not k["rc_ok"] or not k["message_ok"]
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
        "orphan_children": sum(k["orphans"] for k in kills),
        "not_sent": sum(k["phase"] == "finished" for k in kills),
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
