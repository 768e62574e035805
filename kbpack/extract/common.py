"""What every extractor shares: format table, source identity, the failed-document record."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

from kbpack.choices import KIND_BY_SUFFIX
from kbpack.text.document import Document, Section

MEDIA_TYPES: dict[str, str] = {
    "md": "text/markdown",
    "txt": "text/plain",
    "html": "text/html",
    "pdf": "application/pdf",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
}

# kbpack's own extraction logic per format: bump when a change alters text or structure, so
# packs built with the older logic can be found and rebuilt. HTML 4: links and anchors (same text);
# HTML 5: a numbered <title> no longer replaces a numbered first heading (it adds the site name).
EXTRACTOR_VERSIONS: dict[str, int] = {"md": 1, "txt": 1, "html": 5, "pdf": 2, "docx": 2}

# The formats with no third-party parser are extracted by kbpack alone.
_OWN = {"md", "txt", "html"}


# Compressed documents are read through their decompressor and typed by the inner name
# (``x.html.gz`` is HTML). Value: the magic bytes that confirm the compression.
COMPRESSIONS: dict[str, tuple[str, bytes]] = {
    ".gz": ("gzip", b"\x1f\x8b"),
    ".bz2": ("bzip2", b"BZh"),
    ".xz": ("xz", b"\xfd7zXZ\x00"),
}


def compression_of(path: Path) -> str | None:
    """The compression suffix of ``path`` (``.gz``, ``.bz2``, ``.xz``), or None."""
    suffix = path.suffix.lower()
    return suffix if suffix in COMPRESSIONS else None


def inner_name(path: Path) -> Path:
    """The name with a compression suffix taken off: ``a/x.html.gz`` -> ``a/x.html``."""
    return path.with_suffix("") if compression_of(path) else path


def kind_of(path: Path) -> str | None:
    return KIND_BY_SUFFIX.get(inner_name(path).suffix.lower())


UNSUPPORTED = "unsupported type"  # the reason of a file skipped for its type, then the suffix


def unsupported_reason(path: Path) -> str:
    """``unsupported type .png``: why a file of a type kbpack does not read was skipped."""
    return f"{UNSUPPORTED} {type_suffix(path)}"


def is_unsupported(reason: str | None) -> bool:
    """A skip for the file's type: kbpack never tried to read it (``build --strict`` allows it)."""
    return bool(reason) and str(reason).startswith(UNSUPPORTED + " ")


def type_suffix(path: Path) -> str:
    """The suffix that decides the type, as a user would write it (``.png``, ``.tar.gz``)."""
    inner = inner_name(path)
    return (inner.suffix.lower() + (compression_of(path) or "")) or "(no extension)"


def media_type_of(path: Path) -> str:
    kind = kind_of(path)
    if kind:
        return MEDIA_TYPES[kind]
    import mimetypes

    guessed, _ = mimetypes.guess_type(path.name, strict=False)
    return guessed or "application/octet-stream"


def extractor_name(kind: str) -> str:
    """``"<format>/<library> <version>"``: the library that read the bytes, with its version."""
    if kind in _OWN:
        return f"{kind}/kbpack"
    if kind == "pdf":
        from importlib.metadata import version

        return f"pdf/pypdfium2 {version('pypdfium2')}"
    if kind == "docx":
        from importlib.metadata import version

        return f"docx/python-docx {version('python-docx')}"
    return f"{kind}/none"


def file_identity(path: Path) -> tuple[int, str]:
    """(size in bytes, SHA-256 hex) of the file, read in blocks so huge files cost no memory."""
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
            size += len(block)
    return size, digest.hexdigest()


def blank_document(path: Path, name: str, kind: str | None) -> Document:
    """A document with its identity filled in and nothing extracted yet (size/hash set later)."""
    stem = inner_name(path).stem or path.name
    return Document(
        name=name,
        source_path=str(path),
        media_type=MEDIA_TYPES[kind] if kind else media_type_of(path),
        source_size=0,
        source_sha256="",
        title=stem,
        extractor=extractor_name(kind) if kind else "none",
        extractor_version=EXTRACTOR_VERSIONS.get(kind or "", 0),
        sections=[Section(0, stem, 0, 0, -1)],
    )


def failed(doc: Document, reason: str, stage: str) -> Document:
    """The record of a document that could not be extracted: one-line reason, no text."""
    reason = " ".join(reason.split()) or "unknown error"
    return replace(
        doc,
        status="failed",
        reason=reason,
        stage=stage,
        text="",
        sections=[Section(0, doc.title, 0, 0, -1)],
        pages=[],
    )


def human_bytes(n: int) -> str:
    if n < 1024:
        return f"{n} bytes"
    value = n / 1024
    unit = "KiB"
    for bigger in ("MiB", "GiB"):
        if value < 1024:
            break
        value /= 1024
        unit = bigger
    return f"{value:.1f} {unit}"
