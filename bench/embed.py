"""Embedding speed: ms per chunk for kbpack's Embedder, a bare llama-cpp-python loop over the
same texts, and sentence-transformers (torch) when a Python that has it is available.

    python bench/embed.py                         # default model, seeds corpus
    python bench/embed.py --st-python /tmp/torchvenv/bin/python

The texts are real: the seed documents' paragraphs, merged up to ~512 characters (the chunk
size the BRIEF measured) and cut to the 256-token window. A script, not a test: it prints
figures and ratios, it asserts nothing about time.
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

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kbpack.model.embedder import Embedder, available_threads  # noqa: E402

# ../shared/seeds beside the checkout (a worktree elsewhere: set KBPACK_SEEDS)
SEEDS = Path(os.environ.get("KBPACK_SEEDS", ROOT.parent / "shared" / "seeds"))


def corpus_texts(embedder: Embedder, folder: Path, max_chars: int = 512) -> list[str]:
    """Seed paragraphs merged up to ``max_chars``, each cut (at a word) to fit the window."""
    texts: list[str] = []
    for path in sorted(folder.glob("*.txt")):
        paragraphs = [p.strip() for p in path.read_text(encoding="utf-8").split("\n\n")]
        current = ""
        for p in filter(None, paragraphs):
            if current and len(current) + 2 + len(p) > max_chars:
                texts.append(current)
                current = p
            else:
                current = f"{current}\n\n{p}" if current else p
        if current:
            texts.append(current)
    fitted = []
    for text in texts:
        words = text.split(" ")
        while embedder.count_tokens(" ".join(words)) > embedder.window:
            words = words[:-1]
        fitted.append(" ".join(words))
    return fitted


class Timer:
    """Median wall and CPU seconds of repeated runs. CPU time (all threads of this process)
    is reported too because on a shared machine wall time mostly measures the neighbours."""

    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []

    def run(self, fn: Callable[[], object]) -> object:
        t0, c0 = time.perf_counter(), time.process_time()
        result = fn()
        self.wall.append(time.perf_counter() - t0)
        self.cpu.append(time.process_time() - c0)
        return result

    def per_item_ms(self, n: int) -> tuple[float, float]:
        return statistics.median(self.wall) / n * 1000, statistics.median(self.cpu) / n * 1000


def bare_llama(model: Path, threads: int) -> Any:
    """What a user would write: one Llama with the same context and attention settings."""
    import llama_cpp

    from kbpack.model.embedder import FLASH_ATTENTION

    return llama_cpp.Llama(
        model_path=str(model),
        embedding=True,
        n_ctx=512,
        n_batch=512,
        n_ubatch=512,
        n_threads=threads,
        n_threads_batch=threads,
        flash_attn=FLASH_ATTENTION,
        verbose=False,
    )


ST_SCRIPT = """
import json, sys, time, statistics
from sentence_transformers import SentenceTransformer
model_dir, threads, repeat = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
import torch; torch.set_num_threads(threads)
texts = json.load(sys.stdin)
m = SentenceTransformer(model_dir, device="cpu")
m.encode(texts, batch_size=32, normalize_embeddings=True)
times, cpu = [], []
for _ in range(repeat):
    t0, c0 = time.perf_counter(), time.process_time()
    m.encode(texts, batch_size=32, normalize_embeddings=True)
    times.append(time.perf_counter() - t0); cpu.append(time.process_time() - c0)
print(json.dumps({"seconds": statistics.median(times), "cpu": statistics.median(cpu),
                  "torch": torch.__version__}))
"""


def sentence_transformers(python: str | None, texts: list[str], threads: int, repeat: int) -> str:
    from kbpack.model.cache import default_weights_dir

    candidates = [python] if python else [sys.executable, "/tmp/torchvenv/bin/python"]
    for exe in candidates:
        if not exe or not Path(exe).exists():
            continue
        env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error")
        args = [exe, "-c", ST_SCRIPT, str(default_weights_dir()), str(threads), str(repeat)]
        done = subprocess.run(
            args, input=json.dumps(texts), capture_output=True, text=True, env=env
        )
        if done.returncode == 0:
            return done.stdout.strip().splitlines()[-1]
    return ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, help="GGUF (default: the default model)")
    parser.add_argument("--threads", type=int, default=available_threads())
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--limit", type=int, help="use only the first N chunks")
    parser.add_argument("--st-python", help="a Python with sentence-transformers and torch")
    args = parser.parse_args()

    t0 = time.perf_counter()
    embedder = Embedder(args.model, threads=args.threads)
    load = time.perf_counter() - t0
    texts = corpus_texts(embedder, SEEDS)[: args.limit]
    if not texts:
        raise SystemExit(f"no texts in {SEEDS}: set KBPACK_SEEDS to the seeds folder")
    tokens = [embedder.count_tokens(t) for t in texts]
    print(f"model     {embedder.identity.name} ({embedder.path.name}), threads {args.threads}")
    print(
        f"corpus    {len(texts)} chunks from {SEEDS}, tokens mean {statistics.mean(tokens):.0f}"
        f" max {max(tokens)}, chars mean {statistics.mean(map(len, texts)):.0f}"
    )
    print(f"load      {load * 1000:.0f} ms (kbpack Embedder, includes hashing the GGUF)")

    llm = bare_llama(embedder.path, args.threads)
    timers = {"kbpack": Timer(), "loop": Timer(), "batched": Timer()}
    runs: dict[str, Callable[[], object]] = {
        "kbpack": lambda: embedder.embed(texts),
        "loop": lambda: [llm.embed(t, normalize=True) for t in texts],
        "batched": lambda: llm.embed(texts, normalize=True),
    }
    for fn in runs.values():
        fn()  # warm-up
    results: dict[str, object] = {}
    for _ in range(args.repeat):  # interleaved, so a busy neighbour slows all alike
        for name, fn in runs.items():
            results[name] = timers[name].run(fn)
    n = len(texts)
    ours = np.asarray(results["kbpack"])
    bare = np.array(results["loop"], dtype=np.float32)
    agreement = float(np.min(np.sum(ours * bare, axis=1)))
    labels = {
        "kbpack": "kbpack Embedder (sorted by length, batched)",
        "loop": "bare llama-cpp-python, one embed() per text",
        "batched": "bare llama-cpp-python, embed(all texts)",
    }
    for name, timer in timers.items():
        wall, cpu = timer.per_item_ms(n)
        print(f"{name:<9} {wall:7.2f} ms/chunk wall {cpu:7.2f} ms/chunk cpu  {labels[name]}")
    (kw, kc), (lw, lc) = timers["kbpack"].per_item_ms(n), timers["loop"].per_item_ms(n)
    print(f"ratio     kbpack / bare loop = {kw / lw:.3f} wall, {kc / lc:.3f} cpu")
    print(f"agreement min cosine kbpack vs bare loop {agreement:.6f}")
    print(f"load avg  {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs at the end")
    if embedder.identity.name != "all-MiniLM-L6-v2":
        print("sentence-transformers: skipped (only for the default model)")
        return
    st = sentence_transformers(args.st_python, texts, args.threads, args.repeat)
    if not st:
        print("sentence-transformers: not installed (pass --st-python PATH to a Python with it)")
        return
    st_s = json.loads(st)["seconds"] / n * 1000
    st_c = json.loads(st)["cpu"] / n * 1000
    print(
        f"st        {st_s:7.2f} ms/chunk wall {st_c:7.2f} ms/chunk cpu  (sentence-transformers, torch "
        f"{json.loads(st)['torch']}, batch 32)"
    )
    print(f"ratio     kbpack / sentence-transformers = {kw / st_s:.3f} wall, {kc / st_c:.3f} cpu")


if __name__ == "__main__":
    main()
