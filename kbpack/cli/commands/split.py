"""``kbpack split``: a pack or a set re-cut into members under a size, reusing text and vectors."""

from __future__ import annotations

from pathlib import Path

import click

from kbpack.cli.commands.common import human_size, say, show_progress, summary_wanted, table
from kbpack.cli.options import (
    force_option,
    json_option,
    key_option,
    output_option,
    packs_argument,
    quiet_option,
)
from kbpack.errors import Exit


@click.command()
@packs_argument()
@output_option(
    "A folder for the members (they keep the pack's or set's name), or NAME.kbpack "
    "(members NAME-001.kbpack, ...).",
    required=True,
)
@click.option(
    "--size",
    "--split-size",
    "size",
    required=True,
    metavar="SIZE",
    help="The largest member, as build --split-size takes it: 3.9G (FAT32), 700M, 4000000000.",
)
@key_option("Sign every new member with this secret key (.key); without it they are unsigned.")
@force_option()
@json_option()
@quiet_option()
def split(
    packs: tuple[Path, ...],
    out: Path,
    size: str,
    key: Path | None,
    force: bool,
    as_json: bool,
    quiet: bool,
) -> int:
    """Re-cut a built pack, or a whole set (any or all of its members), into members under
    SIZE: nothing is extracted or embedded again.

    Members are named NAME-001.kbpack, NAME-002.kbpack, ... and published all or nothing. A
    signature covers one file's bytes, so re-cut members are unsigned unless --key signs them
    (the summary says how to re-sign). Exit 0 on success, 2 on usage errors.
    """
    from kbpack.ops.recut import recut
    from kbpack.ops.split import parse_size
    from kbpack.runtime.progress import Progress

    report = recut(
        list(packs), out, parse_size(size, "--size"), key, Progress(show_progress(quiet, as_json))
    )
    if not summary_wanted(report.as_dict(), as_json, quiet):
        return Exit.OK
    s = report.split
    docs = sum(m["documents"] for m in s.members)
    rows = [
        ("re-cut", ", ".join(report.sources)),
        (
            "set",
            f"{s.set_id}: {len(s.members)} member{'s' if len(s.members) != 1 else ''} "
            f"of at most {human_size(s.max_bytes)}",
        ),
        ("documents", docs),
        (
            "signature",
            f"every member signed by key {report.signed_by}"
            if report.signed_by
            else "none: the members are unsigned",
        ),
    ]
    say(table(rows))
    for m in s.members:
        say(f"  member   {m['path']} ({human_size(m['bytes'])}, {m['documents']} documents)")
    for note in report.as_dict()["notes"]:
        say(f"note: {note}")
    return Exit.OK
