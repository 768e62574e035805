"""Build prediction: ``build --dry-run``'s estimate and the progress line's ETA against the
build's real time, and the build's time against the previous kbpack's (same corpus, same run).

    python bench/build_eta.py                                  # fixtures/eval/corpus
    python bench/build_eta.py --corpus DIR --baseline /tmp/kbpack-0.3  # a tree to compare with

Steps, each in a fresh process with a fresh cache folder (the model is shared): the dry run
(its estimated seconds and pack size); the build, whose Progress records the ETA it would show
at every redraw; then, with ``--baseline``, the same build with the kbpack found there (its
PYTHONPATH). The ETA's error at 10%, 50% and 90% of the build is (elapsed + ETA shown) / the
real total - 1, at the last redraw before that point. Default model, ``--threads`` (1) llama.cpp
threads. A script: it asserts nothing.
"""

from __future__ import annotations

import argparse
import inspect
import io
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

_DRY = """
import json, sys, time
from pathlib import Path
t = time.perf_counter()
from kbpack.ops.build import BuildOptions, build
from kbpack.ops.estimate import DryRun
o = BuildOptions(sources=[Path(sys.argv[1])], out=Path(sys.argv[2]), threads=int(sys.argv[3]),
                 pieces=True, include=json.loads(sys.argv[4]))
r = build(o, dry=DryRun())
print(json.dumps({**r.dry_run, "size": r.size, "wall": time.perf_counter() - t}))
"""

_BUILD = """
import io, json, sys, time
from pathlib import Path
t0 = time.perf_counter()
from kbpack.ops.build import BuildOptions, build
from kbpack.runtime.progress import Progress
trace, events = [], []
class Tty(io.StringIO):
    def isatty(self): return True
class Recording(Progress):
    def update(self, *a, **k):
        super().update(*a, **k)
        if k.get("eta_s") is not None:
            trace.append((time.perf_counter() - t0, k["eta_s"]))
    # every call the ETA hears of, with its time, for replaying other estimators (--replay)
    def building(self, *a):
        events.append((time.perf_counter() - t0, "building", a))
        super().building(*a)
    def extracted(self, *a):
        events.append((time.perf_counter() - t0, "extracted", a))
        super().extracted(*a)
    def embedding(self, *a):
        events.append((time.perf_counter() - t0, "embedding", a))
        super().embedding(*a)
    def embedded(self, *a, **k):
        events.append((time.perf_counter() - t0, "embedded", (*a, k.get("reused", False))))
        super().embedded(*a, **k)
o = BuildOptions(sources=[Path(sys.argv[1])], out=Path(sys.argv[2]), threads=int(sys.argv[3]),
                 pieces=True, include=json.loads(sys.argv[5]))
p = Recording(stream=Tty()) if sys.argv[4] == "trace" else None
r = build(o, p)
print(json.dumps({"wall": time.perf_counter() - t0, "cpu": time.process_time(),
                  "seconds": r.seconds, "size": r.size,
                  "texts": getattr(r, "embeddings_total", 0), "tokens": r.tokens_embedded,
                  "trace": trace, "events": events,
                  "source_bytes_total": p.source_bytes_total if p else 0,
                  "source_bytes_by_kind": p.source_bytes_by_kind if p else {}}))
"""


def child(code: str, pythonpath: Path, *args: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "cache"
        cache.mkdir()
        models = Path(os.environ.get("KBPACK_CACHE_DIR", Path.home() / ".cache/kbpack")) / "models"
        (cache / "models").symlink_to(models)
        env = {**os.environ, "PYTHONPATH": str(pythonpath), "KBPACK_CACHE_DIR": str(cache)}
        out = subprocess.run(
            [sys.executable, "-c", code, *args[:1], str(Path(tmp) / "p.kbpack"), *args[1:]],
            check=True,
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp,
        ).stdout
    result: dict[str, Any] = json.loads(out)
    return result


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def progress_module(rev: str | None) -> types.ModuleType:
    """kbpack/runtime/progress.py of this tree (None) or of a git revision, to replay."""
    if rev is None:
        import kbpack.runtime.progress as mod

        return mod
    source = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{rev}:kbpack/runtime/progress.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    mod = types.ModuleType(f"progress_{rev}")
    exec(compile(source, f"{rev}:kbpack/runtime/progress.py", "exec"), mod.__dict__)
    return mod


def replay(run: dict[str, Any], mod: types.ModuleType) -> list[tuple[float, float]]:
    """The ETA ``mod``'s Progress would have shown at each recorded event of ``run`` (its
    clock replaced by the events' times): [(seconds since start, ETA)]."""
    now = [0.0]
    real_time = mod.__dict__["time"]
    mod.__dict__["time"] = types.SimpleNamespace(monotonic=lambda: now[0])
    try:
        p = mod.Progress(stream=_Tty(), tick_s=1e9)
        p.source_bytes_total = run["source_bytes_total"]
        p.source_bytes_by_kind = dict(run.get("source_bytes_by_kind", {}))
        out = []
        for t, name, args in run["events"]:
            now[0] = t
            if name == "embedded":
                p.embedded(*args[:2], reused=args[2])
            elif hasattr(p, name):  # an older Progress hears of less (no ``extracted``)
                method = getattr(p, name)
                method(*args[: len(inspect.signature(method).parameters)])
            eta = p._eta()
            if eta is not None:
                out.append((t, eta))
        p._stop_ticker()
    finally:
        mod.__dict__["time"] = real_time
    return out


def longest_still(run: dict[str, Any]) -> float:
    """The longest time between two counts the line shows (any progress event) from the
    first embedding call on: how long the line's numbers stood still (the ticker still
    redraws the clock and the ETA every second)."""
    times = [t for t, name, _ in run["events"] if name != "extracted"]
    first = next((t for t, name, _ in run["events"] if name == "embedding"), None)
    times = [t for t in times if first is not None and t >= first]
    return max((b - a for a, b in itertools.pairwise(times)), default=0.0)


def eta_errors(trace: list[tuple[float, float]], total: float) -> dict[str, float | None]:
    errors: dict[str, float | None] = {}
    for share in (0.1, 0.5, 0.9):
        before = [(t, eta) for t, eta in trace if t <= share * total]
        errors[f"{int(share * 100)}%"] = (
            round((before[-1][0] + before[-1][1]) / total - 1, 3) if before else None
        )
    return errors


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--corpus", type=Path, default=ROOT / "fixtures" / "eval" / "corpus")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--baseline", type=Path, help="a kbpack tree (PYTHONPATH) to time against")
    ap.add_argument("--include", nargs="*", default=[], help="build's --include globs")
    ap.add_argument("--events-out", type=Path, help="save the build's progress events (JSON)")
    ap.add_argument(
        "--replay",
        type=Path,
        nargs="+",
        help="no build: replay saved events through this tree's ETA (and --rev's)",
    )
    ap.add_argument("--rev", nargs="*", default=[], help="git revisions whose ETA to replay too")
    ap.add_argument("--windows", type=float, nargs="*", default=[], help="rate windows to try (s)")
    args = ap.parse_args()
    if args.replay:
        for path in args.replay:
            run = json.loads(path.read_text())
            for rev in [None, *args.rev]:
                mod = progress_module(rev)
                errors = eta_errors(replay(run, mod), run["wall"])
                print(f"{path.name} {rev or 'this tree'}: ETA error {json.dumps(errors)}")
                for window in args.windows:  # the rate's window, other than the module's
                    kept, mod.__dict__["RATE_WINDOW_S"] = mod.__dict__["RATE_WINDOW_S"], window
                    errors = eta_errors(replay(run, mod), run["wall"])
                    mod.__dict__["RATE_WINDOW_S"] = kept
                    print(f"  rate over {window:g}s: {json.dumps(errors)}")
            print(f"{path.name}: counts stood still at most {longest_still(run):.1f}s")
        return 0
    corpus = str(args.corpus.resolve())
    threads = str(args.threads)
    include = json.dumps(args.include)
    dry = child(_DRY, ROOT, corpus, threads, include)
    print(
        f"dry run: {dry['wall']:.1f}s, {dry['texts']} texts, {dry['tokens']} tokens, "
        f"sample {dry['sample']['tokens_per_s']:.0f} tokens/s -> estimated "
        f"{dry['estimated_seconds']:.0f}s, {dry['size']} bytes",
        flush=True,
    )
    t = time.perf_counter()
    ours = child(_BUILD, ROOT, corpus, threads, "trace", include)
    if args.events_out:
        args.events_out.write_text(json.dumps(ours))
    print(f"build: {ours['wall']:.1f}s (stages {json.dumps(ours['seconds'])})", flush=True)
    result = {
        "corpus": corpus,
        "threads": args.threads,
        "dry_run_estimate_s": dry["estimated_seconds"],
        "build_s": round(ours["wall"], 1),
        "dry_run_time_error": round(dry["estimated_seconds"] / ours["wall"] - 1, 3),
        "dry_run_size_error": round(dry["size"] / ours["size"] - 1, 4),
        # the embedding estimate in CPU time (sample CPU/token x tokens vs the build's CPU):
        # the model's error without the neighbours' load
        "dry_run_cpu_embed_error": round(
            dry["tokens"] * dry["sample"]["cpu_seconds"] / dry["sample"]["tokens"] / ours["cpu"]
            - 1,
            3,
        )
        if "cpu_seconds" in dry["sample"]
        else None,
        "eta_error": eta_errors([tuple(x) for x in ours["trace"]], ours["wall"]),
        "eta_error_replayed": eta_errors(replay(ours, progress_module(None)), ours["wall"]),
        "longest_still_s": round(longest_still(ours), 1),
        "dry_run_s": round(dry["wall"], 1),
        "load_average": os.getloadavg()[0],
    }
    if args.baseline:
        base = child(_BUILD, args.baseline.resolve(), corpus, threads, "plain", include)
        result["baseline_build_s"] = round(base["wall"], 1)
        result["build_vs_baseline"] = round(ours["wall"] / base["wall"], 3)
    result["bench_s"] = round(time.perf_counter() - t, 1)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
