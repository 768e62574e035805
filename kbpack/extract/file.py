"""One file -> one Document, in this process. Never raises for a document's own problems."""

from __future__ import annotations

import os
import stat
from dataclasses import replace
from hashlib import sha256
from pathlib import Path

from kbpack.errors import ExtractionError
from kbpack.extract.common import (
    COMPRESSIONS,
    blank_document,
    compression_of,
    failed,
    file_identity,
    human_bytes,
    kind_of,
    unsupported_reason,
)
from kbpack.extract.limits import Limits
from kbpack.extract.structure import Heading, with_text
from kbpack.text.canonical import Decoded, canonicalize, decode_text
from kbpack.text.document import Document, Link

_BINARY_SAMPLE = 64 * 1024
_BINARY_CONTROL_SHARE = 0.10
# C0 control bytes that no text file uses (tab, newlines, form feed and escape excluded).
_CONTROL_BYTES = bytes([*range(0, 9), *range(14, 27), *range(28, 32)])


def _decode(data: bytes, declared: str | None = None) -> Decoded:
    """Decode a text file; refuse binary content (over 10% control bytes, NUL included, in
    the first 64 KiB) unless a byte-order mark says it is UTF-16/32."""
    decoded = decode_text(data, declared)
    if "BOM" not in decoded.decoding:
        sample = data[:_BINARY_SAMPLE]
        controls = len(sample) - len(sample.translate(None, _CONTROL_BYTES))
        share = controls / max(len(sample), 1)
        if share > _BINARY_CONTROL_SHARE:
            raise ExtractionError(
                f"binary content ({share:.0%} control or NUL bytes in the first 64 KiB), not "
                "text; UTF-16 text needs a byte-order mark",
                "detect",
            )
    return decoded


def _plain(data: bytes, doc: Document, kind: str) -> Document:
    from kbpack.extract.markdown import markdown_headings
    from kbpack.extract.plaintext import adornment_headings

    decoded = _decode(data)
    text, replaced = canonicalize(decoded.text)
    if not text.strip():
        raise ExtractionError("no text: the file holds only whitespace", "extract")
    headings = markdown_headings(text) if kind == "md" else adornment_headings(text)
    title = _first_top_title(headings) or doc.title
    return with_text(
        doc, text, title, headings, decoding=decoded.decoding, replaced=decoded.replaced + replaced
    )


def _first_top_title(headings: list[Heading]) -> str | None:
    return next((h.title for h in headings if h.level == 1), None)


def _html(data: bytes, doc: Document) -> Document:
    from kbpack.extract.html import declared_charset, extract_html, extract_links, link_target

    decoded = _decode(data, declared_charset(data))
    builder, title = extract_html(decoded.text)
    text = builder.text()
    if not text.strip():
        raise ExtractionError("no text outside scripts, styles and navigation", "extract")
    title = title or doc.title
    found, anchors = extract_links(decoded.text, text)
    links = []
    for start, end, href in found:
        target = link_target(href, doc.name)
        if target is not None:
            links.append(Link(start, end, target[0], target[1]))
    replaced = decoded.replaced + builder.replaced
    return with_text(
        doc,
        text,
        title,
        builder.headings,
        links=links,
        anchors=anchors,
        decoding=decoded.decoding,
        replaced=replaced,
    )


def _extract(data: bytes, doc: Document, kind: str, limits: Limits) -> Document:
    if kind in ("md", "txt"):
        return _plain(data, doc, kind)
    if kind == "html":
        return _html(data, doc)
    if kind == "pdf":
        from kbpack.extract.pdf import extract_pdf

        return extract_pdf(data, doc, limits)
    if kind == "docx":
        from kbpack.extract.docx import extract_docx

        return extract_docx(data, doc, limits)
    raise ExtractionError(f"no extractor for kind {kind!r}", "detect")


def _decompress(data: bytes, suffix: str, cap: int) -> bytes:
    """The inflated bytes of a compressed document, read in bounded blocks: a stream that
    inflates past ``cap`` bytes is refused before it is held (a 1 KB bomb costs nothing)."""
    import bz2
    import gzip
    import lzma
    from io import BytesIO

    name, magic = COMPRESSIONS[suffix]
    if not data.startswith(magic):
        raise ExtractionError(f"not {name} data although the name ends in {suffix}", "detect")
    opener = {".gz": gzip.GzipFile, ".bz2": bz2.BZ2File, ".xz": lzma.LZMAFile}[suffix]
    blocks: list[bytes] = []
    size = 0
    try:
        with opener(fileobj=BytesIO(data)) if suffix == ".gz" else opener(BytesIO(data)) as f:
            while block := f.read(1 << 20):
                size += len(block)
                if size > cap:
                    raise ExtractionError(
                        f"{name} stream inflates past {human_bytes(cap)}, the file size limit; "
                        "raise --max-file-mb to include it",
                        "limits",
                    )
                blocks.append(block)
    except (OSError, EOFError, lzma.LZMAError) as e:
        raise ExtractionError(f"damaged {name} stream: {e}", "read") from e
    return b"".join(blocks)


def extract_file(path: Path, name: str, limits: Limits | None = None) -> Document:
    """Extract one file in this process. Returns a Document with status 'ok', or 'failed' with
    a one-line reason and a stage (read, detect, extract, limits); 'skipped' for a type kbpack
    does not read. Source size and SHA-256 are filled whenever the file can be read."""
    limits = limits or Limits()
    path = Path(path)
    kind = kind_of(path)
    doc = blank_document(path, name, kind)
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            return failed(doc, "not a regular file", "read")
        if info.st_size > limits.max_file_bytes:
            size, digest = file_identity(path)
            doc = replace(doc, source_size=size, source_sha256=digest)
            return failed(
                doc,
                f"file is {human_bytes(size)}, over the {human_bytes(limits.max_file_bytes)} "
                "limit; raise --max-file-mb to include it",
                "limits",
            )
        data = path.read_bytes()
    except OSError as e:
        return failed(doc, f"cannot read the file: {e.strerror or e}", "read")
    doc = replace(doc, source_size=len(data), source_sha256=sha256(data).hexdigest())
    if kind is None:
        return replace(doc, status="skipped", reason=unsupported_reason(path), stage="detect")
    if not data:
        return failed(doc, "empty file", "read")
    try:
        compression = compression_of(path)
        if compression is None:
            return _extract(data, doc, kind, limits)
        inflated = _decompress(data, compression, limits.max_file_bytes)
        if not inflated:
            return failed(doc, f"empty file inside the {compression} stream", "read")
        result = _extract(inflated, doc, kind, limits)
        # the decoding column says how the bytes became text: decompression is part of it
        return replace(result, decoding=f"{COMPRESSIONS[compression][0]}, {result.decoding}")
    except ExtractionError as e:
        return failed(doc, e.reason, e.stage)
    except MemoryError:
        return failed(doc, "out of memory while extracting; the file is too large", "limits")
    except RecursionError:
        return failed(doc, "structure nested too deeply to extract", "extract")
    except Exception as e:  # a parser bug on a hostile file is that file's failure, not ours
        return failed(doc, f"{type(e).__name__}: {e}", "extract")
