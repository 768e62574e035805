"""Short chunks (issue 32 item 5): the share of chunks under 40 characters, per corpus, from the
chunker alone (no embedding, nothing written).

    python bench/short_chunks.py CORPUS [CORPUS...] [--include GLOB] [--questions FILE]
    python bench/short_chunks.py fixtures/eval/corpus --questions fixtures/eval/questions.jsonl

Each corpus goes through what ``kbpack build`` does before embedding: discovery, extraction in
the worker, the repeated-block pass (banners and footers), and ``chunk_document`` with the
default model's token budget (its tokenizer counts; no vector is computed). Prints chunks,
chunks whose content is under 40 characters (stripped), how many of those are a heading alone
(the section's title, its number and markup allowed), the first few short ones, and with
``--questions`` the destroyed answers: needles no chunk holds whole (after NFKC and white
space collapsing), those absent from the extracted text counted apart.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

from kbpack.extract import discover, extract_all
from kbpack.extract.repeated import RepeatedBlocks
from kbpack.index.chunk import ChunkConfig, _is_heading, chunk_document
from kbpack.ops.evaluate import normalize
from kbpack.text.document import Document

SHORT = 40


def documents(corpus: Path, include: list[str]) -> list[Document]:
    found = discover([corpus], include, (), False)
    docs = RepeatedBlocks()(extract_all(found.candidates))
    return [d for d in docs if d.status == "ok"]


def measure(corpus: Path, include: list[str], needles: list[str], show: int) -> dict[str, object]:
    from kbpack.model.embedder import Embedder

    embedder = Embedder(None)
    t0 = time.perf_counter()
    docs = documents(corpus, include)
    config = ChunkConfig(window=embedder.window)
    count = embedder.count_document_tokens
    chunks = 0
    short: list[tuple[str, str, bool]] = []
    texts: list[str] = []
    for doc in docs:
        for c in chunk_document(doc, count, config).chunks:
            chunks += 1
            content = doc.text[c.start : c.end]
            texts.append(normalize(content))
            if len(content.strip()) < SHORT:
                lone = _is_heading(content, doc.sections[c.section].title)
                short.append((doc.name, content, lone))
    out: dict[str, object] = {
        "corpus": str(corpus),
        "documents": len(docs),
        "chunks": chunks,
        "short": len(short),
        "short_share": round(len(short) / max(1, chunks), 4),
        "short_headings": sum(lone for _, _, lone in short),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    if needles:
        full = [normalize(d.text) for d in docs]
        absent = [n for n in needles if not any(normalize(n) in t for t in full)]
        lost = [n for n in needles if n not in absent and not any(normalize(n) in t for t in texts)]
        out |= {"needles": len(needles), "destroyed": len(lost), "not_in_text": len(absent)}
        out["destroyed_needles"] = lost
    kinds = Counter(" ".join(content.split())[:SHORT] for _, content, _ in short)
    out["most_common"] = kinds.most_common(show)
    out["examples"] = [(name, content, lone) for name, content, lone in short[:show]]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus", type=Path, nargs="+")
    ap.add_argument("--include", action="append", default=[], help="only names matching GLOB")
    ap.add_argument("--questions", type=Path, default=None, help="a questions.jsonl (needles)")
    ap.add_argument("--show", type=int, default=8, help="short chunks to print per corpus")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    needles: list[str] = []
    if args.questions is not None:
        lines = args.questions.read_text(encoding="utf-8").splitlines()
        needles = sorted({json.loads(line)["needle"] for line in lines if line.strip()})
    for corpus in args.corpus:
        r = measure(corpus, args.include, needles, args.show)
        if args.json:
            print(json.dumps(r, ensure_ascii=False))
            continue
        print(
            f"{r['corpus']}: {r['documents']} documents, {r['chunks']} chunks, "
            f"{r['short']} under {SHORT} characters ({r['short_share']:.2%}), "
            f"{r['short_headings']} of them a heading alone; {r['seconds']} s"
        )
        if "destroyed" in r:
            print(
                f"  destroyed answers {r['destroyed']} of {r['needles']} "
                f"({r['not_in_text']} needles not in the extracted text)"
            )
            for n in r["destroyed_needles"]:  # type: ignore[attr-defined]
                print(f"    destroyed: {n}")
        for text, n in r["most_common"]:  # type: ignore[attr-defined]
            print(f"  {n:4} x {text!r}")
        for name, content, lone in r["examples"]:  # type: ignore[attr-defined]
            print(f"    e.g. {name}: {content.strip()!r}{' (heading)' if lone else ''}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
