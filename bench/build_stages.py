"""Build: time per stage on real corpora with the default model, and the share that is not
embedding.

``kbpack.ops.build.build`` -- the function ``kbpack build`` calls -- runs on fixtures/docs (PDF,
DOCX, HTML, Markdown) and fixtures/eval/corpus, ``--repeat`` times each, in a fresh process per
run (so model load and imports are paid every time, as a user pays them); the stage times are
the pipeline's own (BuildReport.seconds): load (model), extract (worker process per document),
chunk (structure + model tokenizer), embed, index (pack writer spool + BM25 postings), write
(HDF5, hashing, fsync, atomic replace). ``--threads`` sets llama.cpp's threads (default 1: on a shared machine two spinning threads on
two busy cores slow embedding many times over, which would flatter the overhead share).
Medians are reported, and the pipeline overhead =
everything but ``embed`` as a share of the total (target < 10%), with and without the model
load (a one-off per build).

    python bench/build_stages.py
    python bench/build_stages.py --corpus fixtures/docs --repeat 1 --json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CORPORA = (ROOT / "fixtures" / "docs", ROOT / "fixtures" / "eval" / "corpus")

_CHILD = """
import json, sys, time
t = time.perf_counter()
from pathlib import Path
from kbpack.ops.build import BuildOptions, build
threads = int(sys.argv[3]) or None
r = build(BuildOptions(sources=[Path(sys.argv[1])], out=Path(sys.argv[2]), threads=threads))
wall = time.perf_counter() - t
print(json.dumps({"seconds": r.seconds, "wall": wall, "chunks": r.counts["chunks"],
    "documents_ok": r.counts["documents_ok"], "tokens": r.tokens_embedded,
    "size": r.size, "peak_rss_mb": r.peak_rss_mb}))
"""


def run_once(corpus: Path, threads: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(
            [sys.executable, "-c", _CHILD, str(corpus), str(Path(tmp) / "b.kbpack"), str(threads)],
            check=True,
            capture_output=True,
            text=True,
            cwd=ROOT,
        ).stdout
    result: dict[str, Any] = json.loads(out)
    return result


def summarise(corpus: Path, runs: list[dict[str, Any]]) -> dict[str, Any]:
    stages = sorted({k for r in runs for k in r["seconds"]})
    med = {k: round(statistics.median(r["seconds"].get(k, 0.0) for r in runs), 3) for k in stages}
    total = sum(med.values())
    embed = med.get("embed", 0.0)
    load = med.get("load", 0.0)
    first = runs[0]
    return {
        "corpus": str(corpus.relative_to(ROOT)),
        "runs": len(runs),
        "documents": first["documents_ok"],
        "chunks": first["chunks"],
        "tokens_embedded": first["tokens"],
        "pack_bytes": first["size"],
        "peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
        "median_s": med,
        "stages_total_s": round(total, 3),
        "process_wall_s": round(statistics.median(r["wall"] for r in runs), 3),
        "embed_ms_per_chunk": round(1000 * embed / max(1, first["chunks"]), 2),
        "overhead_share": round((total - embed) / total, 4) if total else None,
        "overhead_share_without_load": round((total - embed - load) / (total - load), 4)
        if total > load
        else None,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--corpus", type=Path, nargs="+", default=list(CORPORA))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--threads", type=int, default=1, help="llama.cpp threads (0: kbpack's default, all CPUs)"
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = []
    for corpus in args.corpus:
        corpus = corpus.resolve()
        runs = [run_once(corpus, args.threads) for _ in range(args.repeat)]
        rows.append(summarise(corpus, runs) | {"threads": args.threads})
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    for r in rows:
        m = r["median_s"]
        print(
            f"{r['corpus']}: {r['documents']} documents, {r['chunks']} chunks, "
            f"{r['tokens_embedded']} tokens, median of {r['runs']} builds, "
            f"{r['threads'] or 'default'} llama.cpp threads"
        )
        print("  " + "  ".join(f"{k} {v:.2f}s" for k, v in m.items()))
        print(
            f"  stages {r['stages_total_s']:.2f}s (process {r['process_wall_s']:.2f}s), "
            f"embed {r['embed_ms_per_chunk']} ms/chunk, peak RSS {r['peak_rss_mb']:.0f} MB"
        )
        print(
            f"  not embedding: {100 * r['overhead_share']:.1f}% of the build "
            f"({100 * r['overhead_share_without_load']:.1f}% without the model load)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
