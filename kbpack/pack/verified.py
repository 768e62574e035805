"""Which packs were verified on this machine, so that ``query`` can suggest ``kbpack verify``
for one that never was.

A pass of ``kbpack verify`` leaves an empty-ish marker file in the user cache
(``$KBPACK_CACHE_DIR`` or ``$XDG_CACHE_HOME/kbpack``, folder ``verified/``: one of this
machine's memos, kbpack/runtime/memo.py), named by the
SHA-256 of the pack's absolute path, size, modification time (ns) and manifest digest (the
SHA-256 of its HDF5 bytes, which the manifest states). A pack copied, replaced, touched or
signed since is another key: it was not verified as it is now.

A pack this kbpack has just written (build, update, merge, split, migrate) is remembered the
same way: its bytes came from this machine's own data, not over a copy, so the hint right
after a build was noise. A copy of it elsewhere (a USB stick, another folder) is another key,
and gets the hint until it is verified there.

Checking is a ``stat`` of the pack (its reader already parsed the manifest) and one of the
marker: it never slows a query, and an unreadable or unwritable cache only means the
hint is shown (or the pass not remembered), never an error.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from pathlib import Path

from kbpack.runtime.memo import Memo

MARKERS = "verified"
_MARKERS = Memo(MARKERS)


def identity(pack: Path, manifest_sha256: str | None = None) -> str | None:
    """The marker's name for ``pack`` as it is now (None if it cannot be read). Without
    ``manifest_sha256`` the manifest is read from the pack's header (64 KiB)."""
    try:
        path = pack.resolve()
        st = path.stat()
        if manifest_sha256 is None:
            from kbpack.pack.manifest import read_header

            manifest_sha256 = read_header(path).manifest.hdf5_sha256
    except Exception:  # a damaged header is verify's to report, not ours
        return None
    ident = f"{path}\0{st.st_size}\0{st.st_mtime_ns}\0{manifest_sha256}"
    return hashlib.sha256(ident.encode("utf-8", "surrogateescape")).hexdigest()


def was_verified(pack: Path, manifest_sha256: str) -> bool:
    """Whether ``kbpack verify`` passed on ``pack`` as it is now, on this machine."""
    key = identity(pack, manifest_sha256)
    if key is None:
        return True  # nothing to say about a pack that cannot even be stat'ed
    return _MARKERS.has(key)


def remember_verified(pack: Path, key: str | None, event: str = "verified") -> bool:
    """Record a passing verify of ``pack``, whose :func:`identity` was ``key`` before the
    verify began (a pack replaced while it was verified is not recorded). False, silently, if
    the cache is not writable. ``event`` names what is recorded in the marker."""
    if key is None or identity(pack) != key:
        return False
    note = {
        "path": str(pack.resolve()),
        event: dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat(),
    }
    return _MARKERS.write(key, (json.dumps(note) + "\n").encode("utf-8", "surrogateescape"))


def remember_written(pack: Path) -> bool:
    """Record a pack this kbpack has just committed, as a passing verify is recorded."""
    return remember_verified(pack, identity(pack), event="written")


def hint(packs: list[Path]) -> str:
    """The one line ``query`` prints for packs never verified here."""
    names = " ".join(str(p) for p in packs)
    which = f"{packs[0]} has" if len(packs) == 1 else f"{len(packs)} packs have"
    run = f"kbpack verify {names}" if len(packs) == 1 else f"kbpack verify on each of {names}"
    return f"note: {which} not been verified on this machine; run {run} (a pass is remembered)"


__all__ = ["hint", "identity", "remember_verified", "remember_written", "was_verified"]
