"""Small packs made in tests from hand-written documents (no extractor, optional vectors)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from kbpack.index.chunk import ChunkConfig, chunk_document
from kbpack.index.postings import PostingsBuilder
from kbpack.pack.write import CommitResult, PackWriter
from kbpack.text.document import Document, Section


def markdown_doc(name: str, text: str) -> Document:
    """A Document with ATX headings as sections (enough structure for pack tests)."""
    lines = text.split("\n")
    heads: list[tuple[int, int, str]] = []  # (offset, level, title)
    at = 0
    for line in lines:
        if line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            heads.append((at, level, line[level:].strip()))
        at += len(line) + 1
    title = next((t for _, lv, t in heads if lv == 1), Path(name).stem)
    sections = [Section(0, title, 0, len(text), -1)]
    stack = [0]
    for i, (start, level, t) in enumerate(heads):
        end = next((s for s, lv, _ in heads[i + 1 :] if lv <= level), len(text))
        while len(stack) > 1 and sections[stack[-1]].level >= level:
            stack.pop()
        sections.append(Section(level, t, start, end, stack[-1]))
        stack.append(len(sections) - 1)
    raw = text.encode()
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
        sections=sections,
        decoding="utf-8",
    )


def failed_doc(name: str, reason: str) -> Document:
    return Document(
        name=name,
        source_path=name,
        media_type="application/pdf",
        source_size=3,
        source_sha256=hashlib.sha256(b"bad").hexdigest(),
        title=Path(name).stem,
        extractor="pdf/pypdf",
        extractor_version=1,
        status="failed",
        reason=reason,
        stage="extract",
        sections=[Section(0, Path(name).stem, 0, 0, -1)],
    )


def write_pack(
    out: Path,
    docs: Sequence[Document],
    dims: int | None = None,
    seed: int = 0,
    copies: bool = True,
) -> CommitResult:
    """Chunk by characters; with ``dims``, random unit vectors stamped with a made-up model;
    ``copies=False`` writes no ``/copies``, as kbpack 0.2.0 did."""
    rng = np.random.default_rng(seed)
    model = None
    if dims:
        model = {
            "name": "test-model",
            "sha256": "0" * 64,
            "architecture": "bert",
            "dims": dims,
            "pooling": "mean",
            "window": 256,
            "normalize": "l2",
            "llama_cpp_version": "test",
        }
    postings = PostingsBuilder(headers=True)  # as kbpack writes them: header and content
    with PackWriter(out, model=model, dims=dims, copies=copies) as w:
        for doc in docs:
            chunks = (
                chunk_document(doc, None, ChunkConfig(window=None, max_chars=200)).chunks
                if doc.status == "ok"
                else []
            )
            vectors = None
            if dims:
                v = rng.normal(size=(len(chunks), dims)).astype(np.float32)
                vectors = v / np.linalg.norm(v, axis=1, keepdims=True)
            first = w.n_chunks
            w.add_document(doc, chunks, vectors)
            for i, c in enumerate(chunks):
                postings.add_chunk(first + i, doc, c)
        w.set_postings(postings.finish(w.n_chunks))
        return w.commit()


SAMPLE = """# Rotating logs

Logs grow without bound unless rotated.

## Configuration

Set `max_bytes` to 10485760 and `backup_count` to 5 in the handler.
The handler renames app.log to app.log.1 when the size is reached.

## Troubleshooting

Error 0x80070005 means access denied: run the service as its own user.
"""

ITALIAN = """# Guida

## Installazione

L'installazione richiede circa quattro minuti perché llama.cpp si compila dai sorgenti.

## Perché è lento?

Il modello è caricato una sola volta: 50 ms. Città, perché, così — tutto NFC. 🚀 emoji
"""
