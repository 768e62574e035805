"""Publishing a pack set all or nothing, and reading only the set that was published.

A set's members ``NAME-001.kbpack``, ``NAME-002.kbpack``, ... cannot all be renamed into place
at once: a process killed between two renames (SIGKILL, a power cut) would leave some members
of the new set beside some of the old one. So member 001 is the set's commit record and is
renamed last (spec §2, ``set``):

1. every other member I of the old set is first renamed to a hidden backup
   ``.NAME-00I.kbpack.set-OLDID`` (named after the set it belongs to), then the new member is
   renamed to ``NAME-00I.kbpack``;
2. the new ``NAME-001.kbpack`` replaces the old one in one rename: from then on the new set is
   the set;
3. the backups, and the old set's members past the new set's count, are removed.

Readers (:func:`committed_members`) take member 001's set as the set: a member beside it that
belongs to another set is read from the backup of the committed set when there is one (the
publish of a newer set was cut short: the old set is still whole), and left out with a note
otherwise. So a reader sees the old set or the new one, never a mix. A failure (an I/O error)
before the commit puts every old member back; after a kill, the next publish of the set
finishes the cleanup.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from kbpack.pack.manifest import hash_hdf5_bytes, read_header
from kbpack.pack.structure import Finding
from kbpack.pack.write import _fsync_dir
from kbpack.runtime import interrupt

_MEMBER = re.compile(r"^(.*)-(\d{3,})$")


def member_path(out: Path, index: int) -> Path:
    """``NAME.kbpack`` -> ``NAME-001.kbpack`` (1-based)."""
    return out.with_name(f"{out.stem}-{index:03d}{out.suffix or '.kbpack'}")


def backup_path(member: Path, set_id: str) -> Path:
    """Where a member of set ``set_id`` waits while a newer set is being published."""
    return member.with_name(f".{member.name}.set-{set_id}")


def set_info(path: Path) -> dict[str, Any] | None:
    """A pack's manifest ``set`` (``{"id", "index", "count"}``), or None: not a set member, or
    no readable pack there."""
    from kbpack.pack.manifest import read_header

    try:
        info = read_header(path).manifest.extra.get("set")
    except Exception:  # missing, damaged, not a pack: not a member here (verify says more)
        return None
    if not isinstance(info, dict):
        return None
    try:
        return {"id": str(info["id"]), "index": int(info["index"]), "count": int(info["count"])}
    except (KeyError, TypeError, ValueError):
        return None


def _backups(out: Path) -> list[Path]:
    """Every member backup beside ``out``'s set (of any set id)."""
    pattern = re.compile(rf"\.{re.escape(out.stem)}-\d{{3,}}{re.escape(out.suffix)}\.set-[0-9a-f]+")
    with contextlib.suppress(OSError):
        return sorted(p for p in out.parent.iterdir() if pattern.fullmatch(p.name))
    return []


def _backed_up(out: Path) -> set[int]:
    """The member indices that have a backup beside ``out``'s set (of any set id). The index is
    the one after the set's stem: a set id may itself hold a run of digits after a '-'."""
    at = len(out.stem) + 2  # ".STEM-" comes first
    return {int(re.match(r"\d{3,}", p.name[at:]).group()) for p in _backups(out)}  # type: ignore[union-attr]


def publish_set(parts: Sequence[Path], out: Path) -> list[Path]:
    """Rename the complete members ``parts`` (hidden temp files, in index order) into place as
    the set ``out`` names, member 001 last; returns the members' paths. Signals are held
    until it is done (kbpack/runtime/interrupt.py); an exception before the commit leaves the old set
    as it was."""
    finals = [member_path(out, i) for i in range(1, len(parts) + 1)]
    old = set_info(finals[0])
    old_id = old["id"] if old is not None and old["index"] == 1 else None
    # (member, its old file's backup or None, whether the new member is in place)
    moved: list[list[Any]] = []
    interrupt.check()
    with interrupt.uninterruptible():
        try:
            for part, final in list(zip(parts, finals, strict=True))[1:]:
                backup = None
                if old_id is not None:
                    backup = backup_path(final, old_id)
                    mine = set_info(final)
                    if mine is not None and mine["id"] == old_id and not backup.exists():
                        _keep(final, backup)  # the old member stays readable there
                moved.append([final, backup, False])
                os.replace(part, final)
                moved[-1][2] = True
                interrupt.published(final)
            _fsync_dir(out.parent)
            os.replace(parts[0], finals[0])  # the commit: from here on the new set is the set
        except BaseException:
            _undo(moved)
            raise
        interrupt.published(finals[0])
        _fsync_dir(out.parent)
        _remove_old(out, old_id, len(finals))
    return finals


def _keep(member: Path, backup: Path) -> None:
    """Give ``member`` the name ``backup`` too (a hard link: the member's own name never goes
    missing), or move it there where the file system has no hard links (FAT32)."""
    try:
        os.link(member, backup)
    except OSError:
        os.replace(member, backup)


def _undo(moved: list[list[Any]]) -> None:
    """Before the commit: put the old members back and remove the new ones renamed so far."""
    for final, backup, placed in reversed(moved):
        with contextlib.suppress(OSError):
            if backup is not None and backup.exists():
                os.replace(backup, final)
            elif placed:
                final.unlink(missing_ok=True)


def _remove_old(out: Path, old_id: str | None, count: int) -> None:
    """After the commit: every backup (this publish's, and any an earlier killed one left), and
    the old set's members past the new count."""
    for p in _backups(out):
        with contextlib.suppress(OSError):
            p.unlink()
    if old_id is None:
        return
    i = count + 1
    while (extra := member_path(out, i)).exists():
        info = set_info(extra)
        if info is None or info["id"] != old_id:
            break  # not the old set's: a file kbpack did not write there, left alone
        with contextlib.suppress(OSError):
            extra.unlink()
        i += 1


def committed_members(paths: Sequence[Path]) -> tuple[list[Path], list[str]]:
    """The files to read for ``paths`` so that set members are those of the set each member
    001 beside them commits: a member of another set is replaced by the committed set's
    backup of it, or left out. Returns (paths, notes); packs outside sets pass unchanged."""
    out: list[Path] = []
    notes: list[str] = []
    authority: dict[Path, dict[str, Any] | None] = {}
    for path in paths:
        info = set_info(path)
        m = _MEMBER.match(path.stem)
        if info is None or m is None:
            out.append(path)
            continue
        first = path.with_name(f"{m.group(1)}-001{path.suffix}")
        if first not in authority:
            authority[first] = set_info(first)
        committed = authority[first]
        if committed is None or committed["index"] != 1 or committed["id"] == info["id"]:
            out.append(path)  # no commit record to judge by (missing-member notes say more)
            continue
        kept = _kept(path, int(m.group(2)), committed["id"])
        if kept is not None:
            out.append(kept)
            notes.append(
                f"{path.name} is from a publish of set {info['id']} that was cut short; member "
                f"{m.group(2)} of set {committed['id']} (what {first.name} commits) is read from "
                f"{kept.name}: build the set again"
            )
        else:
            notes.append(
                f"{path.name} is member {info['index']} of set {info['id']}, not of set "
                f"{committed['id']} that {first.name} commits: not searched"
            )
    # a member whose name was empty when the publish was cut (moved to its backup where the
    # file system has no hard links): the backup is the member
    for first, committed in authority.items():
        if committed is None or committed["index"] != 1 or first not in out:
            continue
        at = out.index(first)
        base = first.with_name(_MEMBER.match(first.stem).group(1) + first.suffix)  # type: ignore[union-attr]
        # only the indices with a file beside it, never range(count): a claimed count is a
        # pack's word, and 1,000,000 of them cost a query two million stat calls
        for i in sorted(_present_members(base, committed["count"]) | _backed_up(base)):
            if i < 2:
                continue
            member = member_path(base, i)
            kept = None if member.exists() else _kept(member, i, committed["id"])
            if kept is not None:
                at += 1
                out.insert(at, kept)
                notes.append(f"{member.name} is missing; member {i} is read from {kept.name}")
            elif member in out:
                at = out.index(member)
    return out, notes


def _kept(member: Path, index: int, set_id: str) -> Path | None:
    """The backup of member ``index`` of set ``set_id`` beside ``member``, if it holds that."""
    backup = backup_path(member, set_id)
    kept = set_info(backup)
    if kept is not None and kept["id"] == set_id and kept["index"] == index:
        return backup
    return None


__all__ = [
    "backup_path",
    "committed_members",
    "member_path",
    "publish_set",
    "set_info",
]


_MISSING_LISTED = 10  # missing members named one finding each; more are one summary finding


def _present_members(stem: Path, count: int) -> set[int]:
    """The indices 1..count of the members beside ``stem``: one listing of its folder."""
    want = re.compile(re.escape(stem.stem) + r"-(\d{3,})" + re.escape(stem.suffix or ".kbpack"))
    out: set[int] = set()
    try:
        names = [p.name for p in stem.parent.iterdir()]
    except OSError:
        return out
    for name in names:
        m = want.fullmatch(name)
        if m and 1 <= int(m.group(1)) <= count and member_path(stem, int(m.group(1))).name == name:
            out.add(int(m.group(1)))
    return out


def _missing_members(stem: Path, index: int, count: int, present: set[int]) -> list[Finding]:
    """One finding per missing member, or one for all when more than a few are missing."""
    missing = count - 1 - len(present)
    first: list[int] = []
    i = 0
    while len(first) < min(missing, _MISSING_LISTED + 1):  # steps: at most present + 11
        i += 1
        if i != index and i not in present:
            first.append(i)
    if missing <= _MISSING_LISTED:
        return [
            Finding(
                "set-member-missing",
                "/",
                f"{member_path(stem, i).name} (member {i} of {count}) is not beside it",
            )
            for i in first
        ]
    return [
        Finding(
            "set-member-missing",
            "/",
            f"{missing} of the {count} members are not beside it "
            f"(the first: {member_path(stem, first[0]).name})",
        )
    ]


def set_findings(
    path: Path,
    manifest_extra: dict[str, Any],
    *,
    hash_members: bool = True,
    checked_apart: Collection[Path] = (),
) -> tuple[list[Finding], str]:
    """For a set member: ``([findings], note)`` on the other members beside it (each
    present, of the same set, at its index, and whole: the size its manifest says and, with
    ``hash_members``, the SHA-256 of its HDF5 bytes). Members in ``checked_apart`` are verified
    in full by the same run, so their bytes are not read twice. ``([], "")`` for a pack that
    is not in a set."""
    info = manifest_extra.get("set")
    if not isinstance(info, dict):
        return [], ""
    try:
        set_id, index, count = str(info["id"]), int(info["index"]), int(info["count"])
    except (KeyError, TypeError, ValueError):
        return [
            Finding("set-invalid", "/", f"manifest 'set' is not {{id, index, count}}: {info!r}")
        ], ""
    m = re.match(r"^(.*)-(\d{3,})$", path.stem)
    if not m or int(m.group(2)) != index or not 1 <= index <= count:
        return [
            Finding(
                "set-misnamed", "/", f"member {index} of {count} should be named STEM-{index:03d}"
            )
        ], ""
    stem = path.with_name(m.group(1) + path.suffix)
    apart = {Path(p).resolve() for p in checked_apart}
    # work bounded by the members present, not by the count a manifest claims: a count of
    # 1,000,000 made verify stat a million names and print a million lines (issue 30, found 7)
    present = _present_members(stem, count) - {index}
    found = _missing_members(stem, index, count, present)
    for i in sorted(present):
        other = member_path(stem, i)
        try:
            theirs = read_header(other).manifest.extra.get("set") or {}
        except Exception as e:  # a damaged member: its own verify says what is wrong
            found.append(Finding("set-member-unreadable", "/", f"{other.name}: {e}"))
            continue
        if (
            str(theirs.get("id")) != set_id
            or theirs.get("index") != i
            or theirs.get("count") != count
        ):
            if backup_path(other, set_id).exists():
                found.append(
                    Finding(
                        "set-publish-unfinished",
                        "/",
                        f"{other.name} is from a publish of another set that was cut short; "
                        f"member {i} of set {set_id} is kept as {backup_path(other, set_id).name} "
                        "(readers use it): build the set again",
                    )
                )
                continue
            found.append(
                Finding(
                    "set-member-foreign", "/", f"{other.name} is not member {i} of set {set_id}"
                )
            )
            continue
        if other.resolve() not in apart:
            found.extend(_member_bytes(other, i, count, hash_members))
    note = f"member {index} of {count} of set {set_id}" + (
        "; every member is present" if not found else ""
    )
    return found, note


def _member_bytes(member: Path, index: int, count: int, hash_bytes: bool) -> list[Finding]:
    """Verify's byte check on another member: a truncated or damaged sibling fails the set."""
    manifest = read_header(member).manifest
    what = f"{member.name} (member {index} of {count})"
    size = member.stat().st_size
    if size != manifest.file_size:
        cut = "truncated" if size < manifest.file_size else "has bytes appended"
        return [
            Finding(
                "set-member-damaged",
                "/",
                f"{what} {cut}: {size} bytes, its manifest says {manifest.file_size}; "
                "copy it again",
            )
        ]
    if hash_bytes and hash_hdf5_bytes(member)[1] != manifest.hdf5_sha256:
        return [
            Finding(
                "set-member-damaged",
                "/",
                f"{what}: the SHA-256 of its bytes differs from its manifest's; copy it again",
            )
        ]
    return []
