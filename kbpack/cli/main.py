"""The ``kbpack`` command: a thin click group.

Commands live in ``kbpack/cli/commands/`` (one module each) and are imported only when run, so
``kbpack --help`` and a cold ``kbpack query`` do not pay for modules they do not use. A command
returns its exit code (an ``Exit``) or raises. Library code raises typed errors
(``kbpack.errors``); one function here, :func:`exit_code`, turns whatever ended a command (a
typed error, click's usage error, an OS error of an ordinary I/O fault, Ctrl-C, a bug) into one
line on stderr and the exit code of ``EXIT``, for ``kbpack`` and for click's test runner alike.
"""

from __future__ import annotations

import errno
import importlib
import importlib.util
import os
import signal
import sys
import threading
from typing import Any

import click

from kbpack.cli.commands.common import say
from kbpack.errors import Exit, KbpackError
from kbpack.runtime import interrupt
from kbpack.runtime.terminal import printable
from kbpack.version import __version__

# The exit codes, once. README's table is checked against this (tests/cli/test_cli_contract.py).
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

# name -> the one-line help, in the order a user meets them (--help lists them so). The help is
# here so that --help imports nothing. A command is the function of its name in the module of
# its name, kbpack/cli/commands/NAME.py, but for the ones in _MODULES.
COMMANDS: dict[str, str] = {
    "build": "Build a pack from folders and files.",
    "query": "Search a pack; answers carry citations.",
    "inspect": "Show what a pack holds and how it was made.",
    "export": "Dump chunks, sections or documents as JSON lines.",
    "ask": "Answer from a local chat model; every sentence checked against its citation.",
    "verify": "Check a pack's bytes, signature and invariants.",
    "keygen": "Make an Ed25519 key pair for signing packs.",
    "sign": "Sign a pack's manifest (HDF5 bytes untouched).",
    "update": "Rebuild a pack, reusing unchanged documents.",
    "diff": "Show what changed between two packs.",
    "migrate": "Upgrade a pack's format or re-embed it with a new model.",
    "merge": "Merge several packs into one (no re-embedding).",
    "split": "Re-cut a pack or a set into members under a size (no re-embedding).",
    "index": "Add an approximate (IVF) index to a pack (no re-embedding).",
    "model": "Embedding model: info, import, embed.",
    "eval": "Measure retrieval: recall@k, MRR, destroyed answers.",
    "calibrate": "Choose the refusal threshold from data.",
    "serve": "A local search page and JSON API for packs.",
    "mcp": "Serve packs to local agents over MCP (stdio).",
    "bundle": "Wheels, model and install script for a machine with no network.",
    "cache": "Show or clear this machine's kbpack cache.",
    "completion": "Print the shell completion script (bash, zsh, fish).",
}
# name -> (module, function) where they are not the name (``eval`` is a Python builtin)
_MODULES: dict[str, tuple[str, str]] = {"eval": ("evaluate", "eval_cmd")}


def _where(name: str) -> tuple[str, str]:
    """The module and the function of the command ``name``."""
    module, function = _MODULES.get(name, (name, name))
    return f"kbpack.cli.commands.{module}", function


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return [name for name in COMMANDS if _available(name)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS or not _available(cmd_name):
            return None
        module, function = _where(cmd_name)
        command: click.Command = getattr(importlib.import_module(module), function)
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
        ctx.meta[_STARTED] = True  # a usage error from here on is the command's: one line
        try:
            return super().invoke(ctx)
        except (KeyboardInterrupt, OSError) as e:
            # past click's main untouched (it would print a blank line, or exit 1 on EPIPE)
            raise _Carried(e) from e

    def main(  # type: ignore[override]
        self,
        args: Any = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> int:
        """click's main, every ending mapped by :func:`exit_code`: returned, or (standalone,
        as click's test runner calls it) the process's exit status."""
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
            code = rv if isinstance(rv, int) else Exit.OK  # a command's Exit, or None
        except BaseException as e:
            code = exit_code(e)
        if standalone_mode:
            sys.exit(code)
        return code

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name]) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


_STARTED = "kbpack.started"


class _Carried(Exception):
    """An exception of a command carried past click's own handling to :func:`exit_code`."""

    def __init__(self, inner: BaseException) -> None:
        super().__init__(str(inner))
        self.inner = inner


def exit_code(e: BaseException) -> int:
    """The one place where an ending becomes an exit code: the line it prints on stderr (none
    for a clean ending) and the code (``EXIT``). ``KBPACK_DEBUG=1`` re-raises a bug."""
    if isinstance(e, _Carried):
        e = e.inner
    if isinstance(e, SystemExit):  # shell completion answers and exits
        return e.code if isinstance(e.code, int) else (Exit.OK if e.code is None else Exit.FAILURE)
    if isinstance(e, click.exceptions.Exit):  # --help, --version
        return e.exit_code
    if isinstance(e, click.exceptions.Abort | KeyboardInterrupt):
        say(interrupted_line(), err=True)
        return Exit.INTERRUPTED
    if isinstance(e, click.UsageError) and (e.ctx is None or e.ctx.meta.get(_STARTED)):
        where = e.ctx.command_path if e.ctx else "kbpack"  # click's three lines, as one
        return _error_line(f"{e.format_message()} (see {where} --help)", Exit.USAGE)
    if isinstance(e, click.ClickException):  # before any command: click's own words
        e.show(_Printable(sys.stderr))  # type: ignore[arg-type]
        return Exit.USAGE if isinstance(e, click.UsageError) else e.exit_code
    if isinstance(e, KbpackError):
        return _error_line(str(e), e.exit_code)
    if isinstance(e, BrokenPipeError) and _stdout_reader_gone():
        # ``| head`` has what it wanted: not an error; later flushes, Python's at exit
        # included, go to /dev/null
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return Exit.OK
    if isinstance(e, OSError):  # an ordinary I/O fault (read-only folder, disk full)
        return _error_line(*os_error_line(e))
    if not isinstance(e, Exception) or os.environ.get("KBPACK_DEBUG"):
        raise e
    first = (str(e).strip().splitlines() or [""])[0]
    say(
        f"kbpack: internal error: {type(e).__name__}: {first} (KBPACK_DEBUG=1 shows the traceback)",
        err=True,
    )
    return Exit.FAILURE


def _error_line(message: str, code: int) -> int:
    one_line = " ".join(message.split("\n"))  # always
    say(f"kbpack: error: {one_line}", err=True)
    return code


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


def interrupted_line() -> str:
    """What an interrupt did: nothing visible, or (a signal after a commit) a complete new file."""
    done = interrupt.published_paths()
    if not done:
        return "kbpack: interrupted"
    what = ", ".join(str(p) for p in done)
    return f"kbpack: interrupted after writing {what}; the new file is complete"


# errno -> (what happened, the fix). A path problem is a usage error (the user can fix the
# command line); a full disk or an I/O error is a failure of the run.
_PATH_FAULTS: dict[int, tuple[str, str]] = {
    errno.ENOENT: ("no such file or folder", "check the path"),
    errno.ENOTDIR: ("a part of the path is a file, not a folder", "fix the path"),
    errno.EISDIR: ("is a folder", "give a file"),
    errno.EACCES: ("permission denied", "choose a path you may use, or fix its permissions"),
    errno.EPERM: ("operation not permitted", "choose a path you may use"),
    errno.EROFS: ("read-only file system", "write to a folder on a writable disk"),
    errno.ENAMETOOLONG: ("file name too long", "choose a shorter name"),
}
_RUN_FAULTS: dict[int, tuple[str, str]] = {
    errno.ENOSPC: ("no space left on the device", "free space or write to another disk"),
    errno.EDQUOT: ("disk quota exceeded", "free space or write to another disk"),
    errno.EFBIG: (
        "file too large for this file system",
        "write to another file system (FAT32 stops at 4 GiB)",
    ),
    errno.EIO: ("input/output error", "check the disk (dmesg), then run again"),
}


def os_error_line(e: OSError) -> tuple[str, int]:
    """One line naming the file, what the OS said and the fix; and the exit code."""
    where = e.filename if e.filename is not None else "kbpack"
    err = e.errno or 0
    if err in _PATH_FAULTS:
        (what, fix), code = _PATH_FAULTS[err], Exit.USAGE
    else:
        unknown = (e.strerror or str(e), "check the path and the disk")
        (what, fix), code = _RUN_FAULTS.get(err, unknown), Exit.FAILURE
    return f"{where}: {what}; {fix}", code


def _available(name: str) -> bool:
    return importlib.util.find_spec(_where(name)[0]) is not None


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
    return cli.main(args=argv, prog_name="kbpack", standalone_mode=False)  # type: ignore[no-any-return]
