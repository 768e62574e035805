"""What a CLI query pays to cite its results at scale: ``kbpack query --mode bm25 --json -k 10``
on a pack without ``/row_digests`` (spec §3.11; every name, title and text digest a citation
shows is checked by reading and hashing its whole column) and on the same content with them
(one row and one HDF5 chunk of digests per string shown), each in a new process, interleaved
(the order alternates per round), wall and CPU time (user + system of the child).

Both packs must hold the same content: ``python bench/synth.py pack --chunks 1000000 -o P`` with
kbpack before and after row digests (same seed), or any pack and its rebuild. A second code tree
(``--before-tree``, e.g. a checkout of main before the change) runs on the first pack, so the
figure is "kbpack before" vs "kbpack now", the peer being kbpack's own earlier release.

    python bench/citations.py OLD.kbpack NEW.kbpack [--before-tree DIR] [--rounds 3]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

QUERIES = [
    "how to configure the table style of a document",
    "foreign key constraint deferred",
    "checkpoint WAL mode passive",
    "combining short options",
]


def one(pack: str, query: str, tree: str) -> tuple[float, float, str]:
    env = dict(os.environ, PYTHONPATH=tree)
    argv = [sys.executable, "-m", "kbpack", "query", pack, query, "--mode", "bm25", "--json"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    out = subprocess.run([*argv, "-k", "10"], capture_output=True, env=env, check=False)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        sys.exit(f"citations: {pack}: {out.stderr.decode().strip()}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    results = json.loads(out.stdout)["results"]
    return wall, cpu, hashlib.sha256(json.dumps(results).encode()).hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old", help="pack without /row_digests")
    ap.add_argument("new", help="the same content with /row_digests")
    here = str(Path(__file__).resolve().parent.parent)
    ap.add_argument(
        "--before-tree", default=here, help="kbpack tree run on OLD (default: this one)"
    )
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    runs = {"before": (a.old, a.before_tree), "now": (a.new, here)}
    got: dict[str, list[tuple[float, float, str]]] = {k: [] for k in runs}
    for r in range(a.rounds):
        for q in QUERIES:
            for name in list(runs) if r % 2 == 0 else list(runs)[::-1]:
                got[name].append(one(*runs[name][:1], q, runs[name][1]))
    same = [x[2] for x in got["before"]] == [x[2] for x in got["now"]]
    med = {
        k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v))
        for k, v in got.items()
    }
    print(f"{'':8s} {'wall ms':>8s} {'CPU ms':>8s}   ({len(got['now'])} queries each)")
    for k, (w, c) in med.items():
        print(f"{k:8s} {w * 1000:8.0f} {c * 1000:8.0f}   {runs[k][0]}")
    print(
        f"now / before: wall {med['now'][0] / med['before'][0]:.2f}, CPU {med['now'][1] / med['before'][1]:.2f}; "
        f"same results: {'yes' if same else 'NO'}; load average {' '.join(os.getloadavg().__repr__()[1:-1].split(', ')[:3])}"
    )


if __name__ == "__main__":
    main()
