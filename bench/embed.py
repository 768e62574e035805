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

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kbpack.embed import Embedder, available_threads  # noqa: E402

SEEDS = ROOT.parent / "shared" / "seeds"


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


def best_of(repeat: int, fn: Callable[[], object]) -> tuple[float, object]:
    """Median wall time of ``repeat`` runs (after one warm-up) and the last result."""
    result = fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def bare_llama(model: Path, texts: list[str], threads: int, repeat: int) -> tuple[float, np.ndarray]:
    """What a user would write: one Llama, one embed() call per text."""
    import llama_cpp

    llm = llama_cpp.Llama(
        model_path=str(model),
        embedding=True,
        n_ctx=512,
        n_batch=512,
        n_ubatch=512,
        n_threads=threads,
        n_threads_batch=threads,
        verbose=False,
    )
    seconds, vectors = best_of(repeat, lambda: [llm.embed(t, normalize=True) for t in texts])
    return seconds, np.array(vectors, dtype=np.float32)


ST_SCRIPT = """
import json, sys, time, statistics
from sentence_transformers import SentenceTransformer
model_dir, threads, repeat = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
import torch; torch.set_num_threads(threads)
texts = json.load(sys.stdin)
m = SentenceTransformer(model_dir, device="cpu")
m.encode(texts, batch_size=32, normalize_embeddings=True)
times = []
for _ in range(repeat):
    t0 = time.perf_counter(); m.encode(texts, batch_size=32, normalize_embeddings=True)
    times.append(time.perf_counter() - t0)
print(json.dumps({"seconds": statistics.median(times), "torch": torch.__version__}))
"""


def sentence_transformers(python: str | None, texts: list[str], threads: int, repeat: int) -> str:
    from kbpack.model.cache import default_weights_dir

    candidates = [python] if python else [sys.executable, "/tmp/torchvenv/bin/python"]
    for exe in candidates:
        if not exe or not Path(exe).exists():
            continue
        env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error")
        args = [exe, "-c", ST_SCRIPT, str(default_weights_dir()), str(threads), str(repeat)]
        done = subprocess.run(args, input=json.dumps(texts), capture_output=True, text=True, env=env)
        if done.returncode == 0:
            return done.stdout.strip().splitlines()[-1]
    return ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, help="GGUF (default: the default model)")
    parser.add_argument("--threads", type=int, default=available_threads())
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--st-python", help="a Python with sentence-transformers and torch")
    args = parser.parse_args()

    t0 = time.perf_counter()
    embedder = Embedder(args.model, threads=args.threads)
    load = time.perf_counter() - t0
    texts = corpus_texts(embedder, SEEDS)
    tokens = [embedder.count_tokens(t) for t in texts]
    print(f"model     {embedder.identity.name} ({embedder.path.name}), threads {args.threads}")
    print(f"corpus    {len(texts)} chunks from {SEEDS}, tokens mean {statistics.mean(tokens):.0f}"
          f" max {max(tokens)}, chars mean {statistics.mean(map(len, texts)):.0f}")
    print(f"load      {load * 1000:.0f} ms (kbpack Embedder, includes hashing the GGUF)")

    ours_s, ours = best_of(args.repeat, lambda: embedder.embed(texts))
    bare_s, bare = bare_llama(embedder.path, texts, args.threads, args.repeat)
    n = len(texts)
    agreement = float(np.min(np.sum(np.asarray(ours) * bare, axis=1)))
    print(f"kbpack    {ours_s / n * 1000:7.2f} ms/chunk  (sorted by length, batched)")
    print(f"bare      {bare_s / n * 1000:7.2f} ms/chunk  (llama-cpp-python, one embed() per text)")
    print(f"ratio     kbpack / bare = {ours_s / bare_s:.3f}   (min cosine between them {agreement:.6f})")
    if embedder.identity.name != "all-MiniLM-L6-v2":
        print("sentence-transformers: skipped (only for the default model)")
        return
    st = sentence_transformers(args.st_python, texts, args.threads, args.repeat)
    if not st:
        print("sentence-transformers: not installed (pass --st-python PATH to a Python with it)")
        return
    st_s = json.loads(st)["seconds"]
    print(f"st        {st_s / n * 1000:7.2f} ms/chunk  (sentence-transformers, torch "
          f"{json.loads(st)['torch']}, batch 32)")
    print(f"ratio     kbpack / sentence-transformers = {ours_s / st_s:.3f}")


if __name__ == "__main__":
    main()
