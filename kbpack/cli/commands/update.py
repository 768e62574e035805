"""``kbpack update``: rebuild a pack from its sources, reusing every unchanged document."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from kbpack.cli.commands.build import build_options, run_build_command
from kbpack.cli.options import key_option, output_option, pack_argument, sources_argument


@click.command()
@pack_argument(exists=False)
@sources_argument()
@output_option("Write the new pack here (default: replace PACK atomically).", dir_okay=False)
@key_option("Sign the new pack with this secret key (.key); an update drops the old signature.")
@build_options
def update(
    pack: Path, sources: tuple[Path, ...], out: Path | None, key: Path | None, **kw: Any
) -> int:
    """Rebuild PACK from SOURCES, reusing the documents that did not change.

    A document whose source bytes, extractor, pipeline and model are unchanged keeps its text,
    chunks and vectors from PACK (no extraction, no embedding); changed sources are extracted
    again and removed ones dropped. The result holds what a fresh build would (kbpack diff
    shows it). Without --model the pack's own model is kept (the default one, or the one the
    pack carries); --model with another model re-embeds every chunk. Give the chunking options
    (--max-chars, --overlap) of the original build. The new pack is unsigned (its bytes
    changed): --key signs it, else the summary says how to. Exit codes as for build.
    """
    from kbpack.pack.manifest import read_header
    from kbpack.pack.sign import check_secret_key

    header = read_header(pack)  # not a pack, or no such file: say so before the output path
    if key is not None:
        check_secret_key(key)  # before the build, not after an hour of it
    signer = header.signature.get("key_id") if header.signature else None
    return run_build_command(sources, out or pack, reuse=pack, sign=(signer, key), **kw)
