"""What the report of every command that writes one pack (build, update, merge) starts with."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kbpack.pack.write import CommitResult


@dataclass
class WrittenPack:
    """The pack written: its path, its size in bytes and its manifest's counts."""

    path: Path
    size: int
    counts: dict[str, int]

    def as_dict(self) -> dict[str, Any]:
        """Every field, the path as a string (what ``--json`` prints)."""
        d = dict(self.__dict__)
        d["path"] = str(self.path)
        return d


def written(committed: CommitResult) -> tuple[Path, int, dict[str, int]]:
    """The ``WrittenPack`` fields of a committed pack, in order: ``Report(*written(c), ...)``."""
    return committed.path, committed.size, committed.counts
