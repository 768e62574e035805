"""How the Embedder's batching affects throughput on what a build embeds: chunk texts and
sentence-piece texts (120-600 characters + header) of a real corpus.

    python bench/embed_batching.py                         # fixtures/eval/corpus, 2 sizes
    python bench/embed_batching.py --tokens 128 256 512 --repeat 3 --limit 300

The texts are made the way ``kbpack build`` makes them (kbpack's extractor, chunker and piece
cutter, the default model's tokenizer). Each setting is one Embedder whose tokens per
``llama_decode`` call (``kbpack.model.embedder.BATCH_TOKENS``) is the value tried; the settings run
interleaved, ``--repeat`` rounds, and the median per text and per token is printed, wall and
CPU (CPU time: on a shared machine wall time mostly measures the neighbours). Vectors of
every setting are compared with the first (min cosine). A script: it asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import kbpack.model.embedder as E  # noqa: E402
from kbpack.extract import Limits, discover, extract_all  # noqa: E402
from kbpack.index.chunk import ChunkConfig, chunk_document, embedded_text, header, section_path  # noqa: E402
from kbpack.index.pieces import piece_texts, pieces_of  # noqa: E402


def build_texts(corpus: Path, embedder: E.Embedder) -> tuple[list[str], list[str]]:
    """(chunk texts, piece texts) as ``kbpack build --pieces`` embeds them."""
    found = discover([corpus], (), (), False)
    config = ChunkConfig(window=embedder.window, max_chars=None)
    chunks_out: list[str] = []
    pieces_out: list[str] = []
    for doc in extract_all(found.candidates, Limits()):
        if doc.status != "ok":
            continue
        chunks = chunk_document(doc, embedder.count_document_tokens, config).chunks
        heads = [header(doc.title, section_path(doc, c.section)) for c in chunks]
        chunks_out += [
            embedded_text(h, doc.text[c.start : c.end]) for h, c in zip(heads, chunks, strict=True)
        ]
        pieces = pieces_of(doc.text, [(c.start, c.end) for c in chunks])
        pieces_out += piece_texts(doc.text, heads, pieces)
    return chunks_out, pieces_out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", type=Path, default=ROOT / "fixtures" / "eval" / "corpus")
    ap.add_argument("--model", type=Path, help="GGUF (default: the default model)")
    ap.add_argument("--tokens", type=int, nargs="+", default=[256, 512])
    ap.add_argument("--threads", type=int, default=E.available_threads())
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--limit", type=int, help="only the first N texts of each kind")
    args = ap.parse_args()

    setups = {}
    for n in args.tokens:
        E.BATCH_TOKENS = n  # read by Embedder.__init__ (n_ctx and the batch budget)
        setups[n] = E.Embedder(args.model, threads=args.threads)
    first = setups[args.tokens[0]]
    chunks, pieces = build_texts(args.corpus, first)
    kinds = {"chunks": chunks[: args.limit], "pieces": pieces[: args.limit]}
    print(f"model {first.identity.name}, threads {args.threads}, corpus {args.corpus}")
    for kind, texts in kinds.items():
        tokens = [first.count_document_tokens(t) for t in texts]
        chars = [len(t) for t in texts]
        print(
            f"{kind}: {len(texts)} texts, tokens mean {statistics.mean(tokens):.0f} "
            f"(max {max(tokens)}), chars mean {statistics.mean(chars):.0f}, "
            f"{sum(tokens)} tokens"
        )
    for kind, texts in kinds.items():
        n_tokens = sum(first.count_document_tokens(t) for t in texts)
        wall: dict[int, list[float]] = {n: [] for n in setups}
        cpu: dict[int, list[float]] = {n: [] for n in setups}
        vectors: dict[int, np.ndarray] = {}
        for emb in setups.values():
            emb.embed_documents(texts[:8])  # warm-up
        for r in range(args.repeat):
            order = list(setups) if r % 2 == 0 else list(reversed(setups))
            for n in order:
                t0, c0 = time.perf_counter(), time.process_time()
                vectors[n] = setups[n].embed_documents(texts)
                wall[n].append(time.perf_counter() - t0)
                cpu[n].append(time.process_time() - c0)
        base = args.tokens[0]
        for n in setups:
            w, c = statistics.median(wall[n]), statistics.median(cpu[n])
            agree = float(np.min(np.sum(vectors[n] * vectors[base], axis=1)))
            print(
                f"  {kind:<6} batch {n:>4} tokens: {1000 * w / len(texts):6.2f} ms/text wall "
                f"{1000 * c / len(texts):6.2f} cpu, {1e6 * c / n_tokens:6.1f} us/token cpu, "
                f"cpu vs {base}: {c / statistics.median(cpu[base]):.3f}, min cosine {agree:.6f}"
            )
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs at the end")


if __name__ == "__main__":
    main()
