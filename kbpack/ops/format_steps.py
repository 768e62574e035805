"""The registry of format steps: ``STEPS[n]`` rewrites a version-``n`` pack as version ``n + 1``.

Step modules (``format_1_to_2``, ...) register with :func:`format_step`; ``migrate`` imports
them. Below both, so neither imports the other to register.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

FormatStep = Callable[[Path, Path], None]  # (pack of version n, where to write version n + 1)
STEPS: dict[int, FormatStep] = {}


def format_step(from_version: int) -> Callable[[FormatStep], FormatStep]:
    """Register the step that rewrites a format-``from_version`` pack as ``from_version + 1``."""

    def register(fn: FormatStep) -> FormatStep:
        if from_version in STEPS:
            raise ValueError(f"format step from version {from_version} is already registered")
        STEPS[from_version] = fn
        return fn

    return register
