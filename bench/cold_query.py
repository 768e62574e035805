"""Cold query: the time of a whole ``kbpack query`` process, and pack open time vs pack size.

Cold here means a new process each time (imports, pack open, model load, first query); the OS
page cache stays warm (dropping it needs root and would disturb everyone sharing the machine).
Timed interleaved, ``--repeat`` times each, medians:

* ``kbpack query PACK TEXT --json`` (hybrid, the default) and ``--mode bm25`` (no model);
* the floors: ``python -c pass``, ``python -c "import kbpack.cli.main"``, and a bare script that
  does only what any llama.cpp + h5py tool must: import llama_cpp, load the same GGUF with the
  same context and threads, embed the query, read the float16 vectors with h5py and take the
  top 5 of a float32 matmul (and the same script ending with ``os._exit`` after a flush, as a
  finished ``kbpack query`` does: kbpack/cli/fast_exit.py). It sets ``OMP_WAIT_POLICY=PASSIVE`` as kbpack does: without it a
  single embed from the main thread spins for seconds on a busy machine (bench/embed_thread.py),
  and the "floor" took 3.9 s against kbpack's 2.0 s. Ratio kbpack / bare floor, of the wall
  time and of the CPU time (user + system, all threads): on a machine with more runnable
  processes than cores the wall time is mostly queueing, and the CPU ratio is the steadier one.

Pack open: ``PackReader(path)`` (header, size check, structure allowlist; no data read) in
this process and in a fresh one, for the fixtures pack and every synthetic pack in
out/bench/ (bench/synth.py, bench/scale.py), target < 0.5 s at 1M chunks.

    python bench/cold_query.py
    python bench/cold_query.py --repeat 3 --json
    python bench/cold_query.py --repeat 9 --baseline ../main   # before / after, same rounds
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from scale import open_times  # noqa: E402
from size import ensure  # noqa: E402

FIXTURES_PACK = ROOT / "out" / "fixtures.kbpack"
QUERY = "How do I add a table to a document?"

_BARE = """
import sys, os
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as kbpack sets it (bench/embed_thread.py)
import numpy as np, h5py, llama_cpp
from kbpack.model.embedder import default_model_path
path, query = sys.argv[1], sys.argv[2]
threads = len(os.sched_getaffinity(0))
llm = llama_cpp.Llama(model_path=str(default_model_path()), embedding=True, n_ctx=512,
    n_batch=512, n_ubatch=512, n_threads=threads, n_threads_batch=threads, flash_attn=True,
    verbose=False)
q = np.asarray(llm.embed(query, normalize=True), dtype=np.float32)
with h5py.File(path, "r", locking=False) as h:
    v = h["/vectors/data"][()].astype(np.float32)
print(np.argsort(-(v @ q))[:5])
"""
# The same floor ending as a finished `kbpack query` does (kbpack/cli/fast_exit.py): flushed, then
# os._exit, without Python's teardown of numpy, h5py and llama_cpp (~35 ms).
_BARE_FAST_EXIT = _BARE + "sys.stdout.flush()\nos._exit(0)\n"


def process_time(cmd: list[str], tree: Path = ROOT) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process and its threads: user + system), run with
    ``tree``'s kbpack first on the path (its folder, ahead of an editable install's)."""
    env = {**os.environ, "PYTHONPATH": str(tree)} if tree != ROOT else None
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    # cwd=tree too: ``python -m`` puts the working folder first on sys.path
    done = subprocess.run(cmd, cwd=tree, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 3):  # 3: the query was refused (still a complete answer)
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.strip()}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return wall, cpu


def compile_bytecode(root: Path = ROOT) -> None:
    """Write kbpack's ``.pyc`` files first, as ``pip install`` does: with PYTHONDONTWRITEBYTECODE
    set (as on this machine) an editable install never gets them, and every cold query then
    compiled ~19 kbpack modules from source -- a cost no installed kbpack pays."""
    import compileall

    compileall.compile_dir(str(root / "kbpack"), quiet=1)


def cold(pack: Path, repeat: int, baseline: Path | None = None) -> dict[str, Any]:
    compile_bytecode()
    kbpack = str(Path(sys.executable).with_name("kbpack"))
    commands = {
        "python_pass": [sys.executable, "-c", "pass"],
        "import_kbpack_cli": [sys.executable, "-c", "import kbpack.cli.main"],
        "bare_floor": [sys.executable, "-c", _BARE, str(pack), QUERY],
        "bare_floor_fast_exit": [sys.executable, "-c", _BARE_FAST_EXIT, str(pack), QUERY],
        "kbpack_query_hybrid": [kbpack, "query", str(pack), QUERY, "--json"],
        "kbpack_query_bm25": [kbpack, "query", str(pack), QUERY, "--mode", "bm25", "--json"],
    }
    trees: dict[str, Path] = {}
    if baseline is not None:  # another kbpack tree (a checkout of main), timed in the same rounds
        compile_bytecode(baseline)
        commands["kbpack_query_hybrid_baseline"] = [
            *[sys.executable, "-m", "kbpack"],
            *commands["kbpack_query_hybrid"][1:],
        ]
        trees["kbpack_query_hybrid_baseline"] = baseline.resolve()
    times: dict[str, list[float]] = {k: [] for k in commands}
    cpus: dict[str, list[float]] = {k: [] for k in commands}
    names = list(commands)
    load = os.getloadavg()[0]
    for rep in range(repeat):
        shift = rep % len(names)
        for name in names[shift:] + names[:shift]:
            wall, cpu = process_time(commands[name], trees.get(name, ROOT))
            times[name].append(wall)
            cpus[name].append(cpu)
    med = {k: round(statistics.median(v) * 1000, 1) for k, v in times.items()}
    cpu_med = {k: round(statistics.median(v) * 1000, 1) for k, v in cpus.items()}
    extra: dict[str, Any] = {}
    if baseline is not None:
        b = "kbpack_query_hybrid_baseline"
        extra["baseline"] = str(baseline)
        extra["ratio_baseline_over_bare"] = round(med[b] / med["bare_floor"], 3)
        extra["cpu_ratio_baseline_over_bare"] = round(cpu_med[b] / cpu_med["bare_floor"], 3)
    return extra | {
        "pack": str(pack.relative_to(ROOT)),
        "pack_bytes": pack.stat().st_size,
        "median_ms": med,
        "median_cpu_ms": cpu_med,
        "ratio_hybrid_over_bare": round(med["kbpack_query_hybrid"] / med["bare_floor"], 3),
        # kbpack's query skips the interpreter's teardown; so could any script: the ratio to
        # a floor that does the same says how much of the gain is that alone
        "ratio_hybrid_over_bare_fast_exit": round(
            med["kbpack_query_hybrid"] / med["bare_floor_fast_exit"], 3
        ),
        # on a machine busier than its cores, wall time is mostly waiting for a core: the
        # CPU the processes used is the steadier comparison (overlap gains nothing there)
        "cpu_ratio_hybrid_over_bare": round(
            cpu_med["kbpack_query_hybrid"] / cpu_med["bare_floor"], 3
        ),
        "threads": len(os.sched_getaffinity(0)),
        "load_average": [round(load, 1), round(os.getloadavg()[0], 1)],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--pack", type=Path, default=FIXTURES_PACK)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--baseline",
        type=Path,
        metavar="DIR",
        help="also time `kbpack query` from another checkout (e.g. main), interleaved",
    )
    args = ap.parse_args()
    pack = ensure(args.pack.resolve())
    report: dict[str, Any] = {"cold": cold(pack, args.repeat, args.baseline), "open": []}
    synth = sorted((ROOT / "out" / "bench").glob("synth-*.kbpack"), key=lambda p: p.stat().st_size)
    for path in [pack, *synth]:
        report["open"].append(
            {"pack": path.name, "bytes": path.stat().st_size} | open_times(path, args.repeat)
        )
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    c = report["cold"]
    print(f"cold process times, {c['pack']} ({c['pack_bytes'] / 1e6:.2f} MB), median ms:")
    print(f"  {'command':28} {'wall':>8} {'cpu':>8}")
    for k, v in c["median_ms"].items():
        print(f"  {k:28} {v:8.1f} {c['median_cpu_ms'][k]:8.1f}")
    print(f"  kbpack hybrid / bare floor = {c['ratio_hybrid_over_bare']} (wall), ", end="")
    print(f"{c['cpu_ratio_hybrid_over_bare']} (cpu); load average {c['load_average']}")
    print(
        f"  kbpack hybrid / bare floor with a fast exit = {c['ratio_hybrid_over_bare_fast_exit']}"
    )
    print("pack open, median ms:")
    print(f"  {'pack':28} {'MB':>9} {'in-process':>10} {'fresh process':>13}")
    for r in report["open"]:
        print(
            f"  {r['pack']:28} {r['bytes'] / 1e6:>9.1f} {r['open_ms']:>10.1f} "
            f"{r['open_fresh_process_ms']:>13.1f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
