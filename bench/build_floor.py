"""Where a build's time goes against the floor: ``kbpack build`` of a corpus against bare
llama-cpp-python embedding exactly the texts that build embeds, batched ideally, and against
kbpack 0.2.0's build of the same corpus (issue 35 item 1).

    python bench/build_floor.py                                  # fixtures/eval/corpus
    python bench/build_floor.py --corpus DIR --baseline /tmp/v020 --rounds 2 --keep DEV.kbpack
    python bench/build_floor.py --corpus fixtures/eval/corpus/attrs --threads 2 --one-context \
        --baseline /tmp/v020 --rounds 3              # contexts: 2 x 1 thread vs 1 x 2 threads

Steps, each in a fresh process with a fresh cache folder (the converted model is shared):

1. a ``build --dry-run`` that records the token lists of every text the build would embed
   (chunk and piece texts, document prefix and special tokens included, cut to the window as
   the build cuts them): the floor's input;
2. per round, interleaved (the order alternates): ``kbpack build`` (pieces on, the default;
   the embedding cache on, in its fresh folder, as a first build has it), the floor, and with
   ``--baseline`` the build of the kbpack found in that tree (its PYTHONPATH; 0.2.0 is
   fb1af9e: ``git worktree add --detach /tmp/v020 fb1af9e``), and with ``--one-context`` this
   kbpack's build on one llama.cpp context running all ``--threads`` (0.2.0's way: the
   ``contexts=1`` build option) beside the default (one context per thread).

The floor is llama-cpp-python alone: ``--contexts`` ``Llama`` objects (default: one per
thread, each with ``threads // contexts`` threads; embedding, flash attention,
``OMP_WAIT_POLICY=PASSIVE`` as kbpack sets it), all texts of the corpus sorted by length and
packed greedily into ``llama_decode`` calls of at most ``--floor-batch`` tokens (the fastest of
the sizes given, chosen on a sample first, on one context), the calls taken in turn by one
Python thread per context, pooled vectors read back and normalised. It times embedding only: no extraction, chunking, index or file. Each build is
timed whole (its ``build()`` call, model load included). Wall and CPU seconds are printed;
on a shared machine read the CPU ratios. A script: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

# 1. the token lists a build embeds (a dry run: nothing embedded; placeholder vectors)
_TEXTS = """
import json, sys
from pathlib import Path
from kbpack.ops.build import BuildOptions, build
from kbpack.ops.estimate import DryRun
seen = []
class Recording(DryRun):
    def vectors(self, embedder, tokenized, cache):
        seen.extend(tokenized)
        return super().vectors(embedder, tokenized, cache)
o = BuildOptions(sources=[Path(sys.argv[1])], out=Path(sys.argv[2]), threads=int(sys.argv[3]),
                 pieces=True, **json.loads(sys.argv[5]))
r = build(o, dry=Recording())
from kbpack.model.cache import default_model_path
json.dump({"tokens": seen, "model": str(default_model_path())}, open(sys.argv[4], "w"))
print(json.dumps({"texts": len(seen), "tokens": sum(map(len, seen))}))
"""

# 2. a build, timed whole (kbpack/ops/build.py here, kbpack/build.py in 0.2.0)
_BUILD = """
import json, sys, time
from pathlib import Path
try:
    from kbpack.ops.build import BuildOptions, build
except ImportError:
    from kbpack.build import BuildOptions, build
extra = json.loads(sys.argv[4])
o = BuildOptions(sources=[Path(sys.argv[1])], out=Path(sys.argv[2]), threads=int(sys.argv[3]),
                 pieces=True, **extra)
t, c = time.perf_counter(), time.process_time()
r = build(o)
print(json.dumps({"wall": time.perf_counter() - t, "cpu": time.process_time() - c,
                  "seconds": r.seconds, "size": r.size, "chunks": r.counts.get("chunks"),
                  "pieces": r.counts.get("pieces"),
                  "texts": getattr(r, "embeddings_total", None)}))
"""

# 3. the floor: bare llama-cpp-python on the same token lists
_FLOOR = """
import json, os, sys, threading, time
os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
import numpy as np
import llama_cpp
from kbpack.model.llama_backend import load_cpu_backend
load_cpu_backend(llama_cpp)  # a runtime-dispatch build (--lib) loads its CPU library first
data = json.load(open(sys.argv[1]))
threads, sizes, sample = int(sys.argv[2]), [int(x) for x in sys.argv[3].split(",")], int(sys.argv[4])
contexts = int(sys.argv[5])
tokens = sorted(data["tokens"], key=len)
longest = max(map(len, tokens))
def load(n, k=1):
    # room for the longest text, which goes alone when it exceeds the budget n
    n = max(n, -(-longest // 256) * 256)
    each = max(1, threads // k)
    return [llama_cpp.Llama(model_path=data["model"], embedding=True, n_ctx=n, n_batch=n,
                            n_ubatch=n, n_threads=each, n_threads_batch=each,
                            flash_attn=True, verbose=False) for _ in range(k)]
def run(llms, n, texts):
    seqs = int(llms[0].context_params.n_seq_max)
    out = np.zeros((len(texts), llms[0].n_embd()), np.float32)
    calls, batch, used, start = [], [], 0, 0
    for i, t in enumerate(texts):
        if batch and (used + len(t) > n or len(batch) >= seqs):
            calls.append((start, batch))
            start, batch, used = i, [], 0
        batch.append(t)
        used += len(t)
    if batch:
        calls.append((start, batch))
    turn, lock = iter(calls), threading.Lock()
    def work(llm):
        while True:
            with lock:
                call = next(turn, None)
            if call is None:
                return
            start, batch = call
            llm._batch.reset()
            for s, t in enumerate(batch):
                llm._batch.add_sequence(t, s, True)
            llm._ctx.kv_cache_clear()
            llm._ctx.decode(llm._batch)
            for s in range(len(batch)):
                ptr = llama_cpp.llama_get_embeddings_seq(llm._ctx.ctx, s)
                out[start + s] = np.ctypeslib.as_array(ptr, shape=(out.shape[1],))
    if len(llms) == 1:
        work(llms[0])
    else:
        workers = [threading.Thread(target=work, args=(llm,)) for llm in llms]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    out /= np.linalg.norm(out, axis=1, keepdims=True)
    return out
chosen, trial = sizes[0], {}
if len(sizes) > 1:
    # the sample: texts spread over the lengths, as the corpus's
    step = max(1, len(tokens) // sample)
    picks = tokens[::step]
    for n in sizes:
        llms = load(n)
        run(llms, n, picks[:8])
        c = time.process_time()
        run(llms, n, picks)
        trial[n] = time.process_time() - c
        llms[0].close()
    chosen = min(trial, key=trial.get)
llms = load(chosen, contexts)
run(llms, chosen, tokens[: 4 * contexts])  # warm-up, untimed
t, c = time.perf_counter(), time.process_time()
run(llms, chosen, tokens)
print(json.dumps({"wall": time.perf_counter() - t, "cpu": time.process_time() - c,
                  "batch": chosen, "trial_cpu": trial, "texts": len(tokens),
                  "contexts": contexts, "tokens": sum(map(len, tokens))}))
"""


def child(
    code: str, pythonpath: Path, args: list[str], tmp: Path, lib: Path | None = None
) -> dict[str, Any]:
    cache = tmp / f"cache-{time.monotonic_ns()}"
    cache.mkdir()
    models = Path(os.environ.get("KBPACK_CACHE_DIR", Path.home() / ".cache/kbpack")) / "models"
    models.mkdir(parents=True, exist_ok=True)
    (cache / "models").symlink_to(models)
    env = {**os.environ, "PYTHONPATH": str(pythonpath), "KBPACK_CACHE_DIR": str(cache)}
    if lib is not None:  # llama-cpp-python loads libllama from here (LLAMA_CPP_LIB_PATH)
        env["LLAMA_CPP_LIB_PATH"] = str(lib.resolve())
    proc = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp,
    )
    if proc.returncode != 0:
        raise SystemExit(f"child failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    from idle import wait_for_idle

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--corpus", type=Path, default=ROOT / "fixtures" / "eval" / "corpus")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--contexts", type=int, help="the floor's llama.cpp contexts (default: threads)"
    )
    ap.add_argument(
        "--one-context", action="store_true", help="also kbpack's build on one context (0.2.0's)"
    )
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--baseline", type=Path, help="a kbpack tree (PYTHONPATH), e.g. 0.2.0's")
    ap.add_argument("--floor-batch", default="128,256,512", help="llama_decode token budgets tried")
    ap.add_argument("--sample", type=int, default=400, help="texts to choose the floor batch on")
    ap.add_argument("--keep", type=Path, help="keep kbpack's (first) pack here")
    ap.add_argument(
        "--idle-wait",
        type=float,
        default=0.0,
        help="wait up to this many seconds before each run for --threads idle cores",
    )
    ap.add_argument("--options", default="{}", help="JSON of extra BuildOptions for kbpack's build")
    ap.add_argument(
        "--lib",
        type=Path,
        help="llama.cpp libraries for this kbpack's builds and the floor (e.g. the runtime-"
        "dispatch wheel's llama_cpp/lib, what make install now builds); the baseline keeps the "
        "installed build (0.2.0's, linked for AVX2)",
    )
    args = ap.parse_args()
    corpus = str(args.corpus.resolve())
    threads = str(args.threads)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        texts = tmp / "texts.json"
        t0 = time.perf_counter()
        info = child(
            _TEXTS, ROOT, [corpus, str(tmp / "dry.kbpack"), threads, str(texts), args.options], tmp
        )
        print(
            f"texts embedded: {info['texts']} ({info['tokens']} tokens); dry run "
            f"{time.perf_counter() - t0:.1f}s",
            flush=True,
        )
        runs: dict[str, list[dict[str, Any]]] = {
            "kbpack": [],
            "floor": [],
            "baseline": [],
            "one_context": [],
        }
        arms = ["kbpack", "floor"] + (["baseline"] if args.baseline else [])
        arms += ["one_context"] if args.one_context else []
        contexts = str(args.contexts or args.threads)
        for r in range(args.rounds):
            for arm in arms if r % 2 == 0 else list(reversed(arms)):
                idle = wait_for_idle(args.threads - 0.2, args.idle_wait) if args.idle_wait else None
                load = os.getloadavg()[0]
                if arm == "floor":
                    res = child(
                        _FLOOR,
                        ROOT,
                        [str(texts), threads, args.floor_batch, str(args.sample), contexts],
                        tmp,
                        args.lib,
                    )
                else:
                    out = tmp / f"{arm}-{r}.kbpack"
                    here = arm in ("kbpack", "one_context")
                    tree = ROOT if here else args.baseline.resolve()  # type: ignore[union-attr]
                    extra = args.options if here else "{}"
                    if arm == "one_context":
                        extra = json.dumps({**json.loads(extra), "contexts": 1})
                    lib = args.lib if here else None
                    res = child(_BUILD, tree, [corpus, str(out), threads, extra], tmp, lib)
                    if arm == "kbpack" and args.keep and r == 0:
                        args.keep.write_bytes(out.read_bytes())
                    out.unlink(missing_ok=True)
                res["load_before"] = load
                res["idle_cores_before"] = idle
                runs[arm].append(res)
                print(f"round {r + 1} {arm}: {json.dumps(res)}", flush=True)

    def med(arm: str, key: str) -> float:
        return statistics.median(x[key] for x in runs[arm])

    summary: dict[str, Any] = {
        "corpus": corpus,
        "threads": args.threads,
        "rounds": args.rounds,
        "texts": info["texts"],
        "tokens": info["tokens"],
        "floor_batch": runs["floor"][0]["batch"],
        "floor_contexts": runs["floor"][0]["contexts"],
    }
    for key in ("wall", "cpu"):
        summary[f"kbpack_{key}_s"] = round(med("kbpack", key), 1)
        summary[f"floor_{key}_s"] = round(med("floor", key), 1)
        summary[f"kbpack_over_floor_{key}"] = round(med("kbpack", key) / med("floor", key), 3)
        if args.baseline:
            summary[f"baseline_{key}_s"] = round(med("baseline", key), 1)
            summary[f"baseline_over_kbpack_{key}"] = round(
                med("baseline", key) / med("kbpack", key), 3
            )
        if args.one_context:
            summary[f"one_context_{key}_s"] = round(med("one_context", key), 1)
            summary[f"one_context_over_kbpack_{key}"] = round(
                med("one_context", key) / med("kbpack", key), 3
            )
    summary["load_average_end"] = os.getloadavg()[0]
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
