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
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

_DRY = """
import json, sys, time
from pathlib import Path
t = time.perf_counter()
from kbpack.ops.build import BuildOptions, build
from kbpack.ops.estimate import DryRun
o = BuildOptions(sources=[Path(sys.argv[1])], out=Path(sys.argv[2]), threads=int(sys.argv[3]),
                 pieces=True)
r = build(o, dry=DryRun())
print(json.dumps({**r.dry_run, "size": r.size, "wall": time.perf_counter() - t}))
"""

_BUILD = """
import io, json, sys, time
from pathlib import Path
t0 = time.perf_counter()
from kbpack.ops.build import BuildOptions, build
from kbpack.runtime.progress import Progress
trace = []
class Tty(io.StringIO):
    def isatty(self): return True
class Recording(Progress):
    def update(self, *a, **k):
        super().update(*a, **k)
        if k.get("eta_s") is not None:
            trace.append((time.perf_counter() - t0, k["eta_s"]))
o = BuildOptions(sources=[Path(sys.argv[1])], out=Path(sys.argv[2]), threads=int(sys.argv[3]),
                 pieces=True)
p = Recording(stream=Tty()) if sys.argv[4] == "trace" else None
r = build(o, p)
print(json.dumps({"wall": time.perf_counter() - t0, "cpu": time.process_time(),
                  "seconds": r.seconds, "size": r.size,
                  "texts": getattr(r, "embeddings_total", 0), "tokens": r.tokens_embedded, "trace": trace}))
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
    args = ap.parse_args()
    corpus = str(args.corpus.resolve())
    threads = str(args.threads)
    dry = child(_DRY, ROOT, corpus, threads)
    print(
        f"dry run: {dry['wall']:.1f}s, {dry['texts']} texts, {dry['tokens']} tokens, "
        f"sample {dry['sample']['tokens_per_s']:.0f} tokens/s -> estimated "
        f"{dry['estimated_seconds']:.0f}s, {dry['size']} bytes",
        flush=True,
    )
    t = time.perf_counter()
    ours = child(_BUILD, ROOT, corpus, threads, "trace")
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
        "dry_run_s": round(dry["wall"], 1),
        "load_average": os.getloadavg()[0],
    }
    if args.baseline:
        base = child(_BUILD, args.baseline.resolve(), corpus, threads, "plain")
        result["baseline_build_s"] = round(base["wall"], 1)
        result["build_vs_baseline"] = round(ours["wall"] / base["wall"], 3)
    result["bench_s"] = round(time.perf_counter() - t, 1)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
