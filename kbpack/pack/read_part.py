"""What the parts of a ``PackReader`` share: one open file, read through one memo."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kbpack.pack.manifest import Manifest


@dataclass(frozen=True)
class OpenFile:
    """The open HDF5 file, the name errors give it (``where``), its path, its manifest (the
    digests every read is checked against) and the memo of reads already checked."""

    h5: Any
    where: str
    path: Path
    manifest: Manifest
    cache: dict[str, Any]


class ReadPart:
    """A part of a ``PackReader``: reads one kind of element through the reader's open file."""

    def __init__(self, file: OpenFile) -> None:
        self.h5 = file.h5
        self.where = file.where
        self.path = file.path
        self.manifest = file.manifest
        self._cache = file.cache
