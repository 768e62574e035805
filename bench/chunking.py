"""Chunking benchmark: destroyed answers of kbpack's chunker vs a blind 512-character cutter.

A needle (a literal sentence of the corpus that answers a question) is *destroyed* when no
chunk's content contains it whole, compared after NFKC and whitespace collapsing: no retriever
can return it then. Also reported: chunk count, the token-count distribution of embedded texts,
the share of embedded tokens spent on contextual headers, and tokenizer calls per chunk.

    python bench/chunking.py                       # fixtures/eval with the default model
    python bench/chunking.py --corpus ../shared/seeds --questions none
    python bench/chunking.py --json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import unicodedata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kbpack.index.chunk import ChunkConfig, chunk_document, embedded_text  # noqa: E402
from kbpack.text.document import Document  # noqa: E402

BLIND_CHARS = 512


def norm(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).split())


def extract_corpus(corpus: Path) -> list[Document]:
    try:
        from kbpack.extract import extract_file  # type: ignore[attr-defined]
    except ImportError:
        from kbpack.extract.file import extract_file
    from kbpack.extract.common import kind_of

    docs = []
    for path in sorted(p for p in corpus.rglob("*") if p.is_file()):
        if kind_of(path) is None:
            continue
        doc = extract_file(path, path.relative_to(corpus).as_posix())
        if doc.status != "ok":
            print(f"skipped {doc.name}: {doc.reason}", file=sys.stderr)
            continue
        docs.append(doc)
    return docs


def quantiles(values: list[int]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)
    return {
        "min": ordered[0],
        "median": statistics.median(ordered),
        "p95": ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))],
        "max": ordered[-1],
    }


def destroyed(
    needles: list[str], texts_by_doc: dict[str, list[str]], full: dict[str, str]
) -> dict[str, Any]:
    """Needles no chunk contains whole (needles absent from the extracted text are counted apart)."""
    missing, lost = [], []
    for needle in needles:
        n = norm(needle)
        if not any(n in t for t in full.values()):
            missing.append(needle)
        elif not any(n in norm(c) for chunks in texts_by_doc.values() for c in chunks):
            lost.append(needle)
    return {
        "destroyed": len(lost),
        "not_in_extracted_text": len(missing),
        "destroyed_needles": lost,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, default=ROOT / "fixtures/eval/corpus")
    ap.add_argument("--questions", default=str(ROOT / "fixtures/eval/questions.jsonl"))
    ap.add_argument("--model", type=Path, default=None, help="GGUF (default: all-MiniLM-L6-v2)")
    ap.add_argument("--window", type=int, default=None, help="token budget (default: model's)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    from kbpack.model.embedder import Embedder

    embedder = Embedder(args.model)
    window = args.window or embedder.window
    calls = 0

    def count(text: str) -> int:
        nonlocal calls
        calls += 1
        return embedder.count_tokens(text)

    t0 = time.perf_counter()
    docs = extract_corpus(args.corpus)
    t_extract = time.perf_counter() - t0

    ours: dict[str, list[str]] = {}
    tokens: list[int] = []
    header_tokens = 0
    problems: list[str] = []
    t0 = time.perf_counter()
    results = {doc.name: chunk_document(doc, count, ChunkConfig(window=window)) for doc in docs}
    t_chunk = time.perf_counter() - t0
    chunk_calls = calls
    for doc in docs:
        result = results[doc.name]
        problems += result.problems
        ours[doc.name] = [doc.text[c.start : c.end] for c in result.chunks]
        for c in result.chunks:
            tokens.append(c.tokens)
            content_only = embedder.count_tokens(embedded_text("", doc.text[c.start : c.end]))
            header_tokens += c.tokens - content_only
    blind = {
        d.name: [d.text[i : i + BLIND_CHARS] for i in range(0, len(d.text), BLIND_CHARS)]
        for d in docs
    }
    blind_tokens = [embedder.count_tokens(c) for cs in blind.values() for c in cs]

    report: dict[str, Any] = {
        "corpus": str(args.corpus),
        "documents": len(docs),
        "characters": sum(len(d.text) for d in docs),
        "sections": sum(len(d.sections) for d in docs),
        "window": window,
        "extract_s": round(t_extract, 2),
        "ours": {
            "chunks": len(tokens),
            "tokens": quantiles(tokens),
            "over_window": sum(t > window for t in tokens),
            "header_token_share": round(header_tokens / max(1, sum(tokens)), 3),
            "problems": len(problems),
            "chunk_s": round(t_chunk, 2),
            "tokenizer_calls_per_chunk": round(chunk_calls / max(1, len(tokens)), 2),
        },
        "blind512": {
            "chunks": len(blind_tokens),
            "tokens": quantiles(blind_tokens),
            "over_window": sum(t > window for t in blind_tokens),
        },
    }
    if args.questions != "none":
        lines = Path(args.questions).read_text(encoding="utf-8").splitlines()
        needles = sorted({json.loads(line)["needle"] for line in lines if line.strip()})
        full = {d.name: norm(d.text) for d in docs}
        report["needles"] = len(needles)
        report["ours"].update(destroyed(needles, ours, full))
        report["blind512"].update(destroyed(needles, blind, full))
    if args.json:
        print(json.dumps(report, ensure_ascii=False, indent=2))
    else:
        print_report(report, problems)
    return 0


def print_report(r: dict[str, Any], problems: list[str]) -> None:
    print(
        f"{r['documents']} documents, {r['characters']:,} characters, {r['sections']} sections; window {r['window']} tokens"
    )
    for name in ("ours", "blind512"):
        s = r[name]
        q = s["tokens"]
        line = f"{name:9} {s['chunks']:5} chunks  tokens min/median/p95/max {q['min']}/{q['median']}/{q['p95']}/{q['max']}  over window {s['over_window']}"
        if "destroyed" in s:
            line += f"  destroyed {s['destroyed']}/{r['needles']}"
            if s["not_in_extracted_text"]:
                line += f" ({s['not_in_extracted_text']} needles not in the extracted text)"
        print(line)
    o = r["ours"]
    print(
        f"header share of embedded tokens {o['header_token_share']:.1%}; chunking {o['chunk_s']} s, {o['tokenizer_calls_per_chunk']} tokenizer calls per chunk; {o['problems']} problems"
    )
    for p in problems[:10]:
        print("  problem:", p)
    for n in o.get("destroyed_needles", []):
        print("  destroyed by ours:", n)


if __name__ == "__main__":
    raise SystemExit(main())
