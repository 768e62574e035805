"""The user documentation as the drift tests read it: README.md (the front page) and the pages
in docs/ that hold the detail."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def user_docs() -> str:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return "\n".join(p.read_text() for p in pages)
