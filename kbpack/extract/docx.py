"""DOCX with python-docx, after the zip has been checked for bombs.

* Before python-docx reads anything: the file must be a zip; the members' declared sizes
  (sum), the archive's compression ratio and its member count must be under the limits.
  Declared sizes can lie, and ``zipfile.read`` inflates a member's whole stream in one call
  before clipping it to the declared size (a 2 GB stream behind a small declared size once
  took the worker to 2.1 GB). So each deflated member's stream is inflated in 1 MiB blocks
  and its real size compared with the declared one; every member is then read in 1 MiB
  blocks, the total held to the limit, its checksum checked; and python-docx reads a copy of
  the archive made of exactly those bytes, never the original streams.
* Canonical text: the body's paragraphs and tables in document order (content controls
  included; headers, footers, footnotes and comments are not). A table is one line per row,
  the cells joined by `` | `` (a cell's paragraphs and nested tables joined by spaces), so a
  document whose text lives only in tables still has all of it. Paragraphs are separated by
  a blank line; list paragraphs (numbered, or a ``List...`` style) are lines ``- item``.
* Sections: paragraphs styled ``Heading 1``..``Heading 9`` (level 1..9) and ``Title``
  (level 1).

Title: the core property ``title``, else the first ``Title``-styled paragraph, else the file
name stem.
"""

from __future__ import annotations

import re
import zipfile
from io import BytesIO
from typing import Any

from kbpack.errors import ExtractionError
from kbpack.extract.common import human_bytes
from kbpack.extract.limits import Limits
from kbpack.extract.structure import TextBuilder, heading_text, with_text
from kbpack.text.canonical import one_line
from kbpack.text.document import Document

_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_HEADING = re.compile(r"^heading\s*([1-9])$", re.I)
_SMALL = 2**20  # below this total size a high ratio is harmless


_BLOCK = 2**20


def _real_size(data: bytes, member: zipfile.ZipInfo, cap: int) -> int:
    """What a deflated member's stream really inflates to (``zipfile`` stops at the declared
    size and so never sees the rest), counted in bounded blocks up to ``cap`` + 1."""
    import struct
    import zlib

    at = member.header_offset
    if data[at : at + 4] != b"PK\x03\x04":
        raise ExtractionError(f"zip member {member.filename}: no local header", "extract")
    name_len, extra_len = struct.unpack_from("<HH", data, at + 26)
    start = at + 30 + name_len + extra_len
    raw = memoryview(data)[start : start + member.compress_size]
    inflater = zlib.decompressobj(-15)
    size = 0
    try:
        for i in range(0, len(raw), _BLOCK):
            chunk: bytes | memoryview = raw[i : i + _BLOCK]
            while chunk and size <= cap:
                size += len(inflater.decompress(chunk, _BLOCK))
                chunk = inflater.unconsumed_tail
    except zlib.error as e:
        raise ExtractionError(
            f"zip member {member.filename}: damaged stream ({e})", "extract"
        ) from e
    return size


def safe_copy(data: bytes, limits: Limits) -> bytes:
    """The archive rewritten (stored, uncompressed) from its members inflated in bounded
    blocks: the real inflated total is held to the limit, a member whose stream does not
    match its declared size and checksum is refused."""
    check_zip(data, limits)
    total = 0
    out = BytesIO()
    with (
        zipfile.ZipFile(BytesIO(data)) as archive,
        zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as copy,
    ):
        for member in archive.infolist():
            # a damaged central directory can yield an empty name, on which is_dir() raises
            if not member.filename:
                raise ExtractionError(
                    "zip member with an empty name: the archive's central directory is "
                    "damaged; save the document again from its editor",
                    "extract",
                )
            if member.is_dir():
                continue
            if member.compress_type == zipfile.ZIP_DEFLATED:
                cap = limits.max_decompressed_bytes
                real = _real_size(data, member, cap)
                if real != member.file_size:
                    size = f"over {human_bytes(cap)}" if real > cap else human_bytes(real)
                    raise ExtractionError(
                        f"zip member {member.filename} inflates to {size}, not the "
                        f"{human_bytes(member.file_size)} the archive declares (a lying zip)",
                        "limits" if real > member.file_size else "extract",
                    )
            parts: list[bytes] = []
            try:
                with archive.open(member) as stream:
                    while block := stream.read(_BLOCK):
                        total += len(block)
                        if total > limits.max_decompressed_bytes:
                            raise ExtractionError(
                                f"zip members inflate past "
                                f"{human_bytes(limits.max_decompressed_bytes)} (at "
                                f"{member.filename}), the decompressed-size limit (zip bomb?)",
                                "limits",
                            )
                        parts.append(block)
            except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
                raise ExtractionError(
                    f"zip member {member.filename} does not inflate to what the archive "
                    f"declares (a lying or damaged zip): {e}",
                    "extract",
                ) from e
            except NotImplementedError as e:  # an unknown compression method
                raise ExtractionError(f"zip member {member.filename}: {e}", "extract") from e
            copy.writestr(member.filename, b"".join(parts))
    return out.getvalue()


def check_zip(data: bytes, limits: Limits) -> None:
    """Refuse zip bombs by the declared sizes, before anything is decompressed."""
    if not data.startswith(b"PK\x03\x04"):
        raise ExtractionError("not a DOCX (not a zip archive); check the file's type", "detect")
    try:
        with zipfile.ZipFile(BytesIO(data)) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as e:
        raise ExtractionError(f"unreadable DOCX (corrupt or truncated zip): {e}", "extract") from e
    if len(members) > limits.max_zip_members:
        raise ExtractionError(
            f"zip has {len(members)} members, over the limit of {limits.max_zip_members} "
            "(zip bomb?)",
            "limits",
        )
    total = sum(m.file_size for m in members)
    if total > limits.max_decompressed_bytes:
        largest = max(members, key=lambda m: m.file_size)
        raise ExtractionError(
            f"would decompress to {human_bytes(total)} (largest member {largest.filename}: "
            f"{human_bytes(largest.file_size)}), over the "
            f"{human_bytes(limits.max_decompressed_bytes)} limit (zip bomb?); raise the "
            "decompressed-size limit if the file is genuine",
            "limits",
        )
    packed = sum(m.compress_size for m in members)
    if total > _SMALL and total > limits.max_zip_ratio * max(packed, 1):
        raise ExtractionError(
            f"compression ratio {total / max(packed, 1):.0f}:1 is over the "
            f"{limits.max_zip_ratio:.0f}:1 limit (zip bomb?)",
            "limits",
        )
    names = {m.filename for m in members}
    if "word/document.xml" not in names and "[Content_Types].xml" not in names:
        raise ExtractionError("not a Word document (a zip without word/document.xml)", "detect")


def _style_name(paragraph: Any) -> str:
    try:
        style = paragraph.style
        return str(style.name or "") if style is not None else ""
    except Exception:  # a style id with no definition: treat as plain
        return ""


def _is_list(element: Any, style: str) -> bool:
    ppr = element.find(f"{_W}pPr")
    if ppr is not None and ppr.find(f"{_W}numPr") is not None:
        return True
    return style.lower().startswith("list")


def _blocks(parent: Any) -> list[Any]:
    """Paragraphs and tables directly in ``parent``, content controls unwrapped."""
    out: list[Any] = []
    for child in parent.iterchildren():
        if child.tag in (f"{_W}p", f"{_W}tbl"):
            out.append(child)
        elif child.tag == f"{_W}sdt":
            content = child.find(f"{_W}sdtContent")
            if content is not None:
                out.extend(_blocks(content))
    return out


def _blocks_of_kind(parent: Any, kind: str) -> list[Any]:
    out: list[Any] = []
    for child in parent.iterchildren():
        if child.tag == f"{_W}{kind}":
            out.append(child)
        elif child.tag == f"{_W}sdt":
            content = child.find(f"{_W}sdtContent")
            if content is not None:
                out.extend(_blocks_of_kind(content, kind))
    return out


def _table_lines(table: Any, body: Any) -> list[str]:
    from docx.text.paragraph import Paragraph

    lines = []
    for row in _blocks_of_kind(table, "tr"):
        cells = []
        for cell in _blocks_of_kind(row, "tc"):
            parts = []
            for block in _blocks(cell):
                if block.tag == f"{_W}p":
                    parts.append(Paragraph(block, body).text)
                else:
                    parts.extend(_table_lines(block, body))
            cells.append(one_line(" ".join(parts)))
        if any(cells):
            lines.append(" | ".join(cells))
    return lines


def extract_docx(data: bytes, doc: Document, limits: Limits) -> Document:
    """Fill ``doc`` from the bytes of a DOCX, or raise ExtractionError."""
    data = safe_copy(data, limits)
    import docx
    from docx.text.paragraph import Paragraph

    try:
        word = docx.Document(BytesIO(data))
        body = word._body  # python-docx's block container: resolves styles for Paragraph
        blocks = _blocks(word.element.body)
    except Exception as e:
        raise ExtractionError(f"unreadable DOCX: {type(e).__name__}: {e}", "extract") from e
    builder = TextBuilder()
    styled_title: str | None = None
    after_item = False
    for block in blocks:
        if block.tag == f"{_W}tbl":
            if builder.add("\n".join(_table_lines(block, body))) is not None:
                after_item = False
            continue
        paragraph = Paragraph(block, body)
        text = paragraph.text
        if not text.strip():
            continue
        style = _style_name(paragraph)
        heading = _HEADING.match(style)
        if heading or style.lower() == "title":
            level = int(heading.group(1)) if heading else 1
            builder.add_heading(level, one_line(text))
            if not heading and styled_title is None:
                styled_title = heading_text(one_line(text))
            after_item = False
        elif _is_list(block, style):
            builder.add("- " + one_line(text), separator="\n" if after_item else "\n\n")
            after_item = True
        else:
            builder.add(text)
            after_item = False
    text = builder.text()
    if not text.strip():
        raise ExtractionError("no text in the document body", "extract")
    try:
        core_title = one_line(word.core_properties.title or "")
    except Exception:  # broken core properties must not fail the document
        core_title = ""
    title = core_title or styled_title or doc.title
    return with_text(doc, text, title, builder.headings, replaced=builder.replaced, decoding="docx")
