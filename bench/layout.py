"""HDF5 metadata layout: the same pack in kbpack 0.2.0's layout and in the checksummed one.

kbpack wrote HDF5 with ``libver=('earliest', 'v110')`` until 2026-12-02 (no checksum on any
HDF5 structure) and writes ``('v110', 'v110')`` since (spec §1: superblock 3, version-2 object
headers, extensible-array chunk indexes, each checksummed). Give an old pack and the same pack
rewritten by this kbpack (``kbpack migrate OLD -o NEW``: the same content, the new layout);
each measure runs on both, interleaved, in one process, and the line shows both and the ratio:

* ``bytes``: file size;
* ``open``: ``PackReader`` open + close, the first-open check remembered (what every command
  pays);
* ``first open``: a fresh interpreter opening the pack with an empty cache (the sandboxed
  first-open parse included), median;
* ``query bm25``: a fresh reader + one BM25 query, the evaluation questions, median (the path a
  CLI query takes after its imports);
* ``verify``: ``verify_pack`` in-process, every step.

    python bench/layout.py OLD.kbpack NEW.kbpack [--queries 40] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from dense import questions  # noqa: E402

from kbpack.pack.read import PackReader  # noqa: E402
from kbpack.search.searcher import Searcher  # noqa: E402
from kbpack.verify.pipeline import verify_pack  # noqa: E402

OPEN = "from kbpack.pack.read import PackReader; import sys; PackReader(sys.argv[1]).close()"


def first_open(path: Path) -> float:
    with tempfile.TemporaryDirectory(prefix="kbpack-layout-") as cache:
        env = {**os.environ, "KBPACK_CACHE_DIR": cache, "PYTHONPATH": str(ROOT)}
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", OPEN, str(path)], check=True, env=env)
        return time.perf_counter() - t


def query(path: Path, q: str) -> float:
    t = time.perf_counter()
    with PackReader(path) as r:
        Searcher(r, None)._bm25(q, None)
    return time.perf_counter() - t


def opened(path: Path) -> float:
    t = time.perf_counter()
    PackReader(path).close()
    return time.perf_counter() - t


def verified(path: Path) -> float:
    t = time.perf_counter()
    report = verify_pack(path)
    took = time.perf_counter() - t
    if not report.intact:
        raise SystemExit(f"{path}: verify did not find it intact")
    return took


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old", type=Path, help="a pack kbpack wrote with libver 'earliest'")
    ap.add_argument("new", type=Path, help="the same pack in the checksummed layout")
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    packs = {"old": args.old, "new": args.new}
    for name, p in packs.items():
        with PackReader(p) as r:
            if r.metadata_checksummed != (name == "new"):
                raise SystemExit(f"{p}: not the {name} layout (kbpack inspect says which)")
    texts = questions(args.queries)
    print(f"{args.old.name} vs {args.new.name}; load average {os.getloadavg()[0]:.1f}")
    print(f"{'measure':<24}{'earliest':>12}{'v110':>12}{'v110/earliest':>15}")
    print(
        f"{'bytes':<24}{args.old.stat().st_size:>12,}{args.new.stat().st_size:>12,}"
        f"{args.new.stat().st_size / args.old.stat().st_size:>15.4f}"
    )
    measures: dict[str, tuple[Callable[[Path], float], int, str]] = {
        "open (remembered)": (opened, 20 * args.repeat, "ms"),
        "first open (fresh)": (first_open, args.repeat, "s"),
        "query bm25 (fresh reader)": (
            lambda p: statistics.median(query(p, q) for q in texts),
            args.repeat,
            "ms",
        ),
        "verify": (verified, args.repeat, "s"),
    }
    for label, (fn, n, unit) in measures.items():
        got: dict[str, list[float]] = {"old": [], "new": []}
        for _ in range(n):  # interleaved: both see the same machine
            for name, p in packs.items():
                got[name].append(fn(p))
        old, new = (statistics.median(got[k]) for k in ("old", "new"))
        scale = 1000 if unit == "ms" else 1
        print(
            f"{label:<24}{old * scale:>10.2f}{unit:>2}{new * scale:>10.2f}{unit:>2}"
            f"{new / old:>15.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
