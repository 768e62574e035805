"""Long fuzz runs of the pack reader + verify, and of the extractors (kbpack/testing/fuzz/).

Pack reader: mutants of small packs built here with a tiny random-weight model (dense with
sentence pieces, the model embedded, BM25 only) and of the golden pack, each run through
inspect, export (chunks, sections, documents), query (bm25, and hybrid with the pack's model)
and verify, in a worker process watched with a timeout. Prints executions, commands run,
crashes, hangs, internal errors, errors of more than one line, silent wrong reads and damage
that a command noticed but verify passed; each finding with the seed and index that replay it.

Extractors: mutants of PDF, DOCX, HTML, Markdown and text fixtures (bytes, and each format's
own structure: PDF numbers and delimiters, DOCX XML rezipped, markup) through the extraction
worker process a build uses, 200 documents per worker; each document judged (crash, hang,
bare Python exception, a Document that chunking or writing would choke on).

    nice -n 10 python bench/fuzz.py --target packs --executions 2000 --seed 1
    python bench/fuzz.py --target packs --minutes 30 --json      # as many as fit
    nice -n 19 python bench/fuzz.py --executions 100000 --seed 21 --checkpoint c21.json &
    python bench/fuzz.py --sum c*.json                           # totals of several runs
    nice -n 19 python bench/fuzz.py --executions 100000 --jobs 16 --checkpoint runs/  # 16 cores

--jobs N runs N processes (seeds SEED..SEED+N-1, the executions split between them), each with
its own checkpoint under the --checkpoint folder, and prints their sum: executions are
independent, so a machine with free cores runs them in parallel.
    python bench/fuzz.py --replay 1:22                           # one execution again
    python bench/fuzz.py --enumerate row-drops                   # every item, all commands
    python bench/fuzz.py --enumerate metadata-flips --executions 2000 --only-golden \
        --golden fixtures/golden/v2-earliest.kbpack              # a sample of HDF5 metadata flips
    nice -n 10 python bench/fuzz.py --target docs --executions 10000 --kinds pdf docx html
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # tiny_gguf: the tiny model the tests build

from kbpack.testing.fuzz.pack_target import PackCommands  # noqa: E402
from kbpack.testing.fuzz.runner import FuzzResult, PackFuzzer  # noqa: E402
from kbpack.testing.fuzz.seeds import build_seed_packs  # noqa: E402

GOLDEN = ROOT / "fixtures" / "golden" / "v2.kbpack"
GOLDEN_QUERY = "pypdf merge pages"


def pack_seeds(
    work: Path, golden: Path = GOLDEN, only: bool = False
) -> list[tuple[Path, PackCommands]]:
    """The small packs this kbpack builds (unless ``only``) and a golden pack."""
    given = [(golden, PackCommands(GOLDEN_QUERY))]
    if only:
        return given
    from tiny_gguf import build_tiny_gguf

    model = build_tiny_gguf(work / "tiny.gguf", name="tiny-a")
    return [*build_seed_packs(work, model), *given]


def show(result: FuzzResult, load: str) -> None:
    c = result.counts()
    print(
        f"{result.target}: {result.executions} executions ({result.commands} commands) in "
        f"{result.seconds:.0f} s, {load}"
    )
    print("  " + "  ".join(f"{k} {v}" for k, v in c.items()))
    print("  exit codes: " + ", ".join(f"{k}: {v}" for k, v in sorted(result.outcomes.items())))
    print("  runs per command: " + ", ".join(f"{k} {v}" for k, v in result.per_command.items()))
    for f in result.findings[:20]:
        print("  " + f.line())


def git_commit() -> str:
    """The checkout's commit (with "+changes" if it has uncommitted ones): a run's numbers
    belong to the code that ran."""
    import subprocess

    def git(*a: str) -> str:
        done = subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    sha = git("rev-parse", "--short", "HEAD") or "unknown"
    return sha + ("+changes" if git("status", "--porcelain", "--untracked-files=no") else "")


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def write_checkpoint(path: Path, result: FuzzResult, extra: dict[str, Any]) -> None:
    """The run so far as JSON, replaced atomically: a run cut off still reports."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(dict(result.as_json(), **extra), indent=2))
    os.replace(tmp, path)


def sum_checkpoints(paths: list[Path]) -> None:
    """Totals of several runs' checkpoints (or --json outputs), as one table row each + total."""
    total: dict[str, Any] = {"executions": 0, "commands": 0, "seconds": 0.0}
    findings: dict[str, int] = {}
    per_command: dict[str, int] = {}
    for p in paths:
        r = json.loads(p.read_text())
        print(
            f"{p.name}: seed {r.get('seed')}, {r['executions']} executions, {r['commands']} "
            f"commands, {r['seconds']:.0f} s, findings {r['findings']}, {r.get('load', '')}"
        )
        for k in ("executions", "commands", "seconds"):
            total[k] += r[k]
        for k, v in r["findings"].items():
            findings[k] = findings.get(k, 0) + v
        for k, v in r.get("per_command", {}).items():
            per_command[k] = per_command.get(k, 0) + v
        for f in r.get("examples", [])[:5]:
            print(
                f"  {f['kind']}: #{f['seed']}:{f['index']} {f['mutation']}: {f['command']}: "
                f"{f['detail']}"
            )
    print(
        f"total: {total['executions']} executions, {total['commands']} commands, "
        f"{total['seconds']:.0f} process-seconds; findings {findings}"
    )
    print("  runs per command: " + ", ".join(f"{k} {v}" for k, v in per_command.items()))


def run_jobs(args: argparse.Namespace) -> None:
    """``args.jobs`` copies of this script on seeds SEED.., then the sum of their checkpoints."""
    import subprocess

    folder = args.checkpoint or Path(tempfile.mkdtemp(prefix="kbpack-fuzz-jobs-"))
    folder.mkdir(parents=True, exist_ok=True)
    each, extra = divmod(args.executions, args.jobs)
    procs, files = [], []
    for j in range(args.jobs):
        seed = args.seed + j
        files.append(folder / f"seed-{seed}.json")
        argv = [sys.executable, __file__, "--target", "packs", "--seed", str(seed)]
        argv += ["--executions", str(each + (j < extra)), "--start", str(args.start)]
        argv += ["--timeout", str(args.timeout), "--checkpoint", str(files[-1]), "--json"]
        argv += ["--verify-every", str(args.verify_every)]
        if args.minutes:
            argv += ["--minutes", str(args.minutes)]
        if args.keep:
            argv += ["--keep", str(args.keep)]
        procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL))
    for proc in procs:
        proc.wait()
    sum_checkpoints([f for f in files if f.exists()])


def doc_seeds(work: Path) -> list[Path]:
    from kbpack.testing.fuzz.doc_target import DEFAULT_SEEDS
    from kbpack.testing.fuzz.seeds import DOCS

    small = []
    for name in ("manual.html", "pumps.md", "valves.txt"):
        (work / name).write_text(DOCS[name], encoding="utf-8")
        small.append(work / name)
    return [ROOT / p for p in DEFAULT_SEEDS] + small


def run_docs(args: argparse.Namespace, load: str) -> None:
    from kbpack.testing.fuzz.doc_target import DocFuzzer

    results = []
    with (
        tempfile.TemporaryDirectory(prefix="kbpack-fuzz-docs-") as tmp,
        DocFuzzer(doc_seeds(Path(tmp)), timeout_s=min(args.timeout, 120.0)) as fuzzer,
    ):
        for kind in args.kinds:
            if args.replay:
                seed, index = (int(x) for x in args.replay.split(":"))
                _, data, label = fuzzer.mutant(kind, seed, index)
                out = Path(f"fuzz-{kind}-{seed}-{index}")
                out.write_bytes(data)
                print(f"{kind}: {label} -> {out}")
                continue
            minutes = args.minutes / len(args.kinds) if args.minutes else None
            r = fuzzer.run(
                kind,
                args.executions,
                args.seed,
                args.start,
                deadline_s=minutes * 60 if minutes else None,
            )
            results.append(r)
            if not args.json:
                show(r, load)
    if args.json and results:
        print(json.dumps([dict(r.as_json(), seed=args.seed, load=load) for r in results], indent=2))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", choices=["packs", "docs"], default="packs")
    ap.add_argument("--kinds", nargs="+", default=["pdf", "docx", "html", "md", "txt"])
    ap.add_argument("--executions", type=int, default=None, help="1000 unless an enumeration")
    ap.add_argument("--minutes", type=float, default=None, help="stop after this long")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--start", type=int, default=0, help="first execution index (run in pieces)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per command = a hang")
    ap.add_argument(
        "--verify-every",
        type=int,
        default=1,
        help="run verify on every N-th execution only (the reader commands run on all)",
    )
    ap.add_argument(
        "--enumerate",
        default=None,
        choices=["row-drops", "attribute-deletions", "metadata-flips"],
        help="run the items of an enumeration (kbpack/fuzz/pack_enumerations.py) instead: all"
        " of them, or --executions of them from --start",
    )
    ap.add_argument(
        "--golden",
        type=Path,
        default=GOLDEN,
        help="the golden seed (e.g. fixtures/golden/v2-earliest.kbpack: HDF5 metadata unchecked)",
    )
    ap.add_argument("--only-golden", action="store_true", help="no built seeds, the golden only")
    ap.add_argument("--keep", type=Path, default=None, help="copy each finding's input here")
    ap.add_argument("--replay", default=None, help="SEED:INDEX of one execution to run again")
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--checkpoint",
        type=Path,
        default=None,
        help="write the counts to this file as it goes (with --jobs: a folder)",
    )
    ap.add_argument("--sum", type=Path, nargs="+", default=None, help="add up checkpoint files")
    ap.add_argument("--jobs", type=int, default=1, help="parallel runs (packs; seeds SEED..)")
    args = ap.parse_args()
    if args.executions is None and not args.enumerate:
        args.executions = 1000
    if args.sum:
        sum_checkpoints(args.sum)
        return
    if args.jobs > 1 and args.target == "packs" and not args.replay:
        run_jobs(args)
        return
    load = "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())
    signal.signal(signal.SIGTERM, _interrupt)  # kill PID stops a run as Ctrl-C does: it reports
    if args.target == "docs":
        run_docs(args, load)
        return
    with tempfile.TemporaryDirectory(prefix="kbpack-fuzz-seeds-") as tmp:
        seeds = pack_seeds(Path(tmp), args.golden, args.only_golden)
        with PackFuzzer(
            seeds, timeout_s=args.timeout, keep_dir=args.keep, verify_every=args.verify_every
        ) as fuzzer:
            if args.replay:
                seed, index = (int(x) for x in args.replay.split(":"))
                if args.enumerate:  # SEED is 0 for an enumeration's items
                    item_seed, write = fuzzer.enumerated(args.enumerate)[index]
                    mutant, found, runs = fuzzer.judged(item_seed, write, 0, index)
                else:
                    mutant, found, runs = fuzzer.one(seed, index)
                print(mutant.describe())
                for r in runs:
                    print(f"  {r.name}: exit {r.exit_code}  {r.stderr.strip()[:200]}")
                for f in found:
                    print("  " + f.line())
                return
            t0 = time.monotonic()
            commit = git_commit()

            def progress(r: FuzzResult) -> None:
                if args.checkpoint is not None:
                    now = "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())
                    extra = dict(
                        seed=args.seed,
                        start=args.start,
                        verify_every=args.verify_every,
                        commit=commit,
                        load=f"{load} .. {now}",
                    )
                    write_checkpoint(args.checkpoint, r, extra)
                if not args.json and sys.stderr.isatty():
                    print(f"\r{r.executions} executions, {r.counts()}", end="", file=sys.stderr)

            if args.enumerate:
                result = fuzzer.run_enumerated(
                    args.enumerate, progress=progress, start=args.start, limit=args.executions
                )
            else:
                result = fuzzer.run(
                    args.executions,
                    args.seed,
                    start=args.start,
                    progress=progress,
                    deadline_s=args.minutes * 60 if args.minutes else None,
                )
            if sys.stderr.isatty() and not args.json:
                print(file=sys.stderr)
    out: dict[str, Any] = result.as_json()
    out.update(seed=args.seed, start=args.start, load=load, wall_s=round(time.monotonic() - t0))
    out.update(verify_every=args.verify_every, commit=commit)
    if args.checkpoint is not None:
        write_checkpoint(args.checkpoint, result, out)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        show(result, load)


if __name__ == "__main__":
    main()
