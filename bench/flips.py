"""Random single-bit flips in a pack: is every damaged read detected, without running verify?

For each flip: copy the pack, flip one random bit of its HDF5 bytes (the region after the
64 KiB header; the header's own bytes are verify's step 1), then read everything a command can
read through ``PackReader`` -- every attribute, every column, every string column, every
document's text, the postings the way BM25 reads them, the vectors -- and compare with what the
intact pack gives. Each flip is one of:

* **detected** -- a one-line ``KbpackError`` (the pack is refused, or a read names the element);
* **harmless** -- every value read equals the intact pack's (the bit was in free space,
  padding, or a field HDF5 does not use for reading);
* **silent** -- some value differs and nothing was said: the failure this script exists to
  find. The target is 0;
* **crash** -- any other exception (an internal error for the user). The target is 0.

    python bench/flips.py                                  # fixtures/golden/v2.kbpack, 1000 flips
    python bench/flips.py PACK --flips 5000 --seed 7 --json
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kbpack.errors import KbpackError  # noqa: E402
from kbpack.pack import format as F  # noqa: E402
from kbpack.pack.read import PackReader  # noqa: E402

DEFAULT_PACK = ROOT / "fixtures" / "golden" / "v2.kbpack"


def read_all(path: Path) -> dict[str, Any]:
    """Everything a command reads, as plain values."""
    out: dict[str, Any] = {}
    with PackReader(path) as r:
        out["/@attrs"] = r.attrs("/")
        for el in F.ELEMENTS:
            if el.path not in r.h5:
                continue
            out[el.path + "@attrs"] = r.attrs(el.path)
            if not el.dtype:
                continue
            if el.path == F.DOC_TEXT:
                out[el.path] = [r.text(i) for i in range(r.counts["documents"])]
            elif el.dtype == "str":
                out[el.path] = r.strings(el.path)
            elif el.path == F.VEC_DATA:
                out[el.path] = r.vectors().tobytes()
            elif el.path in (F.BM25_CHUNK, F.BM25_TF):
                out[el.path] = np.asarray(r.dataset(el.path)[:]).tobytes()  # as BM25Index
            else:
                out[el.path] = r.column(el.path).tobytes()
    return out


def classify(path: Path, intact: dict[str, Any]) -> tuple[str, str]:
    """(outcome, detail): detected / harmless / silent / crash."""
    try:
        got = read_all(path)
    except KbpackError as e:
        return "detected", str(e).split(": ", 1)[-1][:120]
    except Exception as e:  # an internal error in the CLI
        return "crash", f"{type(e).__name__}: {e}"[:160]
    differ = sorted(k for k in set(intact) | set(got) if intact.get(k) != got.get(k))
    return ("silent", ", ".join(differ)) if differ else ("harmless", "")


def run(pack: Path, flips: int, seed: int) -> dict[str, Any]:
    data = pack.read_bytes()
    intact = read_all(pack)
    rng = random.Random(seed)
    outcomes: Counter[str] = Counter()
    silent: list[dict[str, Any]] = []
    crashes: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "flipped.kbpack"
        for _ in range(flips):
            bit = rng.randrange(F.USERBLOCK_SIZE * 8, len(data) * 8)
            damaged = bytearray(data)
            damaged[bit // 8] ^= 1 << (bit % 8)
            target.write_bytes(damaged)
            outcome, detail = classify(target, intact)
            outcomes[outcome] += 1
            if outcome == "silent":
                silent.append({"byte": bit // 8, "bit": bit % 8, "elements": detail})
            elif outcome == "crash":
                crashes.append({"byte": bit // 8, "bit": bit % 8, "error": detail})
    return {
        "pack": str(pack),
        "bytes": len(data),
        "flips": flips,
        "seed": seed,
        "outcomes": {k: outcomes.get(k, 0) for k in ("detected", "harmless", "silent", "crash")},
        "silent": silent,
        "crashes": crashes,
        "seconds": round(time.perf_counter() - t0, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pack", nargs="?", type=Path, default=DEFAULT_PACK)
    ap.add_argument("--flips", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:  # never flip bits in the caller's file
        pack = Path(shutil.copy(args.pack, Path(tmp) / "pack.kbpack"))
        result = run(pack, args.flips, args.seed)
    result["pack"] = str(args.pack)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    o = result["outcomes"]
    print(
        f"{result['pack']} ({result['bytes']} bytes): {result['flips']} single-bit flips in the "
        f"HDF5 bytes, seed {result['seed']}, {result['seconds']} s"
    )
    print(
        f"  detected {o['detected']}  harmless {o['harmless']}  silent {o['silent']}  "
        f"crash {o['crash']}   (target: silent 0, crash 0)"
    )
    for s in result["silent"][:10]:
        print(f"  silent: byte {s['byte']} bit {s['bit']}: {s['elements']}")
    for c in result["crashes"][:10]:
        print(f"  crash: byte {c['byte']} bit {c['bit']}: {c['error']}")


if __name__ == "__main__":
    main()
