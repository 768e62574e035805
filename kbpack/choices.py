"""Fixed sets the CLI offers as choices, in a leaf module (no imports): ``kbpack query`` builds
its options from them without importing the extractors' package or the search (which it
imports later, while the model loads: kbpack/model/load.py)."""

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

# Search modes (kbpack.search.searcher): fused, vectors only, words only.
MODES = ("hybrid", "dense", "bm25")

__all__ = ["KIND_BY_SUFFIX", "MODES"]
