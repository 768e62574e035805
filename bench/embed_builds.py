"""Embedding speed and accuracy across llama.cpp builds and model types, with
sentence-transformers (torch) measured in the same run.

    python bench/embed_builds.py --st-python /tmp/st/bin/python
    python bench/embed_builds.py --lib dl=/tmp/dl/site/llama_cpp/lib --quant q8_0 bf16
    python bench/embed_builds.py --quant f32 --torch-threads 1 --knob 't1={"threads": 1}' \
        --knob 'nofa={"flash": false}' --knob 'b128={"batch": 128}' --st-python ...

Engines: kbpack's ``Embedder`` on the default model (F16 GGUF) and on quantised copies of it
(``--quant``: made with llama.cpp's own ``llama_model_quantize``), each with the installed
llama.cpp and with every other build given by ``--lib NAME=DIR`` (a llama-cpp-python ``lib``
folder of the same version, loaded through ``LLAMA_CPP_LIB_PATH``); and sentence-transformers
on the same weights (``--st-python``: a Python that has it; ``--torch-threads`` adds thread
counts). ``--knob`` adds engines on the installed build with other settings (flash attention,
tokens per llama_decode, threads, model type); every engine's ratio is to torch at the same
thread count. Each engine runs in a fresh
process per round (so a build that aborts is reported, not fatal), the engines alternate
through ``--rounds`` rounds, and each process times one pass over all texts after a warm-up:
median wall and CPU ms per text. The texts are bench/embed.py's (seed paragraphs merged up to
512 characters, cut to the 256-token window). Accuracy: cosine of each engine's vectors with
a numpy forward pass of the source safetensors weights (tests/bert_reference.py), min and
mean. A script: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

from kbpack.model.embedder import Embedder, available_threads  # noqa: E402

QUANT_TYPES = {"q8_0": 7, "bf16": 32, "f32": 0}  # llama.cpp's LLAMA_FTYPE_* values

_KBPACK_CHILD = """
import json, sys, time
from pathlib import Path
import numpy as np
from kbpack.model.embedder import Embedder
import llama_cpp
from kbpack.model.llama_backend import load_cpu_backend
import kbpack.model.embedder as kbe
model, threads, knobs = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
texts_file, vec_out = sys.argv[4], sys.argv[5]
kbe.FLASH_ATTENTION = knobs.get("flash", kbe.FLASH_ATTENTION)
kbe.BATCH_TOKENS = knobs.get("batch", kbe.BATCH_TOKENS)
texts = json.loads(Path(texts_file).read_text())
e = Embedder(Path(model), threads=threads)
e.embed(texts[:8])
t0, c0 = time.perf_counter(), time.process_time()
v = e.embed(texts)
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
np.save(vec_out, v)
variant = load_cpu_backend(llama_cpp).variant or "linked"
print(json.dumps({"wall": wall, "cpu": cpu,
                  "system": variant + ": " + llama_cpp.llama_print_system_info().decode()}))
"""

_ST_CHILD = """
import json, sys, time
from pathlib import Path
import numpy as np
import torch
from sentence_transformers import SentenceTransformer
folder, threads, texts_file, vec_out = sys.argv[1], int(sys.argv[2]), sys.argv[4], sys.argv[5]
torch.set_num_threads(threads)
texts = json.loads(Path(texts_file).read_text())
m = SentenceTransformer(folder, device="cpu")
m.encode(texts[:8], batch_size=32, normalize_embeddings=True)
t0, c0 = time.perf_counter(), time.process_time()
v = m.encode(texts, batch_size=32, normalize_embeddings=True)
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
np.save(vec_out, np.asarray(v, dtype=np.float32))
print(json.dumps({"wall": wall, "cpu": cpu, "system": "torch " + torch.__version__}))
"""


def quantize(src: Path, kind: str, out_dir: Path) -> Path:
    """``src`` (F16 GGUF) as llama.cpp quantises it to ``kind``, cached in ``out_dir``."""
    import llama_cpp

    out = out_dir / f"{src.stem}-{kind}.gguf"
    if not out.exists():
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = QUANT_TYPES[kind]
        params.nthread = 1
        tmp = out.with_suffix(".tmp")
        rc = llama_cpp.llama_model_quantize(str(src).encode(), str(tmp).encode(), params)
        if rc != 0:
            raise SystemExit(f"llama_model_quantize {kind} failed ({rc})")
        tmp.replace(out)
    return out


def run_child(args: list[str], env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=1800)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["?"])[-1][:200]
        return {"error": f"exit {done.returncode}: {tail}"}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    from embed import SEEDS, corpus_texts  # bench/embed.py

    from kbpack.model.cache import default_weights_dir

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", action="append", default=[], help="NAME=DIR of another build")
    ap.add_argument("--quant", nargs="*", default=[], choices=sorted(QUANT_TYPES))
    ap.add_argument("--st-python", help="a Python with sentence-transformers and torch")
    ap.add_argument("--threads", type=int, default=available_threads())
    ap.add_argument(
        "--torch-threads", type=int, nargs="*", default=[], help="more torch thread counts"
    )
    ap.add_argument(
        "--knob",
        action="append",
        default=[],
        help='more engines on the installed build: NAME=JSON, keys "flash" (bool), "batch" '
        '(tokens per llama_decode), "threads", "model" (f16 or a --quant type); '
        "e.g. --knob 'nofa={\"flash\": false}'",
    )
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--limit", type=int, help="only the first N texts")
    ap.add_argument("--work", type=Path, default=ROOT / "out" / "bench" / "embed_builds")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)

    embedder = Embedder(None, threads=1)
    texts = corpus_texts(embedder, SEEDS)[: args.limit]
    if not texts:
        raise SystemExit(f"no texts in {SEEDS}: set KBPACK_SEEDS to the seeds folder")
    ids = [embedder.fit(embedder.tokenize(t)) for t in texts]
    models = {"f16": embedder.path} | {q: quantize(embedder.path, q, args.work) for q in args.quant}
    embedder.close()
    libs: dict[str, str | None] = {"installed": None}
    for spec in args.lib:
        name, _, folder = spec.partition("=")
        libs[name] = str(Path(folder).resolve())

    from bert_reference import BertReference  # tests/bert_reference.py

    weights = default_weights_dir()
    reference = BertReference(weights)
    want = np.stack([reference.sentence_vector(i, "mean") for i in ids])

    # name -> (command, environment, threads); each engine is compared with torch at its threads
    engines: dict[str, tuple[list[str], dict[str, str], int]] = {}
    texts_file = args.work / "texts.json"
    texts_file.write_text(json.dumps(texts))
    for lib_name, lib_dir in libs.items():
        env = dict(os.environ)
        env.pop("LLAMA_CPP_LIB_PATH", None)
        if lib_dir:
            env["LLAMA_CPP_LIB_PATH"] = lib_dir
        for model_name, model in models.items():
            name = f"kbpack {model_name} ({lib_name})"
            cmd = [sys.executable, "-c", _KBPACK_CHILD, str(model), str(args.threads), "{}"]
            engines[name] = (cmd, env, args.threads)
    for spec in args.knob:
        name, _, raw = spec.partition("=")
        knobs = json.loads(raw)
        threads = int(knobs.pop("threads", args.threads))
        env = {k: v for k, v in os.environ.items() if k != "LLAMA_CPP_LIB_PATH"}
        model = str(models[knobs.pop("model", "f16")])
        cmd = [sys.executable, "-c", _KBPACK_CHILD, model, str(threads), json.dumps(knobs)]
        engines[f"kbpack ({name})"] = (cmd, env, threads)
    torch_engines: dict[int, str] = {}
    if args.st_python:
        env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error")
        for threads in dict.fromkeys([args.threads, *args.torch_threads]):
            cmd = [args.st_python, "-c", _ST_CHILD, str(weights), str(threads), "{}"]
            name = f"sentence-transformers ({threads} threads)"
            engines[name] = (cmd, env, threads)
            torch_engines[threads] = name

    results: dict[str, list[dict[str, Any]]] = {name: [] for name in engines}
    vectors: dict[str, np.ndarray] = {}
    loads: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = list(engines) if r % 2 == 0 else list(reversed(engines))
            for name in order:
                cmd, env, _ = engines[name]
                vec_out = str(Path(tmp) / f"{len(vectors)}-{r}.npy")
                got = run_child([*cmd, str(texts_file), vec_out], env)
                results[name].append(got)
                loads.append(os.getloadavg()[0])
                if "error" not in got:
                    vectors[name] = np.load(vec_out)
                print(
                    f"round {r + 1} {name}: {got.get('error') or round(got['cpu'], 2)}", flush=True
                )

    n = len(texts)
    tokens = [len(i) for i in ids]
    print(
        f"\n{n} texts, tokens mean {statistics.mean(tokens):.0f} max {max(tokens)}, "
        f"{args.rounds} rounds, load average {min(loads):.1f}-{max(loads):.1f} "
        f"(median {statistics.median(loads):.1f})"
    )

    def median_ms(name: str, key: str) -> float | None:
        ok = [x[key] for x in results.get(name, []) if "error" not in x]
        return statistics.median(ok) / n * 1000 if ok else None

    print(
        f"{'engine':<40} {'thr':>3} {'wall ms':>8} {'cpu ms':>8} {'vs st wall':>10} "
        f"{'vs st cpu':>10} {'min cos':>9} {'mean cos':>9}"
    )
    for name, runs in results.items():
        threads = engines[name][2]
        wall, cpu = median_ms(name, "wall"), median_ms(name, "cpu")
        if wall is None or cpu is None:
            print(f"{name:<40} {threads:>3} {runs[0]['error']}")
            continue
        peer = torch_engines.get(threads, "")
        st_wall, st_cpu = median_ms(peer, "wall"), median_ms(peer, "cpu")
        ratio_w = f"{wall / st_wall:.3f}" if st_wall else "-"
        ratio_c = f"{cpu / st_cpu:.3f}" if st_cpu else "-"
        cos = np.sum(vectors[name] * want, axis=1)
        print(
            f"{name:<40} {threads:>3} {wall:8.2f} {cpu:8.2f} {ratio_w:>10} {ratio_c:>10} "
            f"{cos.min():9.6f} {cos.mean():9.6f}"
        )
    for name, runs in results.items():
        ok = [x for x in runs if "error" not in x]
        if ok and name.startswith("kbpack f16"):
            print(f"{name}: {ok[0]['system'].strip()}")


if __name__ == "__main__":
    main()
