"""kbpack: portable single-file HDF5 knowledge packs, built and searched offline."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from kbpack.api import Pack


def open(path: str | os.PathLike[str], **kwargs: Any) -> Pack:
    """Open a pack read-only for searching: ``kbpack.open("docs.kbpack").search("...")``."""
    from kbpack.api import Pack

    return Pack(path, **kwargs)
