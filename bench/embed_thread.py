"""Query embedding from the main thread vs a worker thread, with and without
OMP_WAIT_POLICY=PASSIVE: median ms per single-text embed and their ratios.

    python bench/embed_thread.py                 # 20 queries, quiet machine
    python bench/embed_thread.py --load 1        # the same with one busy python loop beside it

Each policy runs in its own subprocess (the OpenMP runtime reads the variable once, when
llama.cpp's library loads), and inside it main-thread and worker-thread embeds alternate so both
see the same neighbours. The default arm imports ``kbpack.model.embedder`` as the product does, so it
measures whatever policy the product sets; ``unset`` clears it and imports llama_cpp before
kbpack, so the product cannot set it. A script, not a test: it
prints figures and asserts nothing about time.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

QUERIES = [
    "how do I rotate the log files",
    "what does exit code 3 mean",
    "install without network access",
    "compare two configurations with a sign test",
    "why is the first query slow",
]


def child(n: int, model: str | None, early: bool) -> None:
    """Runs in the subprocess: alternate main/worker embeds, print JSON ms lists."""
    sys.path.insert(0, str(ROOT))
    if early:  # load llama.cpp (and OpenMP) before kbpack can set anything
        import llama_cpp  # noqa: F401
    from kbpack.model.embedder import Embedder

    embedder = Embedder(Path(model) if model else None)
    embedder.embed_query("warm up")
    times: dict[str, list[float]] = {"main": [], "worker": []}

    def one(where: str, text: str) -> None:
        start = time.perf_counter()
        embedder.embed_query(text)
        times[where].append((time.perf_counter() - start) * 1000)

    for i in range(n):
        text = QUERIES[i % len(QUERIES)] + f" {i}"
        # Alternate which goes first so neither side always follows the other.
        order = ("main", "worker") if i % 2 == 0 else ("worker", "main")
        for where in order:
            if where == "main":
                one("main", text)
            else:
                t = threading.Thread(target=one, args=("worker", text))
                t.start()
                t.join()
    # Batch embedding as a build does it (main thread, many texts per call): ms per text.
    docs = [" ".join(QUERIES) + f" {i}" for i in range(32)]
    for _ in range(3):
        start = time.perf_counter()
        embedder.embed_documents(docs)
        times.setdefault("batch", []).append((time.perf_counter() - start) * 1000 / len(docs))
    print(json.dumps(times))


def busy(stop: multiprocessing.synchronize.Event) -> None:  # type: ignore[name-defined]
    while not stop.is_set():
        pass


def run(policy: str, n: int, model: str | None) -> dict[str, list[float]]:
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)
    if policy == "PASSIVE":
        env["OMP_WAIT_POLICY"] = policy
    cmd = [sys.executable, __file__, "--child", "-n", str(n)]
    cmd += ["--model", model] if model else []
    cmd += ["--early"] if policy == "unset" else []
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=20, help="embeds per thread per policy")
    parser.add_argument("--model", help="GGUF (default: the cached default model)")
    parser.add_argument("--load", type=int, default=0, help="busy python loops beside it")
    parser.add_argument("--rounds", type=int, default=2, help="policy subprocesses alternated")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--early", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.n, args.model, args.early)
        return
    stop = multiprocessing.Event()
    loops = [multiprocessing.Process(target=busy, args=(stop,)) for _ in range(args.load)]
    for p in loops:
        p.start()
    results: dict[str, dict[str, list[float]]] = {}
    try:
        for _ in range(args.rounds):
            for policy in ("unset", "default", "PASSIVE"):
                got = run(policy, args.n, args.model)
                cell = results.setdefault(policy, {"main": [], "worker": [], "batch": []})
                for key in cell:
                    cell[key] += got[key]
    finally:
        stop.set()
        for p in loops:
            p.join()
    print(f"busy loops beside it: {args.load}; {args.n} x {args.rounds} embeds per cell")
    print(
        f"{'OMP_WAIT_POLICY':<20} {'main ms':>8} {'worker ms':>10} {'main/worker':>12} "
        f"{'batch ms/text':>14} {'batch vs unset':>15}"
    )
    unset_batch = statistics.median(results["unset"]["batch"])
    for policy, cell in results.items():
        m, w = statistics.median(cell["main"]), statistics.median(cell["worker"])
        b = statistics.median(cell["batch"])
        label = {"unset": "unset", "default": "as kbpack sets it", "PASSIVE": "PASSIVE"}[policy]
        print(f"{label:<20} {m:8.1f} {w:10.1f} {m / w:11.2f}x {b:14.1f} {b / unset_batch:14.2f}x")


if __name__ == "__main__":
    main()
