"""Run the kbpack CLI in-process, the way most command tests do."""

from __future__ import annotations

from click.testing import CliRunner

from kbpack.cli.main import cli


def run(*args: str) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of ``kbpack ARGS``; an exception propagates (a traceback
    in a test is a bug, not an outcome)."""
    r = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr
