"""Options and output helpers shared by every command."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def json_option(f: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON on stdout.")(
        f
    )


def quiet_option(f: F) -> F:
    return click.option("--quiet", "-q", is_flag=True, help="No progress and no summary.")(f)


def emit_json(obj: Any) -> None:
    click.echo(json.dumps(obj, ensure_ascii=False, indent=2, default=str))


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


def show_progress(quiet: bool, as_json: bool) -> bool | None:
    """None lets Progress decide (TTY only); False when the user asked for silence."""
    return False if (quiet or as_json) else None


def stderr_is_tty() -> bool:
    return sys.stderr.isatty()
