"""Output helpers shared by every command (their shared options: ``kbpack.cli.options``)."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

import click

from kbpack.cli.plain_text import human_size as human_size  # re-exported: the commands' import
from kbpack.cli.plain_text import table as table
from kbpack.runtime.terminal import json_printable, printable
from kbpack.schema import SCHEMA as SCHEMA  # re-exported: the commands take it from here


class Choice(click.Choice):  # type: ignore[type-arg]
    """click.Choice that answers a typo with the closest choice: "did you mean 'bm25'?"."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter:
            import difflib  # only for a mistyped choice

            close = difflib.get_close_matches(str(value), [str(c) for c in self.choices], n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            self.fail(
                f"{value!r} is not one of {', '.join(map(str, self.choices))}{hint}", param, ctx
            )


def command_name() -> str:
    """``query``, ``model info``: the command being run, without the program name."""
    ctx = click.get_current_context(silent=True)
    return " ".join(ctx.command_path.split()[1:]) if ctx else ""


def say(text: str, err: bool = False) -> None:
    """Every human-readable line kbpack prints: through ``printable`` (control and bidi
    characters escaped, newlines and tabs kept), so no byte of a pack or a file name reaches
    the terminal raw (issue 30). Fields that must stay on one line (names) are escaped with
    ``printable(name)`` where they are formatted."""
    click.echo(printable(text, lines=True), err=err)


def envelope(body: Mapping[str, Any]) -> dict[str, Any]:
    """Every JSON document kbpack prints starts with ``schema`` and ``command`` (spec/JSON.md)."""
    return {"schema": SCHEMA, "command": command_name(), **body}


def emit_json(obj: Mapping[str, Any]) -> None:
    click.echo(json_printable(json.dumps(envelope(obj), ensure_ascii=False, indent=2, default=str)))


def emit_json_line(obj: Mapping[str, Any]) -> None:
    """One compact JSON document per line (--batch, export --json): the same envelope."""
    click.echo(json_printable(json.dumps(envelope(obj), ensure_ascii=False, default=str)))


def pick(options: Mapping[str, Any], *names: str, **renamed: str) -> dict[str, Any]:
    """The keyword arguments of a library call, taken from a command's options: ``names`` as
    they are spelt there, ``renamed`` as argument="option"."""
    return {**{n: options[n] for n in names}, **{a: options[o] for a, o in renamed.items()}}


def summary_wanted(document: Mapping[str, Any], as_json: bool, quiet: bool) -> bool:
    """Print ``document`` as the command's JSON (--json); whether a human summary is still
    wanted (neither --json nor --quiet)."""
    if as_json:
        emit_json(document)
    return not (as_json or quiet)


def grid(head: list[str], rows: list[list[str]], indent: int = 0) -> list[str]:
    """Lines of a table with a header row, each column as wide as its widest cell."""
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    pad = " " * indent
    return [
        pad + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in [head, *rows]
    ]


def show_progress(quiet: bool, as_json: bool) -> bool | None:
    """None lets Progress decide (TTY only); False when the user asked for silence."""
    return False if (quiet or as_json) else None


def stderr_is_tty() -> bool:
    return sys.stderr.isatty()
