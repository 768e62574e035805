"""``kbpack split PACK -o DIR --size 3.9G``: re-cut a built pack, or a whole set, into members
under a new size without extracting or embedding anything again.

A set is first merged into one hidden pack beside the output (``merge_packs``: documents,
vectors and pieces copied as stored, BM25 rebuilt; the members of one build merge back in the
build's order), then split as ``build --split-size`` splits (``split_pack``). A member of a set
stands for its whole set: every member must be present and of the same set.

Signatures: a signature covers one member's manifest, and every re-cut member has new bytes,
so the members come out unsigned; ``key`` signs each of them (the report says which).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kbpack.errors import UsageError
from kbpack.ops.merge import merge_packs
from kbpack.ops.split import SplitReport, split_pack
from kbpack.pack.manifest import read_header
from kbpack.pack.set_publish import member_path, set_info
from kbpack.pack.tempfiles import temp_path_for
from kbpack.runtime.progress import Progress

_MEMBER = re.compile(r"^(.*)-(\d{3,})$")


@dataclass
class RecutReport:
    sources: list[str]
    split: SplitReport
    signed_before: list[str]  # key ids of the source members' signatures
    signed_by: str | None = None  # the key that signed every new member
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "sources": self.sources,
            **self.split.as_dict(),
            "signed_before": self.signed_before,
            "signed_by": self.signed_by,
            "notes": [*self.split.notes, *self.notes],
        }


def set_stem(pack: Path) -> Path:
    """``docs-003.kbpack`` (a set member) -> ``docs.kbpack``; any other pack -> itself."""
    m = _MEMBER.match(pack.stem)
    if set_info(pack) is not None and m:
        return pack.with_name(m.group(1) + pack.suffix)
    return pack


def the_packs(packs: Sequence[Path]) -> list[Path]:
    """The packs to re-cut: one pack, or every member of one set (any of them given)."""
    if not packs:
        raise UsageError("give the pack to split: kbpack split PACK -o DIR --size 3.9G")
    infos = [set_info(p) for p in packs]
    for p in packs:
        if not p.is_file():
            raise UsageError(f"{p}: no such file")
    if all(i is None for i in infos):
        if len(packs) > 1:
            raise UsageError(
                "give one pack or the members of one set; merge several packs first: "
                "kbpack merge A.kbpack B.kbpack -o ONE.kbpack"
            )
        read_header(packs[0])  # a one-line error for a file that is not a pack
        return [packs[0]]
    ids = {i["id"] for i in infos if i is not None}
    if None in infos or len(ids) > 1:
        raise UsageError("give the members of one set only (kbpack split NAME-*.kbpack)")
    info = next(i for i in infos if i is not None)
    stem = set_stem(packs[0])
    members = [member_path(stem, i) for i in range(1, info["count"] + 1)]
    for i, m in enumerate(members, 1):
        theirs = set_info(m)
        if theirs is None or theirs["id"] != info["id"] or theirs["index"] != i:
            raise UsageError(
                f"{m}: member {i} of {info['count']} of set {info['id']} is not there; "
                "copy the whole set before re-cutting it"
            )
    return members


def output_path(packs: Sequence[Path], out: Path) -> Path:
    """``-o``: a folder (the members keep the set's name there) or ``NAME.kbpack``."""
    if out.suffix == ".kbpack" and not out.is_dir():
        out.parent.mkdir(parents=True, exist_ok=True)
        return out
    out.mkdir(parents=True, exist_ok=True)
    return out / set_stem(packs[0]).name


def recut(
    packs: Sequence[Path],
    out: Path,
    max_bytes: int,
    key: Path | None = None,
    progress: Progress | None = None,
    *,
    force: bool = False,
) -> RecutReport:
    """Re-cut ``packs`` (a pack, or a set's members) into members of ``out`` under ``max_bytes``."""
    from kbpack.ops.outpath import check_output
    from kbpack.pack.sign import check_secret_key, sign_pack

    if key is not None:
        check_secret_key(key)  # before the work, not after it
    sources = the_packs(list(packs))
    target = output_path(sources, out)
    # -o never replaces an input: re-cutting a set onto its own names is refused
    check_output(member_path(target, 1), inputs=sources, force=force)
    signed_before = []
    for p in sources:
        sig = read_header(p).signature
        if sig is not None:
            signed_before.append(str(sig.get("key_id")))
    if len(sources) == 1:
        split = split_pack(sources[0], target, max_bytes, progress)
    else:
        tmp = temp_path_for(target)  # named as build --split-size names its whole pack
        whole = tmp.with_name(tmp.name + ".unsplit")
        try:
            merge_packs(sources, whole, progress=progress)
            split = split_pack(whole, target, max_bytes, progress)
        finally:
            whole.unlink(missing_ok=True)
    report = RecutReport([str(p) for p in sources], split, sorted(set(signed_before)))
    if key is not None:
        ids = {sign_pack(Path(m["path"]), key) for m in split.members}
        report.signed_by = ids.pop()
    elif signed_before:
        report.notes.append(
            f"the members are unsigned: the signature of key {', '.join(report.signed_before)} "
            "covered the old bytes; re-sign them: kbpack sign "
            f"{target.parent / target.stem}-*{target.suffix} --key KEY.key"
        )
    return report


__all__ = ["RecutReport", "output_path", "recut", "set_stem", "the_packs"]
