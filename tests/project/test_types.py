"""``mypy kbpack`` stays clean: the type hints are checked, not decoration (make lint runs it too)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.paths import REPO_ROOT

ROOT = REPO_ROOT


def test_mypy_finds_no_error_in_kbpack() -> None:
    pytest.importorskip("mypy")  # a dev dependency (pyproject.toml [dev])
    r = subprocess.run(
        [sys.executable, "-m", "mypy", "kbpack"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,  # ~10 s with a warm cache, ~30 s cold on a loaded 2-core machine
    )
    assert r.returncode == 0, r.stdout + r.stderr
