"""The in-memory shape of one extracted document: canonical text plus its structure.

Every offset is a code-point index into ``Document.text`` (the canonical text), half-open
``[start, end)``. Extractors build these; the chunker and the pack writer consume them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Status = Literal["ok", "failed", "skipped"]


@dataclass(frozen=True)
class Section:
    """One node of the heading tree.

    ``level`` 0 is the document root (exactly one, index 0, covering the whole text, titled with
    the document title); headings are levels 1..9. ``parent`` indexes ``Document.sections``
    (-1 for the root). A section spans from its heading to the next heading of the same or a
    higher level, so children nest inside parents. Sections are listed in document order.
    """

    level: int
    title: str
    start: int
    end: int
    parent: int


@dataclass(frozen=True)
class Page:
    """A physical page (1-based ``number``) and the character range of its text."""

    number: int
    start: int
    end: int


@dataclass(frozen=True)
class Link:
    """A link of the source to a document of the pack (HTML ``<a href>``): the link text is
    ``text[start:end]``; ``target`` is the target document's name (spec §3.1 ``name``) and
    ``anchor`` the fragment inside it (empty: the document's start). Links are resolved to
    pack rows and offsets when the pack is written (spec §3.12); a target the pack does not
    hold is left out there."""

    start: int
    end: int
    target: str
    anchor: str = ""


@dataclass
class Document:
    """One source file after extraction. A failed document has ``status='failed'``, a one-line
    ``reason`` (and ``stage``), empty text, only the root section and no pages."""

    name: str  # path relative to the input root, POSIX separators; unique within a pack
    source_path: str  # path as given on the command line (informational)
    media_type: str  # e.g. "text/markdown", "application/pdf"
    source_size: int
    source_sha256: str
    title: str
    extractor: str  # "<format>/<library> <library version>", e.g. "pdf/pypdfium2 5.15.2"
    extractor_version: int  # kbpack's own logic version for this format; bump when it changes
    status: Status = "ok"
    reason: str = ""
    stage: str = ""  # where a failure happened: read, detect, extract, limits, timeout
    text: str = ""
    sections: list[Section] = field(default_factory=list)
    pages: list[Page] = field(default_factory=list)
    decoding: str = ""  # how the bytes became text, e.g. "utf-8", "utf-16 (BOM)", "cp1252"
    replaced: int = 0  # characters removed or replaced while sanitising (NUL, lone surrogates)
    warnings: list[str] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)  # in order of ``start``
    anchors: dict[str, int] = field(default_factory=dict)  # fragment -> offset in ``text``

    @property
    def kind(self) -> str:
        """Short format name used by filters: md, txt, html, pdf, docx."""
        return self.extractor.split("/", 1)[0]
