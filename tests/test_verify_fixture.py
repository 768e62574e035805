"""Small real packs for the verify, sign and hostile-pack tests, written with the real writer,
chunker and BM25 builder. Imported by the other ``test_verify*``/``test_sign*``/``test_hostile*``
files; the tests at the bottom check that the fixture itself is what the others assume."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from kbpack.index.chunk import ChunkConfig, chunk_document
from kbpack.index.postings import PostingsBuilder
from kbpack.pack import format as F
from kbpack.pack.manifest import (
    encode_header,
    hash_hdf5_bytes,
    read_header,
    write_header,
)
from kbpack.pack.write import PackWriter
from kbpack.text.document import Document, Page, Section

REPO = Path(__file__).resolve().parent.parent
DIMS = 8
CREATED = "2026-11-30T12:00:00+00:00"

GUIDE = """Pump maintenance guide

Check the seal of pump P-101 every 500 hours. A worn seal leaks oil onto the skid.

Lubrication

Use ISO VG 46 oil. The reservoir holds 12 litres; top up when the sight glass reads below half.

Alarms

Alarm A-17 means low suction pressure. Stop the pump, open valve V-3 and restart after 2 minutes.
"""

MANUAL_PAGES = [
    "Safety first. Wear gloves when handling the pump housing.",
    "Torque the flange bolts to 45 Nm in a star pattern.",
    "Il filtro va sostituito ogni 1000 ore di funzionamento.",
]


def model_identity(dims: int = DIMS) -> dict[str, Any]:
    return {
        "name": "tiny-test-model",
        "sha256": hashlib.sha256(b"tiny-test-model").hexdigest(),
        "architecture": "bert",
        "dims": dims,
        "pooling": "mean",
        "window": 256,
        "normalize": "l2",
        "llama_cpp_version": "0.3.16",
    }


def _guide() -> Document:
    text = GUIDE
    lub = text.index("Lubrication")
    alarms = text.index("Alarms")
    return Document(
        name="guide.md",
        source_path="docs/guide.md",
        media_type="text/markdown",
        source_size=len(text.encode()),
        source_sha256=hashlib.sha256(text.encode()).hexdigest(),
        title="Pump maintenance guide",
        extractor="md/kbpack 1",
        extractor_version=1,
        text=text,
        sections=[
            Section(0, "Pump maintenance guide", 0, len(text), -1),
            Section(1, "Lubrication", lub, alarms, 0),
            Section(1, "Alarms", alarms, len(text), 0),
        ],
        decoding="utf-8",
    )


def _manual() -> Document:
    pages: list[Page] = []
    parts: list[str] = []
    at = 0
    for i, p in enumerate(MANUAL_PAGES, start=1):
        pages.append(Page(i, at, at + len(p)))
        parts.append(p)
        at += len(p) + 2
    text = "\n\n".join(parts)
    return Document(
        name="manual.pdf",
        source_path="docs/manual.pdf",
        media_type="application/pdf",
        source_size=4096,
        source_sha256=hashlib.sha256(b"manual").hexdigest(),
        title="Pump manual",
        extractor="pdf/pypdf 7.1.0",
        extractor_version=1,
        text=text,
        sections=[Section(0, "Pump manual", 0, len(text), -1)],
        pages=pages,
        decoding="pdf",
    )


def _failed() -> Document:
    return Document(
        name="broken.docx",
        source_path="docs/broken.docx",
        media_type="application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        source_size=10,
        source_sha256=hashlib.sha256(b"broken").hexdigest(),
        title="broken.docx",
        extractor="docx/python-docx 1.2.0",
        extractor_version=1,
        status="failed",
        reason="not a zip file",
        stage="read",
        sections=[Section(0, "broken.docx", 0, 0, -1)],
    )


def unit_vectors(n: int, dims: int, seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, dims)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def make_pack(
    out: Path,
    *,
    dense: bool = True,
    dims: int = DIMS,
    model_dims: int | None = None,
    mutate_vectors: Any = None,
    mutate_chunks: Any = None,
    created: str = CREATED,
    seed: int = 0,
) -> Path:
    """Write a 3-document pack (markdown with sections, a paged PDF-like one, a failed one).

    ``mutate_vectors(array)`` (first document's vectors) / ``mutate_chunks(doc, list)`` let a test make a semantically bad pack
    that the writer still accepts (NaN vectors, offsets past the end)."""
    model = model_identity(model_dims or dims) if dense else None
    builder = PostingsBuilder()
    with PackWriter(out, model=model, dims=dims if dense else None, created=created) as w:
        n = 0
        for i, doc in enumerate((_guide(), _manual(), _failed())):
            chunks = chunk_document(doc, None, ChunkConfig(window=None, max_chars=90)).chunks
            for c in chunks:
                builder.add(n, doc.text[c.start : c.end])
                n += 1
            if mutate_chunks is not None:
                chunks = mutate_chunks(doc, list(chunks))
            vectors = unit_vectors(len(chunks), dims, seed + i) if dense else None
            if vectors is not None and mutate_vectors is not None and i == 0:
                mutate_vectors(vectors)
            w.add_document(doc, chunks, vectors)
        w.set_postings(builder.finish(n))
        w.commit()
    return out


def restamp(path: Path, **changes: Any) -> None:
    """Recompute size and byte digest after a test edited the HDF5 content, so that step 1
    passes and what follows is what refuses the pack. ``changes`` edit manifest fields."""
    header = read_header(path)
    doc = json.loads(header.manifest_bytes)
    doc["file_size"], doc["hdf5_sha256"] = hash_hdf5_bytes(path)
    doc.update(changes)
    raw = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    write_header(path, encode_header(raw, header.signature))


def wrap_hdf5(src: Path, out: Path) -> Path:
    """Put any HDF5 file behind a kbpack user block with a valid manifest, so that verify's
    byte check passes and HDF5 really parses it."""
    data = src.read_bytes()
    manifest = {
        "magic": "kbpack",
        "format_version": F.FORMAT_VERSION,
        "userblock_size": F.USERBLOCK_SIZE,
        "file_size": F.USERBLOCK_SIZE + len(data),
        "hdf5_sha256": hashlib.sha256(data).hexdigest(),
        "counts": dict.fromkeys(F.COUNT_KEYS, 1),
        "elements": {},
        "kbpack_version": "0.1.0",
        "created": CREATED,
    }
    raw = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    out.write_bytes(encode_header(raw) + data)
    return out


def cve_dir() -> Path | None:
    env = os.environ.get("KBPACK_CVE_DIR")
    p = Path(env) if env else REPO.parent / "shared" / "hdf5-cve"
    return p if p.is_dir() else None


def cve_files() -> list[Path]:
    d = cve_dir()
    if d is None:
        return []
    skip = {"COPYING", "README.md", "CVE_list.md"}
    return sorted(p for p in d.iterdir() if p.is_file() and p.name not in skip)


# -- the fixture itself --------------------------------------------------------------------


def test_fixture_pack_has_what_the_other_tests_assume(tmp_path: Path) -> None:
    from kbpack.pack.read import PackReader

    p = make_pack(tmp_path / "f.kbpack")
    with PackReader(p) as r:
        c = r.counts
        assert (c["documents"], c["documents_ok"], c["documents_failed"]) == (3, 2, 1)
        assert c["chunks"] >= 4 and c["vectors"] == c["chunks"] and c["pages"] == 3
        for i in range(c["chunks"]):
            assert r.chunk_content(i).strip()
