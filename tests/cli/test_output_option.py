"""Every command that writes a file takes it as ``-o/--output PATH``, declared once
(kbpack/commands/common.py ``output_option``): the same spelling, the same path type."""

from __future__ import annotations

import click

from kbpack.cli.main import COMMANDS, cli


def _commands() -> dict[str, click.Command]:
    ctx = click.Context(cli)
    found: dict[str, click.Command] = {}
    for name in COMMANDS:
        cmd = cli.get_command(ctx, name)
        assert cmd is not None, name
        if isinstance(cmd, click.Group):
            for sub in cmd.commands.values():
                found[f"{name} {sub.name}"] = sub
        else:
            found[name] = cmd
    return found


def test_output_options_share_one_spelling() -> None:
    with_output = {}
    for name, cmd in _commands().items():
        for p in cmd.params:
            if "--output" in p.opts or "-o" in p.opts:
                with_output[name] = p
    assert {"build", "merge", "update", "migrate", "export", "calibrate", "keygen"} <= set(
        with_output
    ), sorted(with_output)
    assert "model import" in with_output
    for name, p in with_output.items():
        assert p.opts == ["-o", "--output"], (name, p.opts)
        assert isinstance(p.type, click.Path), name
        assert p.help, name
