"""What was checked on the one open file a reader holds (issue 30: one open, one check, one file).

A ``PackReader`` opens the pack once; every later check of it (serve's quick verify, a full
verify) runs through that same open file (``held_path``: ``/proc/self/fd/N`` names the open
inode, not the path, so a file swapped in at the path is never the one checked), and records
here what ran. Labels are derived from this record and nothing else, so a page or a JSON answer
can never say more than was done: "verified" only when the full ``kbpack verify`` passed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

# What a reader checked, weakest to strongest (``level``).
OPENED = "opened"  # size = manifest, structure allowlist; data checked against digests as read
QUICK = "quick-checked"  # + SHA-256 of every HDF5 byte, signature (verify --quick)
VERIFIED = "verified"  # the full kbpack verify: + every digest and every invariant


@dataclass(frozen=True)
class FileState:
    """The identity of a file as ``stat`` sees it: a change of any field is another file."""

    dev: int
    ino: int
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> FileState:
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    def as_dict(self) -> dict[str, int]:
        return {"inode": self.ino, "size": self.size, "mtime_ns": self.mtime_ns}


@dataclass
class Checks:
    """The checks that ran on one open pack file."""

    state: FileState
    size: bool = True  # the file has the manifest's exact size (every open checks it)
    structure: bool = False  # the spec's allowlist, before any data is read
    digests_on_read: bool = True  # every element read is checked against its digest
    bytes_sha256: bool = False  # the SHA-256 of every HDF5 byte matched the manifest
    signature: dict[str, Any] | None = None  # the signature check's answer, when one ran
    full_verify: bool = False  # kbpack verify (all five steps) found it intact
    ran: list[str] = field(default_factory=list)  # the checks, in words, in order

    @property
    def level(self) -> str:
        if self.full_verify:
            return VERIFIED
        return QUICK if self.bytes_sha256 else OPENED

    def label(self) -> str:
        """One line saying exactly what was checked."""
        if self.full_verify:
            return "verified (kbpack verify: bytes, signature, structure, digests, invariants)"
        if self.bytes_sha256:
            return (
                "quick-checked (bytes, signature, structure; not a full kbpack verify; "
                "data checked against its digests as it is read)"
            )
        what = "size and structure" if self.structure else "size"
        return f"not verified ({what} checked at open; data checked against its digests as read)"

    def as_dict(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "label": self.label(),
            "size": self.size,
            "structure": self.structure,
            "digests_on_read": self.digests_on_read,
            "bytes_sha256": self.bytes_sha256,
            "signature": self.signature,
            "full_verify": self.full_verify,
            "file": self.state.as_dict(),
        }


def held_path(fd: int) -> str | None:
    """A path that opens the very file behind ``fd`` (Linux: ``/proc/self/fd/N``, a link to the
    open inode, valid in a forked child too); None where the system has none."""
    for base in ("/proc/self/fd", "/dev/fd"):
        candidate = f"{base}/{fd}"
        if os.path.isdir(base) and os.path.exists(candidate):
            return candidate
    return None
