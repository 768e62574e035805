"""The Python API: ``kbpack.open(path)`` -> :class:`Pack`.

>>> with kbpack.open("docs.kbpack") as pack:
...     for r in pack.search("how do I rotate the logs?", k=3).results:
...         print(r.rank, r.locator, r.content[:60])

Choosing the query-side model (dense search needs the very model the pack was built with,
identified by the SHA-256 of its GGUF file, never by its name):

1. ``model=`` given: used if its hash matches the pack's stamp; otherwise dense search does not
   run and results are lexical-only, with a note saying why.
2. the pack holds its model (``build --embed-model``): extracted once into the cache and used.
3. the default model, if its hash matches the stamp.
4. none of these: lexical-only, with a note naming the model the pack needs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kbpack.errors import ModelError
from kbpack.model.cache import cache_dir
from kbpack.pack import format as F
from kbpack.pack.read import PackReader

if TYPE_CHECKING:
    from kbpack.model_load import ModelLoad
    from kbpack.search import Searcher, SearchResponse


class Pack:
    def __init__(
        self,
        path: str | os.PathLike[str],
        model: str | os.PathLike[str] | None = None,
        load_model: bool = True,
        threads: int | None = None,
        rerank: str | os.PathLike[str] | None = None,
    ) -> None:
        self.reader = PackReader(path)
        self._threads = threads
        self.path = self.reader.path
        self._rerank_arg = Path(rerank) if rerank else None
        self._model_arg = Path(model) if model else None
        self._load_model = load_model
        self._searcher: Searcher | None = None

    def __enter__(self) -> Pack:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        if self._searcher is not None:
            self._searcher.finish_loading()  # never close the file under a running load
        self.reader.close()

    @property
    def n_chunks(self) -> int:
        return int(self.reader.counts.get("chunks", 0))

    @property
    def searcher(self) -> Searcher:
        if self._searcher is None:
            # the model loads in a worker thread while the search does its other work; the
            # search modules are imported after it started, and so meanwhile too
            loading, notes = (
                (None, [])
                if not self._load_model
                else start_embedder(self.reader, self._model_arg, threads=self._threads)
            )
            from kbpack.search import Searcher

            self._searcher = Searcher(self.reader, None, notes, loading=loading)
            if self._rerank_arg is not None and loading is not None:
                # two llama.cpp model loads at once (one per thread) are not safe: the
                # process ended silently with exit 0 in 3 of 4 runs (tests/test_rerank.py)
                loading.wait()
            self._searcher.reranker = load_reranker(self._rerank_arg, self._threads)
        return self._searcher

    @property
    def embedder(self) -> Any | None:
        return self.searcher.embedder

    def search(self, query: str, k: int = 5, mode: str = "hybrid", **kw: Any) -> SearchResponse:
        return self.searcher.search(query, k=k, mode=mode, **kw)

    def iter_chunk_contents(self) -> Iterator[tuple[int, str]]:
        r = self.reader
        docs, starts, ends = (
            r.column(F.CHUNK_DOCUMENT),
            r.column(F.CHUNK_FROM),
            r.column(F.CHUNK_TO),
        )
        for i in range(len(docs)):
            yield i, r.text(int(docs[i]))[int(starts[i]) : int(ends[i])]

    def store_calibration(
        self, out: str | os.PathLike[str] | None, calibration: dict[str, Any]
    ) -> Path:
        """Write a copy of the pack (or replace it, ``out=None``) with a new refusal threshold."""
        from kbpack.pack.rewrite import rewrite_search_settings

        target = Path(out) if out else self.path
        self.close()
        rewrite_search_settings(self.path, target, float(calibration["threshold"]), calibration)
        self.reader = PackReader(target)
        self.path = target
        self._searcher = None
        return target


def load_reranker(path: Path | None, threads: int | None = None) -> Any | None:
    """The cross-encoder for ``rerank=``, loaded (ModelError if it is not one), or None."""
    if path is None:
        return None
    from kbpack.rerank import Reranker

    return Reranker(path, threads=threads)


def resolve_embedder(
    reader: PackReader, model: Path | None, threads: int | None = None
) -> tuple[Any | None, list[str]]:
    """The embedder for dense search on this pack, or (None, [why not])."""
    choice, notes = resolve_model(reader, model)
    if choice is None:
        return None, notes
    from kbpack.embed import Embedder

    path, prefixes = choice
    return Embedder(path, prefixes=prefixes, threads=threads), []


def start_embedder(
    reader: PackReader, model: Path | None, threads: int | None = None
) -> tuple[ModelLoad | None, list[str]]:
    """``resolve_embedder`` with the load in a worker thread (``kbpack.model_load``): the
    model is chosen here, llama.cpp loads it while the caller goes on."""
    from kbpack import early_model

    choice, notes = resolve_model(reader, model)
    early_model.remember_model(reader)  # for the next cold query's head start
    if choice is None:
        early_model.settle()  # a head start for nothing (kbpack/early_model.py)
        return None, notes
    path, prefixes = choice
    early = early_model.claim(path, threads)  # the same load, started before the CLI
    if early is not None:
        early.use_prefixes(prefixes)
        return early, []
    from kbpack.embed import Embedder
    from kbpack.model_load import ModelLoad

    return ModelLoad(lambda: Embedder(path, prefixes=prefixes, threads=threads)), []


def embedded_model_file(reader: PackReader, want: str) -> Path | None:
    """The pack's embedded GGUF as a file in the model cache, or None if its bytes do not hash
    to ``want``. The cache file is named by the hash kbpack computed of the bytes it wrote,
    never by a value read from the pack: it is extracted to a private temporary file first."""
    import tempfile

    from kbpack.embed import sha256_file

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
    from kbpack.embed import sha256_file
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
        return (path, prefixes), []
    try:
        from kbpack.embed import default_model_path

        default = default_model_path()
    except ModelError as e:
        return None, [f"the pack's model {label} is not available ({e}): lexical-only results"]
    if sha256_file(default) == want:
        return (default, prefixes), []
    return None, [
        f"the pack was built with {label}, which is not the default model: pass --model FILE.gguf; lexical-only results"
    ]
