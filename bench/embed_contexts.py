"""Queries on llama.cpp contexts (issue 35 items 1 and 2): an ``Embedder`` holds one llama.cpp
context per thread (each running one thread) instead of one context running all of them.

    python bench/embed_contexts.py [--threads 2] [--queries 1000] [--callers 8] [--rounds 3]

1. **One query**: the dev questions (short) and ~250-token passages (long), each embedded alone,
   by one context with one thread, by one context with ``--threads`` threads (kbpack 0.2's
   query embedder) and by the default embedder (one thread below ``ALL_THREADS_TOKENS``, all
   of them from there); median wall and CPU ms per query, interleaved rounds, and whether the
   vectors are the same bits. Lengths: the dev questions, stretches of the corpus of 64, 96,
   128 and 192 tokens, and passages of 230-256.
2. **Concurrent queries** (a server's request threads): ``--callers`` Python threads embed
   their share of ``--queries`` dev questions, one query per call, through the embedder a
   server shares: before, a lock around one context running ``--threads`` threads (this
   morning's ``SerialEmbedder``); now ``SerialEmbedder`` over the pool (``--threads``
   contexts of one thread). Queries per second (wall) and CPU seconds, interleaved rounds; the
   vectors checked against a lone call's.
3. **Memory**: resident set size of a fresh process after a load and one query (one context),
   then after a call that spread over all the contexts.

A script: it asserts nothing. Run it under ``nice`` on a shared machine and read the ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import numpy as np  # noqa: E402
from idle import wait_for_idle  # noqa: E402

from kbpack.model.embedder import Embedder  # noqa: E402
from kbpack.search.assemble import SerialEmbedder  # noqa: E402

CORPUS = ROOT / "fixtures" / "eval" / "corpus"
IDLE_WAIT = 0.0  # --idle-wait


class Locked:
    """The server's embedder before the pool: every call under one lock."""

    def __init__(self, inner: Embedder) -> None:
        self._inner = inner
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            return self._inner.embed(texts)


def long_texts(e: Embedder, n: int) -> list[str]:
    """``n`` passages of the corpus of 230 tokens up to the window (256), the most words of
    each stretch of 200 that fit."""
    out: list[str] = []
    for path in sorted(CORPUS.rglob("*.md")):
        words = path.read_text(encoding="utf-8", errors="replace").split()
        for at in range(0, len(words) - 200, 200):
            size = 200
            while size > 100 and e.count_tokens(" ".join(words[at : at + size])) > e.window:
                size -= 5
            text = " ".join(words[at : at + size])
            if 230 <= e.count_tokens(text) <= e.window:
                out.append(text)
            if len(out) == n:
                return out
    return out


def passages(e: Embedder, tokens: int, n: int) -> list[str]:
    """``n`` stretches of the corpus's words of ``tokens`` to ``tokens + 4`` tokens."""
    out: list[str] = []
    for path in sorted(CORPUS.rglob("*.md")):
        words = path.read_text(encoding="utf-8", errors="replace").split()
        for at in range(0, len(words) - 2 * tokens, 2 * tokens):
            size = tokens // 3
            while e.count_tokens(" ".join(words[at : at + size])) < tokens:
                size += 1
            text = " ".join(words[at : at + size])
            if e.count_tokens(text) <= min(tokens + 4, e.window):
                out.append(text)
            if len(out) == n:
                return out
    return out


def timed(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    w, c = time.perf_counter(), time.process_time()
    result = fn()
    return time.perf_counter() - w, time.process_time() - c, result


def one_query(threads: int, rounds: int, short: list[str]) -> dict[str, Any]:
    one = Embedder(threads=1)
    old = Embedder(threads=threads, contexts=1)
    new = Embedder(threads=threads)  # the default: 1 thread, all of them from ALL_THREADS_TOKENS
    groups = [("dev questions", short)]
    groups += [(f"{n} tokens", passages(one, n, len(short))) for n in (64, 96, 128, 192)]
    groups += [("230-256 tokens", long_texts(one, len(short)))]
    rows: dict[str, Any] = {}
    for name, texts in groups:
        per: dict[str, list[tuple[float, float]]] = {"1x1": [], f"1x{threads}": [], "default": []}
        same = True
        for r in range(rounds):
            arms = [("1x1", one), (f"1x{threads}", old), ("default", new)]
            for arm, e in arms if r % 2 == 0 else arms[::-1]:
                if IDLE_WAIT:
                    wait_for_idle(threads - 0.2, IDLE_WAIT)
                for t in texts:
                    w, c = time.perf_counter(), time.process_time()
                    e.embed([t])
                    per[arm].append((time.perf_counter() - w, time.process_time() - c))
        for t in texts:
            want = one.embed([t]).tobytes()
            same &= want == old.embed([t]).tobytes() == new.embed([t]).tobytes()
        tokens = statistics.median(len(one.prepare([t])[0]) for t in texts)
        rows[name] = {
            "texts": len(texts),
            "median_tokens": tokens,
            "same_bits": same,
            **{
                f"{arm}_{k}_ms": round(statistics.median(x[i] for x in v) * 1e3, 2)
                for arm, v in per.items()
                for i, k in enumerate(("wall", "cpu"))
            },
        }
        print(json.dumps({name: rows[name]}), flush=True)
    return rows


def concurrent(threads: int, callers: int, rounds: int, qs: list[str]) -> dict[str, Any]:
    lone = Embedder(threads=1)
    want = [lone.embed([q]).tobytes() for q in qs]
    lone.close()
    arms: dict[str, Any] = {
        f"lock, 1 context x {threads} threads": Locked(Embedder(threads=threads, contexts=1)),
        f"pool, {threads} contexts x 1 thread": SerialEmbedder(Embedder(threads=threads)),
    }
    runs: dict[str, list[tuple[float, float]]] = {k: [] for k in arms}
    same = {k: True for k in arms}
    for r in range(rounds):
        for name in list(arms) if r % 2 == 0 else list(arms)[::-1]:
            e = arms[name]
            got: list[bytes] = [b""] * len(qs)

            def caller(k: int, e: Any = e, got: list[bytes] = got) -> None:
                for i in range(k, len(qs), callers):
                    got[i] = e.embed([qs[i]]).tobytes()

            def run() -> None:
                workers = [threading.Thread(target=caller, args=(k,)) for k in range(callers)]
                for w in workers:
                    w.start()
                for w in workers:
                    w.join()

            idle = wait_for_idle(threads - 0.2, IDLE_WAIT) if IDLE_WAIT else None
            wall, cpu, _ = timed(run)
            runs[name].append((wall, cpu))
            same[name] &= got == want
            print(
                f"round {r + 1} {name}: {wall:.2f}s wall, {cpu:.2f}s CPU, idle {idle}", flush=True
            )
    out: dict[str, Any] = {"queries": len(qs), "callers": callers}
    for name, v in runs.items():
        wall = statistics.median(x[0] for x in v)
        out[name] = {
            "queries_per_s": round(len(qs) / wall, 1),
            "wall_s": round(wall, 2),
            "cpu_s": round(statistics.median(x[1] for x in v), 2),
            "same_bits_as_lone": same[name],
        }
    return out


_RSS = """
import json, sys
from kbpack.model.embedder import Embedder
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
e = Embedder(threads=int(sys.argv[1]))
e.embed(["one query"])
one = rss()
e.embed([f"paragraph {i} " * (20 + i % 40) for i in range(200)])
print(json.dumps({"contexts": e.contexts_made, "after_query_mb": round(one, 1),
                  "after_200_texts_mb": round(rss(), 1)}))
"""


def memory(threads: int) -> dict[str, Any]:
    """RSS of a process with one thread (one context) and one with ``threads`` contexts."""
    out: dict[str, Any] = {}
    for n in dict.fromkeys([1, threads]):
        proc = subprocess.run(
            [sys.executable, "-c", _RSS, str(n)],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        )
        out[f"threads={n}"] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def main() -> int:
    from dense import questions

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--callers", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--latency-texts", type=int, default=40)
    ap.add_argument("--parts", default="memory,one_query,concurrent", help="what to measure")
    ap.add_argument(
        "--idle-wait", type=float, default=0.0, help="seconds to wait for idle cores per run"
    )
    args = ap.parse_args()
    global IDLE_WAIT
    IDLE_WAIT = args.idle_wait
    qs = questions(args.queries)
    parts = args.parts.split(",")
    summary: dict[str, Any] = {"threads": args.threads}
    if "memory" in parts:
        summary["memory"] = memory(args.threads)
    if "one_query" in parts:
        summary["one_query"] = one_query(args.threads, args.rounds, qs[: args.latency_texts])
    if "concurrent" in parts:
        summary["concurrent"] = concurrent(args.threads, args.callers, args.rounds, qs)
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
