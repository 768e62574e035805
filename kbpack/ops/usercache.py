"""What this machine's kbpack cache holds (``kbpack cache``), and clearing it (``kbpack cache
clear``). The folder is ``kbpack.runtime.cache.cache_dir()``; nothing in it is needed to read a
pack, so removing any part costs time (a model converted or extracted again, a pack checked
again on its first open, a build embedding again what it had finished), never correctness.

Parts, each a set of folders directly under the cache folder:

* ``embeddings``: finished embeddings of builds, reused by a rerun of an interrupted build
  (``kbpack/model/embed_cache.py``; bounded by ``build --embed-cache-max``);
* ``models``: models extracted from packs that carry one (``build --embed-model``) and the
  default model converted from its pip package;
* ``memos``: what kbpack remembers of files it checked here: packs parsed, verified or written
  on this machine, model file hashes, GGUF headers and checks, models loaded once in a child.

Anything else found there is listed as ``other`` (and cleared with everything).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kbpack.errors import UsageError
from kbpack.runtime.cache import cache_dir

EMBEDDINGS = "embeddings"  # kbpack.model.embed_cache.embeddings_dir()'s name
MODELS = "models"  # kbpack.model.cache / resolve: converted and extracted models
HASHES = "hashes"  # kbpack.model.identity: a model file's SHA-256 per file state


def _memo_folders() -> list[str]:
    from kbpack.model.early import MODEL_MEMO
    from kbpack.model.first_load import MEMO_FOLDER as LOADED
    from kbpack.model.gguf_header import CHECKED_FOLDER
    from kbpack.model.gguf_header import MEMO_FOLDER as HEADERS
    from kbpack.pack.preflight import MEMO_FOLDER as PARSED
    from kbpack.pack.verified import MARKERS

    return [PARSED, MARKERS, HASHES, HEADERS, CHECKED_FOLDER, LOADED, MODEL_MEMO]


def parts() -> dict[str, tuple[list[str], str]]:
    """name -> (its folders, what it is), in the order ``kbpack cache`` lists them."""
    return {
        "embeddings": (
            [EMBEDDINGS],
            "finished embeddings of builds, reused when a build of the same sources runs again "
            "(bounded by build --embed-cache-max)",
        ),
        "models": (
            [MODELS],
            "models extracted from packs that carry one, and the default model converted "
            "from its pip package",
        ),
        "memos": (
            _memo_folders(),
            "what this machine remembers of packs and models it checked (first opens, "
            "verify and write markers, file hashes, GGUF headers)",
        ),
    }


@dataclass
class Part:
    name: str
    what: str
    folders: list[str]
    files: int = 0
    bytes: int = 0
    # models: one row per model file; embeddings: one row per model (its SHA-256's first 16)
    items: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "name": self.name,
            "what": self.what,
            "folders": self.folders,
            "files": self.files,
            "bytes": self.bytes,
        }
        if self.name in ("models", "embeddings"):
            d["items"] = self.items
        return d


def _measure(path: Path) -> tuple[int, int]:
    """(files, bytes) under ``path``; links are counted, never followed."""
    if path.is_symlink() or path.is_file():
        return 1, path.lstat().st_size
    files = size = 0
    if path.is_dir():
        for p in path.rglob("*"):
            if p.is_symlink() or p.is_file():
                files += 1
                size += p.lstat().st_size
    return files, size


def inventory(root: Path | None = None) -> list[Part]:
    """Every part of the cache with its files and bytes (``other`` only when something else is
    there)."""
    root = root or cache_dir()
    out: list[Part] = []
    known: set[str] = set()
    for name, (folders, what) in parts().items():
        part = Part(name, what, folders)
        for folder in folders:
            known.add(folder)
            files, size = _measure(root / folder)
            part.files += files
            part.bytes += size
        if name == "models" and (root / MODELS).is_dir():
            part.items = [
                {"file": p.name, "bytes": p.lstat().st_size}
                for p in sorted((root / MODELS).iterdir())
                if p.is_file() and not p.name.startswith(".")
            ]
        if name == "embeddings" and (root / EMBEDDINGS).is_dir():
            for p in sorted((root / EMBEDDINGS).iterdir()):
                if p.is_dir() and not p.is_symlink():
                    files, size = _measure(p)
                    part.items.append({"model": p.name, "files": files, "bytes": size})
        out.append(part)
    if root.is_dir():
        others = sorted(p.name for p in root.iterdir() if p.name not in known)
        if others:
            part = Part("other", "files kbpack does not know (left by another version?)", others)
            for name in others:
                files, size = _measure(root / name)
                part.files += files
                part.bytes += size
            out.append(part)
    return out


def clear(names: list[str], *, dry_run: bool = False, root: Path | None = None) -> list[Part]:
    """Remove the parts named (every part, ``other`` included, when none is named); the parts
    as they were before. ``dry_run``: remove nothing."""
    root = root or cache_dir()
    every = inventory(root)
    known = names or [p.name for p in every]
    choices = [*parts(), "other"]
    for name in names:
        if name not in choices:
            raise UsageError(
                f"no part of the cache is named {name!r}; the parts are {', '.join(choices)}"
            )
    chosen = [p for p in every if p.name in known]
    if not dry_run:
        for part in chosen:
            for folder in part.folders:
                path = root / folder
                if path.is_symlink() or path.is_file():
                    path.unlink(missing_ok=True)
                elif path.is_dir():
                    shutil.rmtree(path, ignore_errors=False)
    return chosen
