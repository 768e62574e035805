"""``kbpack sign``: sign packs' manifests in place (the HDF5 bytes untouched)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from kbpack.cli.commands.common import emit_json, say
from kbpack.cli.options import json_option, key_option, packs_argument
from kbpack.errors import Exit


@click.command()
@packs_argument(exists=False)
@key_option("Secret key (.key) from kbpack keygen.", required=True)
@json_option()
def sign(packs: tuple[Path, ...], key: Path, as_json: bool) -> int:
    """Sign each of PACKS' manifests in place; the HDF5 bytes are not touched.

    Every pack is checked to be a file before any is signed. A set's members are signed one by
    one (kbpack sign docs-*.kbpack); signing only some of them is said.
    """
    from kbpack.errors import UsageError
    from kbpack.pack.manifest import refuse_non_regular
    from kbpack.pack.set_publish import set_info
    from kbpack.pack.sign import sign_pack

    for pack in packs:
        if not pack.exists():
            raise UsageError(f"{pack}: no such file")
        refuse_non_regular(pack, pack.stat().st_mode)
    signed = [{"path": str(pack), "key_id": sign_pack(pack, key)} for pack in packs]
    notes = _unsigned_members(packs, set_info)
    if as_json:
        emit_json(signed[0] if len(packs) == 1 else {"packs": signed, "notes": notes})
        return Exit.OK
    for s in signed:
        say(f"{s['path']}: signed by key {s['key_id']}")
    for note in notes:
        say(f"note: {note}")
    return Exit.OK


def _unsigned_members(packs: tuple[Path, ...], set_info: Any) -> list[str]:
    """Members of the sets signed here that were not given: a reader requiring signatures
    would refuse them."""
    from kbpack.pack.set_publish import member_path

    given = {p.resolve() for p in packs}
    notes: list[str] = []
    seen: set[str] = set()
    for pack in packs:
        info = set_info(pack)
        if info is None or info["id"] in seen:
            continue
        seen.add(info["id"])
        stem = pack.with_name(pack.stem.rsplit("-", 1)[0] + pack.suffix)
        missing = [
            member_path(stem, i).name
            for i in range(1, info["count"] + 1)
            if member_path(stem, i).resolve() not in given
        ]
        if missing:
            notes.append(
                f"{', '.join(missing)} of the same set not signed: "
                f"kbpack sign {stem.stem}-*{stem.suffix} --key KEY signs the whole set"
            )
    return notes
