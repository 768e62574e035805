"""Small real packs for the verify, sign, hostile-pack and format tests, written with the real
writer, chunker and BM25 builder, and the edits those tests make to them (restamped digests, a
stalled global heap). tests/verify/test_verify_fixture.py checks the fixture is what they assume."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from kbpack.index.chunk import ChunkConfig, chunk_document
from kbpack.index.postings import PostingsBuilder
from kbpack.pack import format as F
from kbpack.pack.global_heap import SIGNATURE
from kbpack.pack.manifest import (
    encode_header,
    hash_hdf5_bytes,
    read_header,
    write_header,
)
from kbpack.pack.read import PackReader
from kbpack.pack.write import PackWriter
from kbpack.text.document import Document, Page, Section
from kbpack.verify.pipeline import verify_pack
from tests import independent_reader as ind
from tests.paths import REPO_ROOT

REPO = REPO_ROOT
DIMS = 8
GOLDEN = REPO_ROOT / "fixtures" / "golden" / "v2.kbpack"
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


def rewritten(pack: Path, out: Path, path: str, values: np.ndarray) -> Path:
    """A copy of ``pack`` at ``out`` with dataset ``path`` rewritten to ``values`` and the
    manifest's digests restamped to match: only an invariant of verify can tell."""
    from kbpack.pack.digest import numeric_digest

    shutil.copyfile(pack, out)
    with h5py.File(out, "r+") as h:
        h[path][...] = values
    elements = json.loads(read_header(out).manifest_bytes)["elements"]
    elements[path] = numeric_digest(values)
    restamp(out, elements=elements)
    return out


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


# -- edits the tests make -----------------------------------------------------------------


def edited(pack: Path, tmp_path: Path, edit: Callable[[h5py.File], None], **changes: Any) -> Path:
    """A copy of ``pack`` with ``edit`` applied through h5py and the byte digest restamped, so
    that what refuses it is the later step under test."""
    out = tmp_path / "edited.kbpack"
    shutil.copyfile(pack, out)
    with h5py.File(out, "r+") as h:
        edit(h)
    restamp(out, **changes)
    return out


def with_fixed_digests(pack: Path, tmp_path: Path, edit: Callable[[h5py.File], None]) -> Path:
    """Edit the data AND recompute every digest: only the invariants can see the problem."""
    from kbpack.pack.digest import attrs_digest, numeric_digest, strings_digest

    def fix(h: h5py.File) -> None:
        edit(h)

    p = edited(pack, tmp_path, fix)
    elements = dict(read_header(p).manifest.elements)
    with h5py.File(p, "r") as h:
        for key in list(elements):
            base = key.removesuffix("@attrs")
            obj = h[base] if base != "/" else h
            if key.endswith("@attrs"):
                elements[key] = attrs_digest(dict(obj.attrs.items()))
            elif h5py.check_string_dtype(obj.dtype):
                elements[key] = strings_digest(obj[()].tolist())
            else:
                elements[key] = numeric_digest(obj[()])
    restamp(p, elements=elements)
    return p


def codes(path: Path, **kw: Any) -> set[tuple[str, str]]:
    return {(f.code, f.path) for f in verify_pack(path, **kw).findings}


def stall_heap(pack: Path) -> int:
    """Set the size of the first free-space object of a global heap collection to 0 (what a
    zeroed sector there does); returns the collection's offset."""
    data = bytearray(pack.read_bytes())
    at = data.find(SIGNATURE, F.USERBLOCK_SIZE)
    while at >= 0:
        size = int.from_bytes(data[at + 8 : at + 16], "little")
        p = at + 16
        while p + 16 <= at + size:
            index = int.from_bytes(data[p : p + 2], "little")
            obj = int.from_bytes(data[p + 8 : p + 16], "little")
            if index == 0:
                data[p + 8 : p + 16] = bytes(8)
                pack.write_bytes(data)
                return at
            p += 16 + (obj + 7) // 8 * 8
        at = data.find(SIGNATURE, at + 1)
    raise AssertionError("no global heap collection with free space")


def agree_with_spec(path: Path) -> int:
    manifest = ind.read_manifest(str(path))
    assert ind.check_bytes(str(path), manifest)
    chunks = ind.read_chunks(str(path))
    assert len(chunks) == manifest["counts"]["chunks"]
    with PackReader(path) as r:
        for i, c in enumerate(chunks):
            assert c.content == r.chunk_content(i)
            assert c.content.strip() == c.content and c.content
    pieces = ind.read_pieces(str(path))
    assert len(pieces) == manifest["counts"].get("pieces", 0)
    for p in pieces:  # spec §3.9: inside its chunk, trimmed, a unit vector
        c = chunks[p.chunk]
        assert c.start <= p.start < p.end <= c.end
        assert p.content == p.content.strip() and p.content in c.content
        assert abs(float(np.linalg.norm(p.vector)) - 1.0) < 1e-2
    copies = ind.read_copies(str(path))  # spec §3.10: exact flags say the truth
    assert (copies is None) == ("copies" not in manifest["counts"])
    for group in copies or []:
        assert len(group) >= 2 and [c for c, _, _ in group] == sorted({c for c, _, _ in group})
        assert all(exact == equal for _, exact, equal in group)
    manifest = ind.read_manifest(str(path))
    assert ind.storage_violations(str(path), manifest["format_version"]) == []
    dense = ind.dense_check(str(path))  # spec §3.7.1: the rule's terms, rows = postings
    assert (dense is None) == ("dense_terms" not in manifest["counts"])
    rows = ind.row_digest_check(str(path))  # spec §3.11: every row's digest is its own
    assert (
        rows is None or rows == 3 * manifest["counts"]["documents"] + manifest["counts"]["sections"]
    )
    lengths, terms = ind.tokenize_check(str(path))
    assert terms == sorted(terms, key=lambda t: t.encode()) and (lengths >= 1).all()
    return len(chunks)


def kbpack(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    """``kbpack ARGS`` in a process of its own with its own cache folder and a bare PATH."""
    env = {"KBPACK_CACHE_DIR": str(cache), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, "-m", "kbpack", *args],
        capture_output=True,
        text=True,
        timeout=300,  # a hang fails the test instead of blocking the suite
        env=env,
    )
