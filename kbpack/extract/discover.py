"""Which files a build reads: folders walked in sorted order, globs applied, hidden files and
symlinks that leave the input tree left alone."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase
from pathlib import Path

from kbpack.document import Document
from kbpack.errors import UsageError
from kbpack.extract.common import blank_document, file_identity, kind_of


@dataclass(frozen=True)
class Candidate:
    """A file to extract: ``name`` is unique within the pack (path relative to the folder that
    was given, POSIX separators; for a single file, its file name). ``kind`` is md, txt, html,
    pdf, docx, or None when kbpack does not read the type."""

    path: Path
    name: str
    kind: str | None


def _skipped(path: Path, name: str, reason: str, readable: bool) -> Document:
    """A skipped record; ``readable`` False: never open it (a FIFO would block, a symlink
    outside the tree must not be read)."""
    doc = blank_document(path, name, kind_of(path))
    size, digest = 0, ""
    if readable:
        with contextlib.suppress(OSError):
            size, digest = file_identity(path)
    return replace(
        doc, source_size=size, source_sha256=digest, status="skipped", reason=reason, stage="detect"
    )


def _filtered(name: str, include: Sequence[str], exclude: Sequence[str]) -> str | None:
    """Why ``name`` is left out by the globs, or None when it is kept."""
    if include and not any(fnmatchcase(name, pattern) for pattern in include):
        return "not matched by any --include pattern"
    for pattern in exclude:
        if fnmatchcase(name, pattern):
            return f"excluded by --exclude {pattern!r}"
    return None


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root)
        return True
    except (ValueError, OSError, RuntimeError):  # RuntimeError: a symlink loop
        return False


def _walk(root: Path) -> list[tuple[Path, str, str | None]]:
    """(path, name, reason to skip or None) for every visible file under ``root``, sorted."""
    real_root = root.resolve()
    found: list[tuple[Path, str, str | None]] = []
    for folder, dirs, files in os.walk(root, followlinks=False):
        base = Path(folder)
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for d in list(dirs):
            if (base / d).is_symlink():
                dirs.remove(d)  # never descended: outside the tree, or a duplicate of it
                if not _inside(base / d, real_root):
                    rel = (base / d).relative_to(root).as_posix()
                    found.append((base / d, rel, "symlinked folder outside the input tree"))
        for f in sorted(files):
            if f.startswith("."):
                continue
            path = base / f
            name = path.relative_to(root).as_posix()
            reason = None
            if path.is_symlink():
                if not path.exists():
                    reason = "broken symlink"
                elif not _inside(path, real_root):
                    reason = "symlink to a file outside the input tree"
            if reason is None and not path.is_file():
                reason = "not a regular file"
            found.append((path, name, reason))
    found.sort(key=lambda item: item[1])
    return found


def discover(
    sources: Sequence[Path], include: Sequence[str] = (), exclude: Sequence[str] = ()
) -> tuple[list[Candidate], list[Document]]:
    """Files to extract from folders and files, and 'skipped' records for the rest.

    Folders are walked recursively in sorted order; hidden files and folders (name starting
    with ``.``) are ignored without a record; symlinks are followed only when they stay inside
    the folder. ``include``/``exclude`` are shell globs matched with ``fnmatch`` against the
    name (so ``*`` also matches ``/``). A file given by itself is named by its file name.
    Unsupported types, filtered names and unreadable entries become skipped Documents (with
    size and SHA-256 where the file can be read). Raises UsageError for a source that does
    not exist, or when two sources give the same name.
    """
    candidates: list[Candidate] = []
    skipped: list[Document] = []
    origin: dict[str, Path] = {}
    seen: set[Path] = set()
    for source in sources:
        source = Path(source)
        if not source.exists():
            raise UsageError(f"{source}: no such file or folder; check the path")
        entries: list[tuple[Path, str, str | None]]
        if source.is_dir():
            entries = _walk(source)
        elif source.is_file():
            entries = [(source, source.name, None)]
        else:
            entries = [(source, source.name, "not a regular file")]
        for path, name, reason in entries:
            real = path.resolve()
            if real in seen and reason is None:
                continue  # the same file given twice (or reached twice): read it once
            if name in origin:
                raise UsageError(
                    f"{name}: comes from both {origin[name]} and {path}; names must be unique "
                    "in a pack, so build from folders whose files do not collide"
                )
            origin[name] = path
            readable = reason is None
            reason = reason or _filtered(name, include, exclude)
            kind = kind_of(path)
            if reason is None and kind is None:
                reason = f"unsupported type {path.suffix.lower() or '(no extension)'}"
            if reason is not None:
                skipped.append(_skipped(path, name, reason, readable))
                continue
            seen.add(real)
            candidates.append(Candidate(path=path, name=name, kind=kind))
    return candidates, skipped
