"""``kbpack completion SHELL``: the shell completion script, for commands, options and values."""

from __future__ import annotations

import click

from kbpack.cli.commands.common import Choice, emit_json
from kbpack.cli.options import json_option
from kbpack.errors import Exit

SHELLS = ("bash", "zsh", "fish")


@click.command()
@click.argument("shell", type=Choice(SHELLS))
@json_option()
def completion(shell: str, as_json: bool) -> int:
    """Print the completion script for SHELL (bash, zsh, fish).

    \b
    bash:  eval "$(kbpack completion bash)"        (in ~/.bashrc)
    zsh:   eval "$(kbpack completion zsh)"         (in ~/.zshrc)
    fish:  kbpack completion fish > ~/.config/fish/completions/kbpack.fish
    """
    from click.shell_completion import get_completion_class

    from kbpack.cli.main import cli

    cls = get_completion_class(shell)
    assert cls is not None  # SHELLS are the ones click ships
    script = cls(cli, {}, "kbpack", "_KBPACK_COMPLETE").source()
    if as_json:
        emit_json({"shell": shell, "script": script})
    else:
        click.echo(script)
    return Exit.OK
