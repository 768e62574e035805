"""kbpack: portable single-file HDF5 knowledge packs, built and searched offline."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kbpack.version import __version__ as __version__

if TYPE_CHECKING:
    from kbpack.api import Pack
    from kbpack.search.federate import PackSet


def open(path: str | os.PathLike[str], **kwargs: Any) -> Pack:
    """Open a pack read-only for searching: ``kbpack.open("docs.kbpack").search("...")``."""
    from kbpack.api import Pack

    return Pack(path, **kwargs)


def open_many(paths: Sequence[str | os.PathLike[str]], **kwargs: Any) -> PackSet:
    """Open several packs searched as one (BM25 statistics summed, one model): ``.search()``."""
    from kbpack.search.federate import PackSet

    return PackSet(paths, **kwargs)


# The public types, importable from the package root without importing search at start-up.
_TYPES = {
    "Pack": "kbpack.api",
    "PackSet": "kbpack.search.federate",
    "Result": "kbpack.search.searcher",
    "SearchResponse": "kbpack.search.searcher",
}
__all__ = ["Pack", "PackSet", "Result", "SearchResponse", "__version__", "open", "open_many"]


def __getattr__(name: str) -> Any:
    if name in _TYPES:
        import importlib

        return getattr(importlib.import_module(_TYPES[name]), name)
    raise AttributeError(f"module 'kbpack' has no attribute {name!r}")
