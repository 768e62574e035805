"""The query-side models of a pack: which model file dense search on a pack uses, checked by
hash, and its load (in a worker thread, or claimed from the CLI's early start).

1. ``model=`` given: used if its hash matches the pack's stamp; otherwise dense search does not
   run and results are lexical-only, with a note saying why.
2. the pack holds its model (``build --embed-model``): extracted once into the cache and used.
3. the default model, if its hash matches the stamp.
4. none of these: lexical-only, with a note naming the model the pack needs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kbpack.errors import ModelError
from kbpack.pack import format as F
from kbpack.pack.read import PackReader
from kbpack.runtime.cache import cache_dir

if TYPE_CHECKING:
    from kbpack.model.load import ModelLoad


def load_reranker(path: Path | None, threads: int | None = None) -> Any | None:
    """The cross-encoder for ``rerank=``, loaded (ModelError if it is not one), or None."""
    if path is None:
        return None
    from kbpack.model.rerank import Reranker

    return Reranker(path, threads=threads)


def resolve_embedder(
    reader: PackReader, model: Path | None, threads: int | None = None
) -> tuple[Any | None, list[str]]:
    """The embedder for dense search on this pack, or (None, [why not])."""
    choice, notes = resolve_model(reader, model)
    if choice is None:
        return None, notes
    from kbpack.model.embedder import Embedder

    path, prefixes = choice
    return Embedder(path, prefixes=prefixes, threads=threads), []


def start_embedder(
    reader: PackReader, model: Path | None, threads: int | None = None
) -> tuple[ModelLoad | None, list[str]]:
    """``resolve_embedder`` with the load in a worker thread (``kbpack.model.load``): the
    model is chosen here, llama.cpp loads it while the caller goes on."""
    from kbpack.model import early as early_model

    choice, notes = resolve_model(reader, model)
    early_model.remember_model(reader)  # for the next cold query's head start
    if choice is None:
        early_model.settle()  # a head start for nothing (kbpack/model/early.py)
        return None, notes
    path, prefixes = choice
    early = early_model.claim(path, threads)  # the same load, started before the CLI
    if early is not None:
        early.use_prefixes(prefixes)
        return early, []
    from kbpack.model.embedder import Embedder
    from kbpack.model.load import ModelLoad

    return ModelLoad(lambda: Embedder(path, prefixes=prefixes, threads=threads)), []


def embedded_model_file(reader: PackReader, want: str) -> Path | None:
    """The pack's embedded GGUF as a file in the model cache, or None if its bytes do not hash
    to ``want``. The cache file is named by the hash kbpack computed of the bytes it wrote,
    never by a value read from the pack: it is extracted to a private temporary file first."""
    import tempfile

    from kbpack.model.embedder import sha256_file

    models = cache_dir() / "models"
    if F.is_sha256_hex(want):  # the reader refuses anything else; checked again before a path
        cached = models / f"{want}.gguf"
        if cached.is_file() and sha256_file(cached) == want:
            return cached
    models.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=".extract-", suffix=".gguf", dir=models)
    os.close(fd)
    tmp = Path(name)
    try:
        reader.write_gguf(tmp)
        got = sha256_file(tmp)
        if got != want:
            return None
        final = models / f"{got}.gguf"
        os.replace(tmp, final)
        return final
    finally:
        tmp.unlink(missing_ok=True)


def resolve_model(reader: PackReader, model: Path | None) -> tuple[Any | None, list[str]]:
    """The query-side model for this pack: ``((GGUF path, Prefixes), [])``, or
    ``(None, [why not])``. Nothing is loaded."""
    stamp = reader.model
    if stamp is None:
        return None, ["this pack has no vectors (built with --no-vectors): lexical-only results"]
    from kbpack.model.embedder import sha256_file
    from kbpack.model.prefixes import Prefixes

    prefixes = Prefixes.from_stamp(stamp)  # the pack's, never the model family's defaults
    want = str(stamp[F.M_SHA256])
    label = f"{stamp[F.M_NAME]} (sha256 {want[:12]})"
    if model is not None:
        got = sha256_file(model)
        if got != want:
            return None, [
                f"--model {model} is not the pack's model {label}: dense search skipped, lexical-only results"
            ]
        return (model, prefixes), []
    if reader.has_embedded_model:
        path = embedded_model_file(reader, want)
        if path is None:
            return None, [
                f"the model stored in the pack does not match its stamp {label}; run kbpack verify"
            ]
        from kbpack.model.first_load import check_first_load
        from kbpack.model.gguf_header import check_hyperparameters

        try:  # before llama.cpp sees it: a crafted header aborts llama.cpp (issue 30)
            check_hyperparameters(path)
            check_first_load(path, want)  # want: the SHA-256 kbpack computed of these bytes
        except ModelError as e:
            why = str(e).removeprefix(f"{path}: ")
            return None, [
                f"{reader.path}: {F.MODEL_GGUF} is refused ({why}): dense search skipped, "
                "lexical-only results; run kbpack verify"
            ]
        return (path, prefixes), []
    try:
        from kbpack.model.embedder import default_model_path

        default = default_model_path()
    except ModelError as e:
        return None, [f"the pack's model {label} is not available ({e}): lexical-only results"]
    if sha256_file(default) == want:
        return (default, prefixes), []
    return None, [
        f"the pack was built with {label}, which is not the default model: pass --model FILE.gguf; lexical-only results"
    ]
