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

from kbpack.model.resolve import (
    embedded_model_file as embedded_model_file,
)
from kbpack.model.resolve import (
    load_reranker as load_reranker,
)
from kbpack.model.resolve import (
    resolve_embedder as resolve_embedder,
)
from kbpack.model.resolve import (
    resolve_model as resolve_model,
)
from kbpack.model.resolve import (
    start_embedder as start_embedder,
)
from kbpack.pack import format as F
from kbpack.pack.read import PackReader
from kbpack.search.opened import OpenedForSearch

if TYPE_CHECKING:
    from kbpack.answer.answer import Answer
    from kbpack.search.searcher import Searcher


class Pack(OpenedForSearch):
    def __init__(
        self,
        path: str | os.PathLike[str],
        model: str | os.PathLike[str] | None = None,
        load_model: bool = True,
        threads: int | None = None,
        rerank: str | os.PathLike[str] | None = None,
        require_signature: bool = False,
        allow_unsigned: bool = False,
        key: str | os.PathLike[str] | None = None,
    ) -> None:
        """``require_signature``, ``allow_unsigned``, ``key``: the signature policy (README
        "Verify"): with trusted keys configured, an unsigned pack or one signed by an unknown
        key is refused (PackError) unless ``allow_unsigned=True``."""
        from kbpack.pack.sign import SignaturePolicy

        policy = SignaturePolicy(Path(key) if key else None, require_signature, allow_unsigned)
        self.reader = PackReader(path)
        try:
            self.signature = policy.enforce(self.reader.header, self.reader.path)
        except BaseException:
            self.reader.close()
            raise
        self._threads = threads
        self.path = self.reader.path
        self._rerank_arg = Path(rerank) if rerank else None
        self._model_arg = Path(model) if model else None
        self._load_model = load_model
        self._searcher: Searcher | None = None

    def close(self) -> None:
        if self._searcher is not None:
            self._searcher.finish_loading()  # never close the file under a running load
        self.reader.close()

    @property
    def n_chunks(self) -> int:
        return int(self.reader.counts.get("chunks", 0))

    def _assemble(self) -> Searcher:
        # the model loads in a worker thread while the search does its other work; the search
        # modules are imported after it started, and so meanwhile too
        from kbpack.search.assemble import assemble

        return assemble(
            [self.reader],
            model=self._model_arg,
            load_model=self._load_model,
            threads=self._threads,
            rerank=self._rerank_arg,
            background=True,
        )

    def ask(self, question: str, llm: Any, **kw: Any) -> Answer:
        """An answer from the chat model ``llm`` (a GGUF path, a loaded
        ``kbpack.answer.generate.ChatModel``, or None: extractive) with every sentence checked
        against the passage it cites (``kbpack.answer.answer.ask`` lists the keywords)."""
        from kbpack.answer.answer import ask

        return ask(self, question, llm, **kw)

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
