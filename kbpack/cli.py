"""The ``kbpack`` command: a thin click group.

Commands live in ``kbpack/commands/`` and are imported only when run, so ``kbpack --help`` and
a cold ``kbpack query`` do not pay for modules they do not use. Library code raises typed
errors (``kbpack.errors``); this module alone turns them into one-line messages and exit codes.

Exit codes: 0 success; 1 failure or findings (verify), differences (diff); 2 usage error;
3 query refused (no answer under the threshold); 130 interrupted.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import sys
from typing import Any

import click

from kbpack import __version__

# name -> (module, attribute, one-line help). The help is here so --help imports nothing.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "build": ("kbpack.commands.build", "build", "Build a pack from folders and files."),
    "update": ("kbpack.commands.update", "update", "Rebuild a pack, reusing unchanged documents."),
    "query": ("kbpack.commands.query", "query", "Search a pack; answers carry citations."),
    "merge": ("kbpack.commands.merge", "merge", "Merge several packs into one (no re-embedding)."),
    "inspect": (
        "kbpack.commands.inspect",
        "inspect",
        "Show what a pack holds and how it was made.",
    ),
    "export": (
        "kbpack.commands.inspect",
        "export",
        "Dump chunks, sections or documents as JSON lines.",
    ),
    "verify": (
        "kbpack.commands.verify",
        "verify",
        "Check a pack's bytes, signature and invariants.",
    ),
    "keygen": ("kbpack.commands.verify", "keygen", "Make an Ed25519 key pair for signing packs."),
    "sign": ("kbpack.commands.verify", "sign", "Sign a pack's manifest (HDF5 bytes untouched)."),
    "diff": ("kbpack.commands.diff", "diff", "Show what changed between two packs."),
    "migrate": (
        "kbpack.commands.diff",
        "migrate",
        "Upgrade a pack's format or re-embed it with a new model.",
    ),
    "model": ("kbpack.commands.model", "model", "Embedding model: info, import, embed."),
    "eval": (
        "kbpack.commands.evaluate",
        "eval_cmd",
        "Measure retrieval: recall@k, MRR, destroyed answers.",
    ),
    "calibrate": (
        "kbpack.commands.evaluate",
        "calibrate",
        "Choose the refusal threshold from data.",
    ),
    "serve": ("kbpack.commands.serve", "serve", "A local search page and JSON API for packs."),
    "mcp": ("kbpack.commands.serve", "mcp", "Serve packs to local agents over MCP (stdio)."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return [name for name in COMMANDS if _available(name)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS or not _available(cmd_name):
            return None
        module, attr, _ = COMMANDS[cmd_name]
        command: click.Command = getattr(importlib.import_module(module), attr)
        _exit_with_return_value(command)
        return command

    def invoke(self, ctx: click.Context) -> Any:
        from kbpack.errors import KbpackError

        try:
            return super().invoke(ctx)
        except KbpackError as e:
            raise CommandError(str(e), e.exit_code) from e

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][2]) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


class CommandError(click.ClickException):
    """A library error as the CLI shows it: one line on stderr, the error's exit code."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code  # type: ignore[misc]  # click declares it on the class

    def show(self, file: Any = None) -> None:
        click.echo(f"kbpack: error: {self.message}", err=True)


def _exit_with_return_value(command: click.Command) -> None:
    """Commands return their exit code; click ignores return values, so make it exit with it."""
    cb = command.callback
    if cb is None or getattr(cb, "_kbpack_exit", False):
        return

    @functools.wraps(cb)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        rv = cb(*args, **kwargs)
        if isinstance(rv, int) and rv:
            click.get_current_context().exit(rv)
        return rv

    wrapper._kbpack_exit = True  # type: ignore[attr-defined]
    command.callback = wrapper


def _available(name: str) -> bool:
    return importlib.util.find_spec(COMMANDS[name][0]) is not None


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kbpack")
def cli() -> None:
    """kbpack: carry a body of documents to a machine with no network, verify it, search it."""


def main(argv: list[str] | None = None) -> None:
    from kbpack.errors import KbpackError

    try:
        rv = cli.main(args=argv, prog_name="kbpack", standalone_mode=False)
        sys.exit(rv if isinstance(rv, int) else 0)
    except click.exceptions.Abort:
        click.echo("kbpack: interrupted", err=True)
        sys.exit(130)
    except KeyboardInterrupt:
        click.echo("kbpack: interrupted", err=True)
        sys.exit(130)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.ClickException as e:
        e.show()
        sys.exit(2 if isinstance(e, click.UsageError) else e.exit_code)
    except KbpackError as e:  # raised outside a command (should not happen; kept as a net)
        click.echo(f"kbpack: error: {e}", err=True)
        sys.exit(e.exit_code)
    except BrokenPipeError:
        sys.exit(0)
    except Exception as e:  # a bug, not a user error: one line, the traceback on request
        if os.environ.get("KBPACK_DEBUG"):
            raise
        first = (str(e).strip().splitlines() or [""])[0]
        click.echo(
            f"kbpack: internal error: {type(e).__name__}: {first} (KBPACK_DEBUG=1 shows the traceback)",
            err=True,
        )
        sys.exit(1)
