"""Where things are, for a test in any folder of tests/ (they mirror kbpack's packages)."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent  # this checkout
TESTS_DIR = REPO_ROOT / "tests"  # the shared helpers (tiny_gguf, packs, ...) live here
