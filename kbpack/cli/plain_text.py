"""Plain-text pieces of the CLI's reports (aligned label/value rows, byte sizes), kept out of
the click modules so that library code that renders a report (kbpack/cli/build_report.py) needs
no CLI import."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def table(rows: Sequence[tuple[str, Any]], indent: int = 0) -> str:
    """Two aligned columns: label, value."""
    if not rows:
        return ""
    width = max(len(k) for k, _ in rows)
    pad = " " * indent
    return "\n".join(f"{pad}{k:<{width}}  {v}" for k, v in rows)


def human_size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"
