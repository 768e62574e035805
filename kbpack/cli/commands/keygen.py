"""``kbpack keygen``: an Ed25519 key pair for signing packs."""

from __future__ import annotations

from pathlib import Path

import click

from kbpack.cli.commands.common import emit_json, say, table
from kbpack.cli.options import json_option, output_option
from kbpack.errors import Exit


@click.command()
@output_option("Writes STEM.key (secret, mode 0600) and STEM.pub.", dest="stem", required=True)
@json_option()
def keygen(stem: Path, as_json: bool) -> int:
    """Make an Ed25519 key pair for signing packs."""
    from kbpack.ops.outpath import check_output
    from kbpack.pack.sign import keygen as make_keys

    for suffix in (".key", ".pub"):  # a key is never replaced: a lost secret key cannot be undone
        check_output(stem.with_name(stem.name + suffix), pack=False)

    secret, public, kid = make_keys(stem)
    if as_json:
        emit_json({"secret_key": str(secret), "public_key": str(public), "key_id": kid})
        return Exit.OK
    say(
        table(
            [("secret key", f"{secret} (keep it private)"), ("public key", public), ("key id", kid)]
        )
    )
    say(f"Give {public.name} to whoever verifies: kbpack verify PACK --key {public.name}")
    return Exit.OK
