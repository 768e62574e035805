"""Scale: build, open and query packs of 10k, 100k and 1M chunks (384-dim vectors).

Each pack is built by ``bench/synth.py pack`` in its own process (so its peak RSS is the
build's alone): realistic synthetic documents, kbpack's chunker, BM25 postings and PackWriter,
with random unit vectors in place of embeddings (embedding 1M chunks on 2 cores would take
hours; its speed is bench/embed.py's subject). The pack is stamped with the default model, so
queries are embedded by the real all-MiniLM-L6-v2.

Reported per size: build time per stage and peak RSS (target < 4 GB at 1M), pack bytes, open
time in-process and in a fresh process (target < 0.5 s at 1M), the one-off cost of loading
vectors for the first dense query, and per-query latency by stage (median over the evaluation
questions): query embedding, BM25 (``Searcher._bm25``: a Searcher's first query reads only its
terms' postings from the h5py datasets, the CLI's path, reported apart; from its second query it
bakes every posting's score once, reported apart too, and the table shows the baked path),
dense scan (``Searcher._dense`` with the query vector replayed), the whole ``search()`` minus
embedding, and ``Pack.search`` end to end with the real model. Up to ``--bm25s-max`` chunks,
bm25s (method "lucene", same k1/b, kbpack's tokens, top 100 like kbpack's candidate list)
indexes the same chunk contents and is timed interleaved with kbpack (target ratio <= 1.0).

    python bench/scale.py                         # reuses out/bench/synth-N.kbpack if present
    python bench/scale.py --sizes 10000 100000 --rebuild --json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from dense import OUT, SYNTH_PACK, ReplayedQueries, questions  # noqa: E402

from kbpack.pack.read import PackReader  # noqa: E402
from kbpack.search.searcher import CANDIDATES, Searcher  # noqa: E402

_OPEN_CHILD = """
import random, resource, sys, time
t = time.perf_counter()
from kbpack.pack import format as F
from kbpack.pack.read import PackReader
t1 = time.perf_counter()
c1 = time.process_time()
r = PackReader(sys.argv[1])
t2 = time.perf_counter()
c2 = time.process_time()
kid = resource.getrusage(resource.RUSAGE_CHILDREN)
# what a query's citations read after the open: 10 section paths (titles) and 5 canonical
# texts, rows drawn with the seed given (the same rows for every code compared)
rng = random.Random(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
for s in rng.sample(range(r.counts["sections"]), min(10, r.counts["sections"])):
    r.section_path(s)
for d in rng.sample(range(r.counts["documents"]), min(5, r.counts["documents"])):
    r.text(d)
t3 = time.perf_counter()
c3 = time.process_time()
r.close()
# wall: imports, open, rows; cpu: open in-process, the pre-flight child, rows
print(t1 - t, t2 - t1, t3 - t2, c2 - c1, kid.ru_utime + kid.ru_stime, c3 - c2)
"""


def build(n: int, rebuild: bool, folder: Path = OUT) -> tuple[Path, dict[str, Any]]:
    path = folder / f"synth-{n}.kbpack"
    meta = path.with_suffix(".json")
    if rebuild or not (path.exists() and meta.exists()):
        print(f"building {path.name}...", file=sys.stderr)
        folder.mkdir(parents=True, exist_ok=True)
        out = subprocess.run(
            [*SYNTH_PACK, str(n), "-o", str(path), "--json"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        meta.write_text(out)
    return path, json.loads(meta.read_text())


def median_ms(values: list[float]) -> float:
    return round(statistics.median(values) * 1000, 3)


def first_open_times(path: Path, repeat: int, peer: Path | None = None) -> dict[str, Any]:
    """The first open of a pack on a machine (its pre-flight parse in a sandboxed child,
    kbpack/pack/preflight.py) beside the second (remembered), each in a fresh process with an
    empty cache, one after the other, then the rows a query's citations read (10 section paths,
    5 texts: checked as read where the first open left them unchecked); and the pre-flight's
    parts in this process: the child's work, and the whole-file heap scan it no longer runs.
    With ``peer`` (a checkout of another kbpack, e.g. ``git archive``'s), the same fresh-process
    runs with its code, interleaved with this one's, same rows."""
    import resource
    import tempfile

    from kbpack.pack.global_heap import malformed_collections
    from kbpack.pack.manifest import read_header
    from kbpack.pack.preflight import parse_in_child

    def cpu_children() -> float:
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        return r.ru_utime + r.ru_stime

    codes = {"": ROOT} | ({"peer_": peer} if peer is not None else {})
    runs: dict[str, list[float]] = {}
    for i in range(repeat):
        for label, code in codes.items():
            with tempfile.TemporaryDirectory() as cache:
                env = {**os.environ, "KBPACK_CACHE_DIR": cache, "PYTHONPATH": str(code)}
                for which in ("first", "second"):  # nothing remembered yet, then remembered
                    c0 = cpu_children()
                    out = subprocess.run(
                        [sys.executable, "-c", _OPEN_CHILD, str(path), str(i)],
                        check=True,
                        capture_output=True,
                        text=True,
                        cwd=code,
                        env=env,
                    ).stdout.split()
                    cpu = cpu_children() - c0  # the whole process (and the pre-flight child)
                    parts = zip(
                        ("open", "rows", "open_cpu", "child_cpu", "rows_cpu", "cpu"),
                        [*map(float, out[1:6]), cpu],
                        strict=True,
                    )
                    for key, value in parts:
                        runs.setdefault(f"{label}{which}_{key}", []).append(value)
    m = read_header(path).manifest
    heap, parse = [], []
    parse_in_child(str(path), path.stat().st_size, m.format_version, m.counts)  # imports h5py
    for _ in range(repeat):
        t = time.process_time()
        malformed_collections(path)
        heap.append(time.process_time() - t)
        t = time.process_time()
        parse_in_child(str(path), path.stat().st_size, m.format_version, m.counts)
        parse.append(time.process_time() - t)
    out_: dict[str, Any] = {}
    for label in codes:
        for which in ("first", "second"):
            k = f"{label}{which}"
            out_[f"{k}_open_ms"] = median_ms(runs[f"{k}_open"])
            out_[f"{k}_rows_ms"] = median_ms(runs[f"{k}_rows"])
            out_[f"{k}_open_process_cpu_ms"] = median_ms(runs[f"{k}_cpu"])
            for part in ("open_cpu", "child_cpu", "rows_cpu"):
                out_[f"{k}_{part}_ms"] = median_ms(runs[f"{k}_{part}"])
    out_["preflight_heap_walk_cpu_ms"] = median_ms(heap)  # what the child no longer runs
    out_["preflight_parse_cpu_ms"] = median_ms(parse)  # parse_in_child: the child's work
    return out_


def open_times(path: Path, repeat: int) -> dict[str, float]:
    warm = []
    for _ in range(repeat):
        t = time.perf_counter()
        PackReader(path).close()
        warm.append(time.perf_counter() - t)
    fresh, imports = [], []
    for _ in range(max(3, repeat // 2)):
        out = subprocess.run(
            [sys.executable, "-c", _OPEN_CHILD, str(path)],
            check=True,
            capture_output=True,
            text=True,
            cwd=ROOT,
        ).stdout.split()
        imports.append(float(out[0]))
        fresh.append(float(out[1]))
    return {
        "open_ms": median_ms(warm),
        "open_fresh_process_ms": median_ms(fresh),
        "import_reader_ms": median_ms(imports),
    }


def chunk_tokens(reader: PackReader) -> list[list[str]]:
    from kbpack.text.analyze import tokenize

    return [tokenize(reader.chunk_content(i)) for i in range(reader.counts["chunks"])]


def latencies(path: Path, texts: list[str], repeat: int, with_bm25s: bool) -> dict[str, Any]:
    import kbpack
    from kbpack.text.analyze import tokenize

    out: dict[str, Any] = {}
    with kbpack.open(path) as pack:
        t = time.perf_counter()
        embedder = pack.embedder  # resolves and loads the default model (hash checked)
        out["model_load_ms"] = round((time.perf_counter() - t) * 1000, 1)
        if embedder is None:
            raise SystemExit(f"{path}: the default model does not match the pack's stamp")
        qv = embedder.embed(texts)
        replay = Searcher(pack.reader, ReplayedQueries(texts, qv))
        t = time.perf_counter()
        pack.reader.vectors()
        out["first_dense_vectors_load_ms"] = round((time.perf_counter() - t) * 1000, 1)
        # The BM25 paths a user meets: a CLI query reads only its terms' postings (a fresh
        # Searcher); from its second query a Searcher bakes every posting's score once.
        single, bake = [], []
        for i, text in enumerate(texts):
            fresh = Searcher(pack.reader, None)
            t = time.perf_counter()
            fresh._bm25(text, None)
            single.append(time.perf_counter() - t)
            if i < 3:
                t = time.perf_counter()
                fresh._bm25(texts[-1 - i], None)
                bake.append(time.perf_counter() - t)
        out["bm25_first_query_ms"] = median_ms(single)
        out["bm25_second_query_with_bake_ms"] = median_ms(bake)
        stages: dict[str, Callable[[int], Any]] = {
            "embed": lambda i: embedder.embed([texts[i]]),
            "bm25": lambda i: replay._bm25(texts[i], None),
            "dense_scan": lambda i: replay._dense(texts[i], None),
            "search_minus_embed": lambda i: replay.search(texts[i], k=5),
            "end_to_end": lambda i: pack.search(texts[i], k=5),
        }
        if with_bm25s:
            import bm25s

            t = time.perf_counter()
            tokens = chunk_tokens(pack.reader)
            retriever = bm25s.BM25(k1=1.2, b=0.75, method="lucene")
            retriever.index(tokens, show_progress=False)
            out["bm25s_index_s_incl_tokenize"] = round(time.perf_counter() - t, 2)
            vocab = retriever.vocab_dict
            k = min(CANDIDATES, len(tokens))
            del tokens

            def bm25s_top(i: int) -> Any:
                # From the user's text, like kbpack: tokenizing the query is timed too.
                known = [w for w in dict.fromkeys(tokenize(texts[i])) if w in vocab]
                if not known:
                    return None
                return retriever.retrieve([known], k=k, show_progress=False, n_threads=0)

            stages["bm25s"] = bm25s_top
        times: dict[str, list[float]] = {name: [] for name in stages}
        names = list(stages)
        for rep in range(repeat):
            for i in range(len(texts)):
                shift = (i + rep) % len(names)
                order = names[shift:] + names[:shift]
                # Reversed every other time: no stage always runs right after the same one.
                for name in order[:: 1 if (i + rep) % 2 == 0 else -1]:
                    t = time.perf_counter()
                    stages[name](i)
                    times[name].append(time.perf_counter() - t)
    out["median_ms"] = {name: median_ms(v) for name, v in times.items()}
    out["p95_ms"] = {
        name: round(sorted(v)[int(0.95 * (len(v) - 1))] * 1000, 3) for name, v in times.items()
    }
    if with_bm25s:
        out["bm25_ratio_vs_bm25s"] = round(out["median_ms"]["bm25"] / out["median_ms"]["bm25s"], 3)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--queries", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--bm25s-max", type=int, default=100_000)
    ap.add_argument("--rebuild", action="store_true", help="build even when a pack exists")
    ap.add_argument("--dir", type=Path, default=OUT, help="where the packs are (or go)")
    ap.add_argument("--open-only", action="store_true", help="open times only, no queries")
    ap.add_argument(
        "--peer",
        type=Path,
        help="a checkout of another kbpack (its folder holding kbpack/): first opens with its "
        "code too, interleaved, same rows",
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    texts = questions(args.queries)
    rows = []
    for n in args.sizes:
        path, figures = build(n, args.rebuild, args.dir)
        row: dict[str, Any] = {"chunks": n, "build": figures}
        row |= first_open_times(path, args.repeat, args.peer)
        row |= open_times(path, 7)
        if not args.open_only:
            row |= latencies(path, texts, args.repeat, n <= args.bm25s_max)
        rows.append(row)
        print(f"{n} done", file=sys.stderr)
    report = {"queries": len(texts), "repeat": args.repeat, "rows": rows}
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print(render(report))
    return 0


def render(report: dict[str, Any]) -> str:
    lines = ["build (synthetic vectors; chunk + BM25 + write)"]
    lines.append(
        f"{'chunks':>9} {'docs':>7} {'terms':>9} {'pack MB':>8} {'build s':>8} "
        f"{'peak RSS MB':>11}  stages s"
    )
    for r in report["rows"]:
        b = r["build"]
        stages = " ".join(f"{k} {v}" for k, v in b["seconds"].items())
        lines.append(
            f"{r['chunks']:>9} {b['documents']:>7} {b['terms']:>9} {b['bytes'] / 1e6:>8.1f} "
            f"{b['total_s']:>8.1f} {b['peak_rss_mb']:>11.0f}  {stages}"
        )
    lines.append("")
    lines.append(
        "first open on a machine (pre-flight) vs second, fresh process, median ms (open: wall; "
        "rows: wall of 10 section paths + 5 texts read after it; cpu: the whole process with "
        "its children; parts: cpu in-process)"
    )
    lines.append(
        f"{'chunks':>9} {'code':>5} {'1st open':>9} {'1st rows':>9} {'2nd open':>9} "
        f"{'2nd rows':>9} {'1st cpu':>9} {'2nd cpu':>9}  1st cpu: open+child+rows, 2nd: open+rows"
    )
    for r in report["rows"]:
        for label in ("peer_", ""):
            if f"{label}first_open_ms" not in r:
                continue
            lines.append(
                f"{r['chunks']:>9} {label.rstrip('_') or 'this':>5} "
                f"{r[label + 'first_open_ms']:>9.1f} {r[label + 'first_rows_ms']:>9.1f} "
                f"{r[label + 'second_open_ms']:>9.1f} {r[label + 'second_rows_ms']:>9.1f} "
                f"{r[label + 'first_open_process_cpu_ms']:>9.1f} "
                f"{r[label + 'second_open_process_cpu_ms']:>9.1f}  "
                f"{r[label + 'first_open_cpu_ms']:.0f}+{r[label + 'first_child_cpu_ms']:.0f}"
                f"+{r[label + 'first_rows_cpu_ms']:.0f}, {r[label + 'second_open_cpu_ms']:.0f}"
                f"+{r[label + 'second_rows_cpu_ms']:.0f}"
            )
        lines.append(
            f"{'':>9} pre-flight child cpu {r['preflight_parse_cpu_ms']:.1f} ms; the whole-file "
            f"heap scan it no longer runs {r['preflight_heap_walk_cpu_ms']:.1f} ms"
        )
    lines.append("")
    if any("model_load_ms" not in r for r in report["rows"]):
        return "\n".join(lines)
    lines.append("open and first query")
    lines.append(
        f"{'chunks':>9} {'open ms':>8} {'fresh proc ms':>13} {'model load ms':>13} "
        f"{'vectors load ms':>15} {'1st BM25 ms':>11} {'2nd + bake ms':>13}"
    )
    for r in report["rows"]:
        lines.append(
            f"{r['chunks']:>9} {r['open_ms']:>8.1f} {r['open_fresh_process_ms']:>13.1f} "
            f"{r['model_load_ms']:>13.1f} {r['first_dense_vectors_load_ms']:>15.1f} "
            f"{r['bm25_first_query_ms']:>11.1f} {r['bm25_second_query_with_bake_ms']:>13.1f}"
        )
    lines.append("")
    names = ["embed", "bm25", "bm25s", "dense_scan", "search_minus_embed", "end_to_end"]
    lines.append(f"query latency, median ms ({report['queries']} queries x {report['repeat']})")
    lines.append(f"{'chunks':>9} " + " ".join(f"{n:>18}" for n in names) + f" {'bm25/bm25s':>10}")
    for r in report["rows"]:
        m = r["median_ms"]
        cells = " ".join(f"{m[n]:>18.2f}" if n in m else f"{'-':>18}" for n in names)
        ratio = r.get("bm25_ratio_vs_bm25s", "-")
        lines.append(f"{r['chunks']:>9} {cells} {ratio:>10}")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
