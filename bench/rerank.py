"""What a reranker costs per query: hybrid search alone vs hybrid search + a cross-encoder over
the top N, from the same run, as a ratio.

    python bench/rerank.py [--top 25] [--queries 20] [--threads N]

No reranker's weights are available offline, so the cross-encoder is built here with the real
size of the common small ones (ms-marco-MiniLM-L-6-v2: 6 layers, 384 dims, 30k WordPiece
vocabulary): the default model's encoder weights plus a random classification head, converted
by kbpack's converter. Its scores are meaningless; its cost per (query, passage) pair is what a
MiniLM-sized cross-encoder costs through llama.cpp. The pack is the development corpus
(fixtures/eval/corpus) built with the default model; the queries are the first of
fixtures/eval/questions.jsonl. Medians of per-query wall time, interleaved (plain, reranked,
plain, ...) so machine load hits both arms alike.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import kbpack
from kbpack.model import convert_bert
from kbpack.model.cache import default_weights_dir
from kbpack.model.safetensors import read_safetensors
from kbpack.ops.build import BuildOptions, build
from kbpack.ops.evaluate import load_questions

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from tiny_gguf import write_safetensors  # noqa: E402 - the tests' safetensors writer


def minilm_cross_encoder(out: Path) -> Path:
    """all-MiniLM-L6-v2's encoder + a random pooler and one-label classifier, one token type."""
    src = default_weights_dir()
    folder = out.with_suffix(".src")
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    tensors = {
        "bert." + k.removeprefix("bert."): v
        for k, v in read_safetensors(src / "model.safetensors").items()
        if "position_ids" not in k and not k.removeprefix("bert.").startswith("pooler.")
    }
    hidden = tensors["bert.embeddings.word_embeddings.weight"].shape[1]
    types = "bert.embeddings.token_type_embeddings.weight"
    tensors[types] = tensors[types][:1]
    tensors["bert.pooler.dense.weight"] = rng.normal(0, 0.05, (hidden, hidden)).astype(np.float32)
    tensors["bert.pooler.dense.bias"] = np.zeros(hidden, np.float32)
    tensors["classifier.weight"] = rng.normal(0, 0.05, (1, hidden)).astype(np.float32)
    tensors["classifier.bias"] = np.zeros(1, np.float32)
    write_safetensors(folder / "model.safetensors", tensors)
    config = json.loads((src / "config.json").read_text())
    config.update(architectures=["BertForSequenceClassification"], type_vocab_size=1)
    config["id2label"] = {"0": "LABEL_0"}
    (folder / "config.json").write_text(json.dumps(config))
    shutil.copy(src / "vocab.txt", folder / "vocab.txt")
    for name in ("tokenizer_config.json", "sentence_bert_config.json"):
        if (src / name).exists():
            shutil.copy(src / name, folder / name)
    return convert_bert(folder, out, name="minilm-l6-cross-encoder-random-head", window=512)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--top", type=int, default=25, help="passages reranked per query")
    ap.add_argument("--queries", type=int, default=20)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kbpack-bench-rerank-"))
    try:
        pack = work / "dev.kbpack"
        build(BuildOptions(sources=[ROOT / "fixtures/eval/corpus"], out=pack, threads=args.threads))
        ce = minilm_cross_encoder(work / "ce.gguf")
        queries = [q.query for q in load_questions(ROOT / "fixtures/eval/questions.jsonl")]
        queries = queries[: args.queries]
        with (
            kbpack.open(pack, threads=args.threads) as plain,
            kbpack.open(pack, threads=args.threads, rerank=ce) as ranked,
        ):
            plain.search("warm up", k=5)
            ranked.search("warm up", k=5, rerank_top=args.top)
            t_plain: list[float] = []
            t_ranked: list[float] = []
            for q in queries:
                for p, times in ((plain, t_plain), (ranked, t_ranked)):
                    t = time.perf_counter()
                    p.search(q, k=5, refuse=False, rerank_top=args.top)
                    times.append(time.perf_counter() - t)
            rr = ranked.searcher.reranker
            assert rr is not None  # --rerank-top made the searcher load one
            a, b = statistics.median(t_plain), statistics.median(t_ranked)
            print(f"pack: {plain.n_chunks} chunks (fixtures/eval/corpus), {len(queries)} queries")
            print(f"reranker: {rr.identity.name}, {rr.window}-token window, {rr.threads} threads")
            print(f"hybrid search alone        median {a * 1000:8.1f} ms per query")
            print(f"hybrid + rerank top {args.top:<3}    median {b * 1000:8.1f} ms per query")
            print(f"ratio (reranked / alone)   {b / a:8.1f}x")
            print(f"reranking alone            {(b - a) * 1000 / args.top:8.1f} ms per passage")
            print(f"passages cut to the window {rr.truncated}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
