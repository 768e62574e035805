"""Typed errors. The library raises these; only the CLI turns them into messages and exit codes.

Every message is one line that names the file, the element and, where there is one, the fix.
"""

from __future__ import annotations

from enum import IntEnum


class Exit(IntEnum):
    """The exit codes of the ``kbpack`` command; ``kbpack.cli.main.EXIT`` says what each one means."""

    OK = 0
    FAILURE = 1  # failure, findings (verify), differences (diff), a failed document (--strict)
    USAGE = 2  # bad option or value, missing/unreadable input, not a pack, output refused
    REFUSED = 3  # query refused: nothing passes the threshold
    INTERRUPTED = 130  # Ctrl-C or SIGTERM


class KbpackError(Exception):
    """Base of every error kbpack raises on purpose. ``exit_code`` is what the CLI returns."""

    exit_code: int = Exit.FAILURE


class UsageError(KbpackError):
    """The command line or an input file given by the user is wrong."""

    exit_code = Exit.USAGE


class InputError(UsageError):
    """An input file is missing or cannot be read (permissions, a folder given as a file)."""


class OutputRefused(UsageError):
    """The output path would destroy something (a non-pack file, an input, a device) or cannot
    be written (missing or read-only folder). Raised before any work starts."""


class PackError(KbpackError):
    """A pack cannot be read: damaged or hostile."""

    exit_code = Exit.FAILURE


class NotAPackError(PackError):
    """The file is not a kbpack pack at all (no magic, or no such file): a usage error, since
    the user named the wrong file, not a damaged pack."""

    exit_code = Exit.USAGE


class NewerFormatError(PackError):
    """The pack was written by a newer kbpack."""


class ModelError(KbpackError):
    """The embedding model is missing, cannot be loaded, or does not match the pack."""

    exit_code = Exit.FAILURE


class ExtractionError(KbpackError):
    """One document could not be turned into text. Recorded on the document, never fatal."""

    def __init__(self, reason: str, stage: str = "extract") -> None:
        super().__init__(reason)
        self.reason = reason
        self.stage = stage


def describe(e: BaseException) -> str:
    """``"TypeName: first line of the message"``: how a foreign exception is shown in one line."""
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0] if lines else ''}".rstrip(": ")
