"""``kbpack index``: add an approximate (IVF) index to an existing pack, no re-embedding
(``kbpack.ops.index``; spec/FORMAT.md §3.13, docs/scaling.md)."""

from __future__ import annotations

from pathlib import Path

import click

from kbpack.cli.commands.common import emit_json, say
from kbpack.cli.options import force_option, json_option, output_option, pack_argument
from kbpack.errors import Exit


@click.command()
@pack_argument()
@click.option("--ivf", is_flag=True, help="Build the IVF index of the pack's vectors.")
@click.option(
    "--ivf-lists",
    type=click.IntRange(min=1),
    metavar="N",
    help="Lists (clusters) of the index; implies --ivf (default: about 2 sqrt(chunks)).",
)
@output_option("Write the indexed pack here instead of replacing PACK.")
@force_option()
@json_option()
def index(
    pack: Path, ivf: bool, ivf_lists: int | None, out: Path | None, force: bool, as_json: bool
) -> int:
    """Add an approximate (IVF) index to PACK: queries then read the nearest few lists of
    vectors instead of all of them (kbpack query --exact still reads all). An index already
    there is rebuilt. The vectors are not re-embedded; a signature does not survive (sign again).
    """
    from kbpack.ops.index import add_ivf
    from kbpack.ops.outpath import check_output

    if not ivf and ivf_lists is None:
        raise click.UsageError("say which index to build: --ivf (the only kind so far)")
    dst = pack if out is None else check_output(out, inputs=[pack], force=force)
    report = add_ivf(pack, dst, ivf_lists)
    if as_json:
        emit_json(report.as_dict())
        return Exit.OK
    what = "rebuilt" if report.replaced else "added"
    say(
        f"{report.path}: IVF index {what}: {report.lists} lists over {report.chunks} chunks, "
        f"a query reads {report.probe} of them (kbpack query --probe N to change, --exact for all)"
    )
    if report.signature_dropped:
        say(f"{report.path}: the old signature covered the old manifest; sign the pack again")
    return Exit.OK
