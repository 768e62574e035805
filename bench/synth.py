"""A large, realistic synthetic corpus, and synthetic-vector packs built from it.

Text: sentences and headings of real documents (fixtures/eval/corpus, English technical
manuals, and ../shared/seeds, Italian prose) recombined at random (seeded) into Markdown
documents with a title, sections and subsections, paragraphs of 2-6 sentences, and now and
then an identifier or code (``E-4821``, ``0x8007a3f1``, ``cfg_cache_ttl``) so that the
vocabulary keeps growing with the corpus, as real corpora do (Heaps' law), instead of
saturating at the source vocabulary. Documents go through kbpack's own Markdown structure code
(canonicalize, markdown_headings, build_sections) and kbpack's chunker.

Packs (``pack`` subcommand): the build pipeline minus the model -- chunk, BM25 postings, the
atomic PackWriter -- with random unit vectors of ``--dims`` in place of embeddings, stamped with
the default model's identity so that ``kbpack query`` embeds queries with the real model. The
vectors carry no meaning (dense results are noise), but every byte the build and the reader
move is real: scan cost, pack size and memory do not depend on the vectors' values.

    python bench/synth.py corpus --docs 200 -o out/bench/synth-md       # Markdown files
    python bench/synth.py pack --chunks 100000 -o out/bench/synth-100k.kbpack --json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import resource
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kbpack.extract.markdown import markdown_headings  # noqa: E402
from kbpack.extract.structure import build_sections  # noqa: E402
from kbpack.index.chunk import ChunkConfig, chunk_document  # noqa: E402
from kbpack.text.canonical import canonicalize  # noqa: E402
from kbpack.text.document import Document  # noqa: E402

SOURCES = (ROOT / "fixtures" / "eval" / "corpus", ROOT.parent / "shared" / "seeds")
# Content limit without a model: ~1000 characters is about the default model's 256-token
# window; the fixtures build averages ~150 tokens (~600 characters) per chunk, and so does this.
CHUNK_CHARS = 1000
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'(])")
_CODE_FORMS = ("E-{n}", "0x{h}", "cfg_{w}_{v}", "{W}_{V}", "v{a}.{b}.{c}", "ERR{n}")


class Pool:
    """Sentences and headings of the real source documents."""

    def __init__(self, sources: tuple[Path, ...] = SOURCES) -> None:
        from kbpack.extract.common import kind_of
        from kbpack.extract.file import extract_file

        self.sentences: list[str] = []
        self.headings: list[str] = []
        words: set[str] = set()
        for root in sources:
            if not root.is_dir():
                continue
            for path in sorted(p for p in root.rglob("*") if p.is_file()):
                if kind_of(path) is None:
                    continue
                doc = extract_file(path, path.name)
                if doc.status != "ok":
                    continue
                self.headings += [s.title for s in doc.sections[1:] if 3 <= len(s.title) <= 80]
                for para in doc.text.split("\n\n"):
                    flat = " ".join(para.split())
                    if flat.startswith(("#", "|", "```", "    ")):
                        continue
                    for s in _SENTENCE.split(flat):
                        if 30 <= len(s) <= 400 and s[-1] in ".!?:":
                            self.sentences.append(s)
                            words.update(w.lower() for w in re.findall(r"[A-Za-z]{4,}", s))
        if not self.sentences:
            raise SystemExit(
                "synth: no source sentences found under " + ", ".join(map(str, sources))
            )
        self.words = sorted(words)


class Generator:
    """Documents of recombined real sentences, reproducible from ``seed``."""

    def __init__(
        self, pool: Pool, seed: int = 7, code_rate: float = 0.08, prefix: str = "synth"
    ) -> None:
        self.pool = pool
        self.prefix = prefix  # folder of the document names (packs to merge need distinct ones)
        self.rng = random.Random(seed)
        self.code_rate = code_rate
        self.n = 0

    def _code(self) -> str:
        r = self.rng
        form = r.choice(_CODE_FORMS)
        w1, w2 = r.choice(self.pool.words), r.choice(self.pool.words)
        return form.format(
            n=r.randint(1000, 99999),
            h=f"{r.getrandbits(32):08x}",
            w=w1,
            v=w2,
            W=w1.upper(),
            V=w2.upper(),
            a=r.randint(0, 9),
            b=r.randint(0, 40),
            c=r.randint(0, 99),
        )

    def _sentence(self) -> str:
        s = self.rng.choice(self.pool.sentences)
        if self.rng.random() < self.code_rate:
            words = s.split(" ")
            at = self.rng.randrange(len(words))
            words.insert(at, self._code())
            s = " ".join(words)
        return s

    def _paragraph(self) -> str:
        return " ".join(self._sentence() for _ in range(self.rng.randint(2, 6)))

    def markdown(self) -> tuple[str, str]:
        """(name, Markdown text) of the next document."""
        r = self.rng
        self.n += 1
        title = f"{r.choice(self.pool.headings)} ({self.n})"
        parts = [f"# {title}", self._paragraph()]
        for _ in range(r.randint(2, 7)):
            parts.append(f"## {r.choice(self.pool.headings)}")
            parts += [self._paragraph() for _ in range(r.randint(1, 4))]
            for _ in range(r.choice((0, 0, 1, 2))):
                parts.append(f"### {r.choice(self.pool.headings)}")
                parts += [self._paragraph() for _ in range(r.randint(1, 3))]
        return f"{self.prefix}/{self.n:07d}.md", "\n\n".join(parts) + "\n"

    def document(self) -> Document:
        """The next document as kbpack's Markdown extractor makes it (without a worker)."""
        name, md = self.markdown()
        text, replaced = canonicalize(md)
        headings = markdown_headings(text)
        title = next((h.title for h in headings if h.level == 1), name)
        raw = md.encode("utf-8")
        return Document(
            name=name,
            source_path=name,
            media_type="text/markdown",
            source_size=len(raw),
            source_sha256=hashlib.sha256(raw).hexdigest(),
            title=title,
            extractor="md/kbpack",
            extractor_version=1,
            text=text,
            sections=build_sections(len(text), title, headings),
            decoding="utf-8",
            replaced=replaced,
        )

    def documents(self) -> Iterator[Document]:
        while True:
            yield self.document()


def default_identity() -> dict[str, Any]:
    """The default model's identity stamp (read from the GGUF header; llama.cpp not loaded)."""
    from kbpack.model.embedder import default_model_path
    from kbpack.model.identity import identify_gguf

    return identify_gguf(default_model_path()).as_dict()


def build_pack(
    out: Path,
    n_chunks: int,
    dims: int = 384,
    seed: int = 7,
    identity: dict[str, Any] | None = None,
    prefix: str = "synth",
    pieces: bool = False,
) -> dict[str, Any]:
    """Write a pack of ``n_chunks`` synthetic chunks with random unit vectors; return figures.

    The loop is build.build_from's, minus the model: chunk each document, append it to the
    PackWriter with its vectors, feed the chunks' content to the BM25 PostingsBuilder. With
    ``pieces``, each chunk is cut into sentence pieces by kbpack's own rule (real offsets, as
    ``build --pieces`` cuts them) and each piece gets a random unit vector too.
    """
    from kbpack.index.pieces import pieces_of
    from kbpack.index.postings import PostingsBuilder
    from kbpack.pack.write import PackWriter

    t0 = time.perf_counter()
    gen = Generator(Pool(), seed, prefix=prefix)
    identity = identity or (default_identity() if dims == 384 else None)
    if identity is None:
        raise SystemExit(f"synth: no model identity for {dims} dims; use --dims 384")
    identity = dict(identity, dims=dims)
    rng = np.random.default_rng(seed)
    config = ChunkConfig(window=None, max_chars=CHUNK_CHARS)
    seconds = {"sources": time.perf_counter() - t0, "generate": 0.0, "chunk": 0.0}
    seconds |= {"vectors": 0.0, "add": 0.0, "index": 0.0}
    postings = PostingsBuilder()
    text_chars = 0
    docs = 0
    n_pieces = 0
    with PackWriter(out, model=identity, dims=dims, pieces=pieces) as w:
        while w.n_chunks < n_chunks:
            t = time.perf_counter()
            doc = gen.document()
            t1 = time.perf_counter()
            chunks = chunk_document(doc, None, config).chunks[: n_chunks - w.n_chunks]
            t2 = time.perf_counter()
            v = rng.standard_normal((len(chunks), dims), dtype=np.float32)
            v /= np.linalg.norm(v, axis=1, keepdims=True)
            cut = pieces_of(doc.text, [(c.start, c.end) for c in chunks]) if pieces else []
            pv = rng.standard_normal((len(cut), dims), dtype=np.float32)
            pv /= np.linalg.norm(pv, axis=1, keepdims=True)
            n_pieces += len(cut)
            t3 = time.perf_counter()
            first = w.n_chunks
            if pieces:
                w.add_document(doc, chunks, v, cut, pv)
            else:
                w.add_document(doc, chunks, v)
            t4 = time.perf_counter()
            for i, c in enumerate(chunks):
                postings.add(first + i, doc.text[c.start : c.end])
            t5 = time.perf_counter()
            for key, a, b in (
                ("generate", t, t1),
                ("chunk", t1, t2),
                ("vectors", t2, t3),
                ("add", t3, t4),
                ("index", t4, t5),
            ):
                seconds[key] += b - a
            text_chars += len(doc.text)
            docs += 1
        t = time.perf_counter()
        w.set_postings(postings.finish(w.n_chunks))
        seconds["index"] += time.perf_counter() - t
        t = time.perf_counter()
        result = w.commit()
        seconds["write"] = time.perf_counter() - t
    return {
        "path": str(result.path),
        "chunks": result.counts["chunks"],
        "pieces": n_pieces,
        "documents": docs,
        "terms": result.counts["terms"],
        "postings": result.counts["postings"],
        "text_chars": text_chars,
        "bytes": result.size,
        "dims": dims,
        "seconds": {k: round(v, 2) for k, v in seconds.items()},
        "total_s": round(time.perf_counter() - t0, 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def write_corpus(folder: Path, n_docs: int, seed: int = 7) -> int:
    """Write ``n_docs`` Markdown files (for ``kbpack build``); returns the bytes written."""
    gen = Generator(Pool(), seed)
    total = 0
    for _ in range(n_docs):
        name, md = gen.markdown()
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        total += path.write_text(md, encoding="utf-8")
    return total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("corpus", help="write Markdown files")
    c.add_argument("--docs", type=int, default=100)
    c.add_argument("-o", "--out", type=Path, required=True)
    c.add_argument("--seed", type=int, default=7)
    p = sub.add_parser("pack", help="build a synthetic-vector pack")
    p.add_argument("--chunks", type=int, required=True)
    p.add_argument("--dims", type=int, default=384)
    p.add_argument("-o", "--out", type=Path, required=True)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--pieces", action="store_true", help="sentence pieces with their vectors")
    p.add_argument("--json", action="store_true")
    args = ap.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if args.cmd == "corpus":
        n = write_corpus(args.out, args.docs, args.seed)
        print(f"{args.docs} documents, {n} bytes in {args.out}")
        return 0
    figures = build_pack(args.out, args.chunks, args.dims, args.seed, pieces=args.pieces)
    if args.json:
        print(json.dumps(figures))
    else:
        for k, v in figures.items():
            print(f"{k:12} {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
