"""Which files a build reads: folders walked in sorted order, globs applied, hidden files left
alone, symlinks followed where that is safe and loops recorded instead of followed.

Symlinks, the rules (Debian's documentation folders are mostly links, so they matter):

* a link whose target lies inside an input root (any folder or file given) is read: a file
  as itself, a folder not descended (it is read under its own name);
* a link whose target lies outside every input root, to a file or a folder, is read only with
  ``follow_symlinks`` (``--follow-symlinks``, ripgrep's ``-L``), else it is a skipped record
  that names the option, counted "outside the input", its target never opened: a folder
  someone else prepared must not carry ``ln -s /etc/shadow notes.txt`` into a pack that then
  travels (issue 30). A file read so carries a warning naming the target;
* a link that points back to an enclosing folder, or a chain of links that never ends, is a
  skipped record ("symlink loop"), never followed and never an abort;
* a folder that cannot be listed (permissions) is a failed record: its files are not silently
  lost.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from pathlib import Path

from kbpack.errors import UsageError
from kbpack.extract.common import (
    blank_document,
    failed,
    file_identity,
    kind_of,
    unsupported_reason,
)
from kbpack.text.document import Document

FOLLOW_OPTION = "--follow-symlinks"


@dataclass(frozen=True)
class Candidate:
    """A file to extract: ``name`` is unique within the pack (path relative to the folder that
    was given, POSIX separators; for a single file, its file name). ``kind`` is md, txt, html,
    pdf, docx, or None when kbpack does not read the type. ``note`` is a warning the document
    carries whatever its extraction gives (a file read through a link out of the tree)."""

    path: Path
    name: str
    kind: str | None
    note: str = ""


@dataclass
class Discovery:
    """What a walk found: files to extract, records of entries that could not be read (skipped
    or failed Documents), and counts of what was left out on purpose."""

    candidates: list[Candidate] = field(default_factory=list)
    records: list[Document] = field(default_factory=list)
    filtered: int = 0  # files left out by --include/--exclude: the user's choice, not documents
    links_not_followed: int = 0  # links outside the input not followed (files and folders)
    links_followed: int = 0  # files outside the input read through a link (--follow-symlinks)


@dataclass(frozen=True)
class _Entry:
    path: Path
    name: str
    reason: str | None = None  # None: a file to read
    status: str = "skipped"  # of the record when reason is set
    readable: bool = False  # a record whose bytes may be hashed (never: outside, FIFO, loop)
    note: str = ""
    folder: bool = False  # a record of a folder (a link not followed, an unlistable one)


def _skipped(path: Path, name: str, reason: str, readable: bool) -> Document:
    """A skipped record; ``readable`` False: never open it (a FIFO would block, a symlink
    loop cannot be opened)."""
    doc = blank_document(path, name, kind_of(path))
    size, digest = 0, ""
    if readable:
        with contextlib.suppress(OSError):
            size, digest = file_identity(path)
    return replace(
        doc, source_size=size, source_sha256=digest, status="skipped", reason=reason, stage="detect"
    )


def _record(entry: _Entry) -> Document:
    assert entry.reason is not None
    if entry.status == "failed":
        return failed(blank_document(entry.path, entry.name, None), entry.reason, "read")
    return _skipped(entry.path, entry.name, entry.reason, entry.readable)


def _filtered(name: str, include: Sequence[str], exclude: Sequence[str], folder: bool) -> bool:
    """True when the globs leave ``name`` out. ``--include`` names files, so it never hides
    a folder's record (its files might match); ``--exclude`` does (``docs/*`` or ``docs``)."""
    if folder:
        return any(fnmatchcase(n, p) for p in exclude for n in (name, name + "/"))
    if include and not any(fnmatchcase(name, pattern) for pattern in include):
        return True
    return any(fnmatchcase(name, pattern) for pattern in exclude)


def _inside(path: Path, roots: Sequence[Path]) -> bool:
    """Whether ``path``'s real target is one of ``roots`` (real paths) or below one."""
    try:
        real = path.resolve()
    except (OSError, RuntimeError):  # RuntimeError: a symlink loop
        return False
    return any(real == root or real.is_relative_to(root) for root in roots)


def _link_problem(e: OSError) -> str:
    if e.errno == errno.ELOOP:
        return "symlink loop: the link never reaches a file"
    if e.errno == errno.ENOENT:
        return "broken symlink"
    return f"cannot follow the symlink: {e.strerror or e}"


class _Walker:
    """Walks one folder given on the command line; loop-safe with and without following links."""

    def __init__(self, root: Path, follow: bool, roots: Sequence[Path] = ()) -> None:
        self.root = root
        self.real_root = root.resolve()
        self.roots = [self.real_root, *roots]  # every input given, resolved
        self.follow = follow
        self.entries: list[_Entry] = []
        self.links_not_followed = 0
        self.links_followed = 0

    def walk(self) -> list[_Entry]:
        try:
            info = os.stat(self.root)
        except OSError as e:
            raise UsageError(f"{self.root}: cannot read the folder: {e.strerror or e}") from e
        visited = {(info.st_dev, info.st_ino)}
        # (folder, name prefix, the real folders above it: a link to one of them is a loop)
        stack: list[tuple[Path, str, frozenset[tuple[int, int]]]] = [
            (self.root, "", frozenset(visited))
        ]
        while stack:
            folder, prefix, above = stack.pop()
            try:
                with os.scandir(folder) as it:
                    listing = sorted(it, key=lambda e: e.name)
            except OSError as e:
                if not prefix:
                    raise UsageError(f"{folder}: cannot read the folder: {e.strerror or e}") from e
                reason = f"cannot read the folder: {e.strerror or e}; its files are left out"
                name = prefix.rstrip("/")
                self.entries.append(_Entry(folder, name, reason, "failed", folder=True))
                continue
            below: list[tuple[Path, str, frozenset[tuple[int, int]]]] = []
            for entry in listing:
                if entry.name.startswith("."):
                    continue
                path, name = Path(entry.path), prefix + entry.name
                sub = self._entry(path, name, entry, visited, above)
                if isinstance(sub, tuple):
                    below.append(sub)
                elif sub is not None:
                    self.entries.append(sub)
            stack.extend(reversed(below))
        return self.entries

    def _entry(
        self,
        path: Path,
        name: str,
        entry: os.DirEntry[str],
        visited: set[tuple[int, int]],
        above: frozenset[tuple[int, int]],
    ) -> _Entry | tuple[Path, str, frozenset[tuple[int, int]]] | None:
        """A file or record for ``entry``, a folder to descend, or None (nothing to say)."""
        link = entry.is_symlink()
        try:
            info = os.stat(path)  # follows links
        except OSError as e:
            if link:
                return _Entry(path, name, _link_problem(e))
            return _Entry(path, name, f"cannot read: {e.strerror or e}", "failed")
        key = (info.st_dev, info.st_ino)
        if stat.S_ISDIR(info.st_mode):
            if link:
                if key in above:
                    reason = "symlink loop: the link points to an enclosing folder"
                    return _Entry(path, name, reason, folder=True)
                if _inside(path, [self.real_root]):
                    return None  # read under its own name
                if not self.follow and not _inside(path, self.roots):
                    self.links_not_followed += 1
                    reason = f"symlinked folder outside the input; {FOLLOW_OPTION} reads it"
                    return _Entry(path, name, reason, folder=True)
            if key in visited:
                return None  # already read under another name (two links to one folder)
            visited.add(key)
            return (path, name + "/", above | {key})
        if not stat.S_ISREG(info.st_mode):
            return _Entry(path, name, "not a regular file")
        note = ""
        if link and not _inside(path, self.roots):
            if not self.follow:
                self.links_not_followed += 1
                reason = f"symlink to a file outside the input; {FOLLOW_OPTION} reads it"
                return _Entry(path, name, reason)  # not readable: never opened, nor hashed
            self.links_followed += 1
            note = f"read through a symlink to {path.resolve()}, outside the input"
        return _Entry(path, name, note=note)


def discover(
    sources: Sequence[Path],
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    follow_symlinks: bool = False,
) -> Discovery:
    """Files to extract from folders and files, records for the rest, counts of what was left.

    Folders are walked recursively in sorted order; hidden files and folders (name starting
    with ``.``) are ignored without a record; symlinks as the module docstring says.
    ``include``/``exclude`` are shell globs matched with ``fnmatch`` against the name (so
    ``*`` also matches ``/``); the files they leave out are only counted. A file given by
    itself is named by its file name. Unsupported types and entries that cannot be read
    become skipped (or, for an unlistable folder, failed) Documents, with size and SHA-256
    where the file can be read. Raises UsageError for a source that does not exist or cannot
    be listed, or when two sources give the same name.
    """
    found = Discovery()
    origin: dict[str, Path] = {}
    seen: set[Path] = set()
    roots = []
    for source in sources:
        with contextlib.suppress(OSError, RuntimeError):
            roots.append(Path(source).resolve())
    for source in sources:
        source = Path(source)
        if not source.exists():
            raise UsageError(f"{source}: no such file or folder; check the path")
        entries: list[_Entry]
        if source.is_dir():
            walker = _Walker(source, follow_symlinks, roots)
            entries = sorted(walker.walk(), key=lambda e: e.name)
            found.links_not_followed += walker.links_not_followed
            found.links_followed += walker.links_followed
        elif source.is_file():
            entries = [_Entry(source, source.name)]
        else:
            entries = [_Entry(source, source.name, "not a regular file")]
        for e in entries:
            if _filtered(e.name, include, exclude, e.folder):
                found.filtered += 1
                continue
            real = e.path.resolve() if e.reason is None else None
            if real is not None and real in seen:
                continue  # the same file given twice (or reached twice): read it once
            if e.name in origin:
                raise UsageError(
                    f"{e.name}: comes from both {origin[e.name]} and {e.path}; names must be "
                    "unique in a pack, so build from folders whose files do not collide"
                )
            origin[e.name] = e.path
            kind = kind_of(e.path)
            if e.reason is None and kind is None:
                e = replace(e, reason=unsupported_reason(e.path), readable=True)
            if e.reason is not None:
                found.records.append(_record(e))
                continue
            assert real is not None
            seen.add(real)
            found.candidates.append(Candidate(path=e.path, name=e.name, kind=kind, note=e.note))
    return found
