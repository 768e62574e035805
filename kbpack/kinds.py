"""The document kinds kbpack extracts, by file extension: a leaf module (no imports), so that
``kbpack query`` can offer ``--type`` choices without importing the extractors' package."""

from __future__ import annotations

# Extension -> kind. Anything else is skipped as unsupported.
KIND_BY_SUFFIX: dict[str, str] = {
    ".md": "md",
    ".markdown": "md",
    ".txt": "txt",
    ".text": "txt",
    ".rst": "txt",
    ".html": "html",
    ".htm": "html",
    ".xhtml": "html",
    ".pdf": "pdf",
    ".docx": "docx",
}

__all__ = ["KIND_BY_SUFFIX"]
