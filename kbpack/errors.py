"""Typed errors. The library raises these; only the CLI turns them into messages and exit codes.

Every message is one line that names the file, the element and, where there is one, the fix.
"""

from __future__ import annotations


class KbpackError(Exception):
    """Base of every error kbpack raises on purpose. ``exit_code`` is what the CLI returns."""

    exit_code = 1


class UsageError(KbpackError):
    """The command line or an input file given by the user is wrong."""

    exit_code = 2


class PackError(KbpackError):
    """A pack cannot be read: damaged, hostile, or not a pack at all."""

    exit_code = 1


class NewerFormatError(PackError):
    """The pack was written by a newer kbpack."""


class ModelError(KbpackError):
    """The embedding model is missing, cannot be loaded, or does not match the pack."""

    exit_code = 1


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
