"""The one place a searcher and its query-side embedder are put together, for one pack or a
pack set, for the Python API (``kbpack.open``, ``kbpack.open_many``) and for a server
(``kbpack serve``, ``kbpack mcp``), which shares one embedder per model among its packs."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kbpack.pack import format as F
from kbpack.pack.read import PackReader

if TYPE_CHECKING:
    from kbpack.search.corpus import PackCorpus
    from kbpack.search.searcher import Searcher

NO_VECTORS = "this pack has no vectors (built with --no-vectors): lexical-only"


def assemble(
    readers: Sequence[PackReader],
    *,
    model: Path | None = None,
    load_model: bool = True,
    threads: int | None = None,
    rerank: Path | None = None,
    background: bool = False,
    shared: dict[str, tuple[Any, list[str]]] | None = None,
    corpora: Sequence[PackCorpus] | None = None,
    names: Sequence[str] | None = None,
    notes: Sequence[str] = (),
) -> Searcher:
    """A ``Searcher`` over ``readers`` (one pack, or several searched as one) with its embedder:

    * ``model``: the model file asked for (``kbpack.model.resolve`` decides whether it fits);
      ``load_model=False``: none, lexical-only;
    * ``background``: load the model in a worker thread while the first search does its other
      work (one pack: the CLI and ``kbpack.open``);
    * ``shared``: a server's embedders by model hash: one per model, shared by the request
      threads (``SerialEmbedder``), and a note for a pack without vectors;
    * ``corpora``: each pack's corpus, already open (a server's set reuses its packs');
    * ``notes``: said after the model's notes (a set's membership notes).
    """
    loading = None
    if len(readers) == 1:
        # the model starts loading first: the search modules are imported meanwhile
        embedder, loading, said = _embedder(
            readers[0], model, load_model, threads, background, shared
        )
        from kbpack.search.corpus import PackCorpus

        corpus: Any = corpora[0] if corpora else PackCorpus(readers[0])
    else:
        from kbpack.search.corpus import PackCorpus
        from kbpack.search.federate import SetCorpus, model_mismatch

        corpus = SetCorpus(corpora or [PackCorpus(r) for r in readers], names)
        mixed = model_mismatch(readers)
        if mixed:
            embedder, said = None, [f"{mixed}: dense search skipped, lexical-only results"]
        else:
            embedder, _, said = _embedder(readers[0], model, load_model, threads, False, shared)
    said = [*said, *notes]
    if len(readers) > 1:
        thresholds = {r.path.name: r.search_defaults["max_distance"] for r in readers}
        if len(set(thresholds.values())) > 1:
            each = ", ".join(f"{k} {v:g}" for k, v in thresholds.items())
            said.append(f"each pack's results are held to its own threshold ({each})")
    from kbpack.model.resolve import load_reranker
    from kbpack.search.searcher import Searcher

    searcher = Searcher(corpus, embedder, said, loading=loading)
    if rerank is not None and loading is not None:
        # two llama.cpp model loads at once (one per thread) are not safe: the process ended
        # silently with exit 0 in 3 of 4 runs (tests/test_rerank.py)
        loading.wait()
    searcher.reranker = load_reranker(rerank, threads)
    return searcher


def _embedder(
    reader: PackReader,
    model: Path | None,
    load_model: bool,
    threads: int | None,
    background: bool,
    shared: dict[str, tuple[Any, list[str]]] | None,
) -> tuple[Any | None, Any | None, list[str]]:
    """(embedder, its load still running, notes) for ``reader``'s model."""
    if shared is not None and reader.model is None:
        return None, None, [NO_VECTORS]
    if not load_model:
        return None, None, []
    if shared is not None:
        assert reader.model is not None
        sha = str(reader.model[F.M_SHA256])
        if sha not in shared:
            from kbpack.model.resolve import resolve_embedder

            raw, why = resolve_embedder(reader, model)
            shared[sha] = (SerialEmbedder(raw) if raw is not None else None, why)
        embedder, why = shared[sha]
        return embedder, None, list(why)
    if background:
        from kbpack.model.resolve import start_embedder

        loading, why = start_embedder(reader, model, threads=threads)
        return None, loading, list(why)
    from kbpack.model.resolve import resolve_embedder

    embedder, why = resolve_embedder(reader, model, threads=threads)
    return embedder, None, list(why)


class SerialEmbedder:
    """A server's embedder, shared by its request threads.

    An ``Embedder`` is a pool of llama.cpp contexts (kbpack/model/embedder.py): each call takes
    free ones, so up to ``contexts`` requests embed at once, with the vectors of a lone call.
    Calls to an embedder without a pool (no true ``concurrent`` attribute) run one at a time,
    as llama.cpp contexts are not thread-safe."""

    def __init__(self, inner: Any) -> None:
        import contextlib
        import threading

        self._inner = inner
        pooled = bool(getattr(inner, "concurrent", False))
        self._lock: Any = contextlib.nullcontext() if pooled else threading.Lock()

    def embed(self, texts: Sequence[str]) -> Any:
        with self._lock:
            return self._inner.embed(texts)

    def count_tokens(self, text: str) -> int:
        with self._lock:
            return int(self._inner.count_tokens(text))

    def __getattr__(self, name: str) -> Any:  # read-only attributes (dims, window, ...)
        return getattr(self._inner, name)
