"""This machine's kbpack cache folder: converted models, extracted pack models, and the
per-machine memos (packs parsed, verified or written here; model hashes; early-load hints).

Nothing in it is needed to read a pack: removing the folder costs time, never correctness.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """``$KBPACK_CACHE_DIR``, else ``$XDG_CACHE_HOME/kbpack``, else ``~/.cache/kbpack``."""
    if explicit := os.environ.get("KBPACK_CACHE_DIR"):
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "kbpack"
