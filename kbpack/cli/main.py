"""The ``kbpack`` command: a thin click group.

Commands live in ``kbpack/cli/commands/`` and are imported only when run, so ``kbpack --help`` and
a cold ``kbpack query`` do not pay for modules they do not use. Library code raises typed
errors (``kbpack.errors``); this module alone turns them, and the OS errors of ordinary I/O
faults, into one-line messages and the exit codes of ``EXIT``.
"""

from __future__ import annotations

import errno
import functools
import importlib
import importlib.util
import os
import signal
import sys
import threading
from typing import Any

import click

from kbpack.cli.commands.common import say
from kbpack.errors import Exit
from kbpack.runtime import interrupt
from kbpack.runtime.terminal import printable
from kbpack.version import __version__

# The exit codes, once. README's table is checked against this (tests/test_cli_contract.py).
EXIT: dict[Exit, str] = {
    Exit.OK: "success (a query with results, an intact pack, identical packs; also a command "
    "whose stdout is closed early by its reader, as `head` does: nothing is printed)",
    Exit.FAILURE: "failure: verify findings, diff differences, a build with no document (unless "
    "`--allow-empty`), a failed or skipped document with `--strict` (files of unsupported types "
    "aside), a damaged pack, a pack refused by the signature policy (docs/verify.md), a failed "
    "`--batch` line, a full disk",
    Exit.USAGE: "usage error: unknown option or bad value, missing or unreadable input, not a "
    "pack, a path that is not a regular file (a FIFO, a device, a socket: refused by every "
    "command), output path refused, a filter that matches nothing, `--mode dense` without the "
    "model, `--require-signature` with no trusted key configured",
    Exit.REFUSED: "query refused: nothing passes the refusal threshold",
    Exit.INTERRUPTED: "interrupted: Ctrl-C or SIGTERM (the output path is left as it was; a "
    "signal that lands after the new file was renamed into place says so: `interrupted after "
    "writing PATH; the new file is complete`)",
}

# name -> (module, attribute, one-line help), in the order a user meets them (--help lists them
# so). The help is here so --help imports nothing.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "build": ("kbpack.cli.commands.build", "build", "Build a pack from folders and files."),
    "query": ("kbpack.cli.commands.query", "query", "Search a pack; answers carry citations."),
    "inspect": (
        "kbpack.cli.commands.inspect",
        "inspect",
        "Show what a pack holds and how it was made.",
    ),
    "export": (
        "kbpack.cli.commands.inspect",
        "export",
        "Dump chunks, sections or documents as JSON lines.",
    ),
    "ask": (
        "kbpack.cli.commands.ask",
        "ask",
        "Answer from a local chat model; every sentence checked against its citation.",
    ),
    "verify": (
        "kbpack.cli.commands.verify",
        "verify",
        "Check a pack's bytes, signature and invariants.",
    ),
    "keygen": (
        "kbpack.cli.commands.verify",
        "keygen",
        "Make an Ed25519 key pair for signing packs.",
    ),
    "sign": (
        "kbpack.cli.commands.verify",
        "sign",
        "Sign a pack's manifest (HDF5 bytes untouched).",
    ),
    "update": (
        "kbpack.cli.commands.update",
        "update",
        "Rebuild a pack, reusing unchanged documents.",
    ),
    "diff": ("kbpack.cli.commands.diff", "diff", "Show what changed between two packs."),
    "migrate": (
        "kbpack.cli.commands.diff",
        "migrate",
        "Upgrade a pack's format or re-embed it with a new model.",
    ),
    "merge": (
        "kbpack.cli.commands.merge",
        "merge",
        "Merge several packs into one (no re-embedding).",
    ),
    "split": (
        "kbpack.cli.commands.merge",
        "split",
        "Re-cut a pack or a set into members under a size (no re-embedding).",
    ),
    "index": (
        "kbpack.cli.commands.index",
        "index",
        "Add an approximate (IVF) index to a pack (no re-embedding).",
    ),
    "model": ("kbpack.cli.commands.model", "model", "Embedding model: info, import, embed."),
    "eval": (
        "kbpack.cli.commands.evaluate",
        "eval_cmd",
        "Measure retrieval: recall@k, MRR, destroyed answers.",
    ),
    "calibrate": (
        "kbpack.cli.commands.calibrate",
        "calibrate",
        "Choose the refusal threshold from data.",
    ),
    "serve": ("kbpack.cli.commands.serve", "serve", "A local search page and JSON API for packs."),
    "mcp": ("kbpack.cli.commands.serve", "mcp", "Serve packs to local agents over MCP (stdio)."),
    "bundle": (
        "kbpack.cli.commands.bundle",
        "bundle",
        "Wheels, model and install script for a machine with no network.",
    ),
    "completion": (
        "kbpack.cli.commands.completion",
        "completion",
        "Print the shell completion script (bash, zsh, fish).",
    ),
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

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if name and not name.startswith("-") and self.get_command(ctx, name) is None:
            import difflib  # only for a mistyped command

            close = difflib.get_close_matches(name, self.list_commands(ctx), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise click.UsageError(f"no such command {name!r}{hint}", ctx)
        return super().resolve_command(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        from kbpack.errors import KbpackError

        try:
            return super().invoke(ctx)
        except KbpackError as e:
            raise CommandError(str(e), e.exit_code) from e
        except click.UsageError as e:  # click's three-line usage error, as one line
            where = e.ctx.command_path if e.ctx else "kbpack"
            raise CommandError(f"{e.format_message()} (see {where} --help)", Exit.USAGE) from e
        except OSError as e:  # an ordinary I/O fault (read-only folder, disk full): one line
            if isinstance(e, BrokenPipeError) and _stdout_reader_gone():
                # ``| head`` has what it wanted: not an error (click would exit 1); later
                # flushes, Python's at exit included, go to /dev/null
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
                return Exit.OK
            message, code = os_error_line(e)
            raise CommandError(message, code) from e
        except KeyboardInterrupt as e:
            raise Interrupted() from e

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][2]) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def _stdout_reader_gone() -> bool:
    """Whether stdout is a pipe whose reading end was closed (poll says POLLERR), as opposed to
    some other pipe breaking (a sandbox child's), which stays an error."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & select.POLLERR for _, ev in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no real stdout (tests capture it)
        return False


class _Printable:
    """A stream whose writes are escaped like ``say``'s, for click's own messages."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        return int(self.stream.write(printable(text, lines=True)))

    def flush(self) -> None:
        self.stream.flush()


class CommandError(click.ClickException):
    """A library error as the CLI shows it: one line on stderr, the error's exit code."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(" ".join(message.split("\n")))  # one line, always
        self.exit_code = exit_code  # type: ignore[misc]  # click declares it on the class

    def show(self, file: Any = None) -> None:
        say(f"kbpack: error: {self.message}", err=True)


class Interrupted(click.ClickException):
    exit_code = Exit.INTERRUPTED

    def __init__(self) -> None:
        super().__init__("interrupted")

    def show(self, file: Any = None) -> None:
        say(interrupted_line(), err=True)


def interrupted_line() -> str:
    """What an interrupt did: nothing visible, or (a signal after a commit) a complete new file."""
    done = interrupt.published_paths()
    if not done:
        return "kbpack: interrupted"
    what = ", ".join(str(p) for p in done)
    return f"kbpack: interrupted after writing {what}; the new file is complete"


# errno -> (what happened, the fix, exit code). Path problems are usage errors (the user can fix
# the command line); a full disk or an I/O error is a failure of the run.
_OS_FIXES: dict[int, tuple[str, str, Exit]] = {
    errno.ENOENT: ("no such file or folder", "check the path", Exit.USAGE),
    errno.ENOTDIR: ("a part of the path is a file, not a folder", "fix the path", Exit.USAGE),
    errno.EISDIR: ("is a folder", "give a file", Exit.USAGE),
    errno.EACCES: (
        "permission denied",
        "choose a path you may use, or fix its permissions",
        Exit.USAGE,
    ),
    errno.EPERM: ("operation not permitted", "choose a path you may use", Exit.USAGE),
    errno.EROFS: ("read-only file system", "write to a folder on a writable disk", Exit.USAGE),
    errno.ENAMETOOLONG: ("file name too long", "choose a shorter name", Exit.USAGE),
    errno.ENOSPC: (
        "no space left on the device",
        "free space or write to another disk",
        Exit.FAILURE,
    ),
    errno.EDQUOT: ("disk quota exceeded", "free space or write to another disk", Exit.FAILURE),
    errno.EFBIG: (
        "file too large for this file system",
        "write to another file system (FAT32 stops at 4 GiB)",
        Exit.FAILURE,
    ),
    errno.EIO: ("input/output error", "check the disk (dmesg), then run again", Exit.FAILURE),
}


def os_error_line(e: OSError) -> tuple[str, int]:
    """One line naming the file, what the OS said and the fix; and the exit code."""
    where = e.filename if e.filename is not None else "kbpack"
    what, fix, code = _OS_FIXES.get(
        e.errno or 0, (e.strerror or str(e), "check the path and the disk", Exit.FAILURE)
    )
    return f"{where}: {what}; {fix}", code


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


def _on_signal(signum: int, frame: Any) -> None:
    # recorded first: the KeyboardInterrupt may be swallowed (kbpack/runtime/interrupt.py says where)
    interrupt.request()
    if not interrupt.deferred():  # inside a commit's rename: raised when it is done
        raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> None:
    """The ``kbpack`` process (``argv`` None: its own command line); tests pass ``argv``."""
    interrupt.reset()
    old = _install_signal_handlers()
    old_hook = sys.unraisablehook
    sys.unraisablehook = _quiet_interrupts(old_hook)
    try:
        try:
            try:
                code = _run(argv)
            finally:
                # the run is over: a signal from here to the exit is recorded and reported
                # below, never a KeyboardInterrupt traceback nor a silent death by SIGTERM
                interrupt.hold()
        except KeyboardInterrupt:  # a signal between the run's end and hold()
            interrupt.request()
            code = Exit.OK  # reported just below
        if interrupt.requested() and code != Exit.INTERRUPTED:
            say(interrupted_line(), err=True)
            code = Exit.INTERRUPTED
    finally:
        sys.unraisablehook = old_hook
        if argv is not None:  # main() called in-process (tests): give the caller its handlers
            _restore_signal_handlers(old)
            interrupt.reset()
    sys.exit(int(code))


def _quiet_interrupts(hook: Any) -> Any:
    """A KeyboardInterrupt Python cannot raise (in a finalizer, a ctypes callback) prints a
    traceback; it is already recorded (kbpack/runtime/interrupt.py), so print nothing."""

    def unraisable(info: Any) -> None:
        if not isinstance(info.exc_value, KeyboardInterrupt):
            hook(info)

    return unraisable


def _install_signal_handlers() -> dict[int, Any]:
    if threading.current_thread() is not threading.main_thread():
        return {}  # only the main thread may set handlers
    # SIGTERM gets Ctrl-C's cleanup (temp files removed, output untouched) and its exit code.
    return {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}


def _restore_signal_handlers(old: dict[int, Any]) -> None:
    for sig, handler in old.items():
        signal.signal(sig, handler)


def _run(argv: list[str] | None) -> int:
    from kbpack.errors import KbpackError

    try:
        rv = cli.main(args=argv, prog_name="kbpack", standalone_mode=False)
        return rv if isinstance(rv, int) else Exit.OK
    except (click.exceptions.Abort, KeyboardInterrupt):
        say(interrupted_line(), err=True)
        return Exit.INTERRUPTED
    except click.exceptions.Exit as e:
        return e.exit_code
    except click.ClickException as e:
        # click's own messages quote what was typed
        e.show(_Printable(sys.stderr))  # type: ignore[arg-type]
        return Exit.USAGE if isinstance(e, click.UsageError) else e.exit_code
    except KbpackError as e:  # raised outside a command (should not happen; kept as a net)
        say(f"kbpack: error: {e}", err=True)
        return e.exit_code
    except BrokenPipeError:
        # the reader went away (| head): not an error; keep Python from complaining at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return Exit.OK
    except Exception as e:  # a bug, not a user error: one line, the traceback on request
        if os.environ.get("KBPACK_DEBUG"):
            raise
        first = (str(e).strip().splitlines() or [""])[0]
        say(
            f"kbpack: internal error: {type(e).__name__}: {first} (KBPACK_DEBUG=1 shows the traceback)",
            err=True,
        )
        return Exit.FAILURE
