"""The query-side model, loaded in a worker thread while the query's other work runs.

A cold ``kbpack query`` spends most of its time in two kinds of work: Python (imports, the
pack's open and structure check, BM25, fusion, citations), which holds the GIL, and llama.cpp
loading the GGUF and embedding the query, which runs in C with the GIL released. Done one
after the other, they add up; with the load in a worker thread, the BM25 list, the mapping of
the vectors and the columns the citations read are done while llama.cpp loads
(bench/cold_query.py, bench/RESULTS.md "Cold query").

``import llama_cpp`` is Python work (~0.1-0.3 s): it runs in the calling thread before the
worker starts, so that the worker's time is the part that can overlap. The worker then embeds
the query as soon as the model is ready, if the caller has handed it one (``ahead``).

Results are the same as a load in the calling thread: the same ``Embedder``, the same text,
the same vector (tests/model/test_model_load.py).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

import numpy as np


class ModelLoad:
    """``build()`` (an ``Embedder``) running in a daemon thread; ``result()`` waits for it and
    returns it, or raises what the load raised, in the caller's thread."""

    def __init__(self, build: Callable[[], Any]) -> None:
        # the Python part of loading llama.cpp's bindings, here and not in the worker (above);
        # kbpack.model.embedder first: it sets OMP_WAIT_POLICY before llama_cpp loads
        from kbpack.model.embedder import Embedder  # noqa: F401

        with contextlib.suppress(ImportError):  # Embedder says how to install it, in result()
            import llama_cpp  # noqa: F401
        self._build = build
        self._lock = threading.Lock()
        self._loaded = False  # set under the lock once the model is ready
        self._want: str | None = None  # a text to embed as soon as the model is ready
        self._vectors: dict[str, np.ndarray] = {}
        self._embedder: Any | None = None
        self._prefixes: Any | None = None  # set by use_prefixes, applied in result()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="kbpack-model-load", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            embedder = self._build()
        except BaseException as e:  # handed to result(), in the caller's thread
            self._error = e
            with self._lock:
                self._loaded = True
            return
        self._embedder = embedder
        with self._lock:
            self._loaded = True
            text = self._want
        if text is not None:
            # on an error the caller embeds the text again, and gets the error in its thread
            with contextlib.suppress(Exception):
                self._vectors[text] = embedder.embed([text])[0]

    def ahead(self, text: str) -> None:
        """Embed ``text`` right after the load, in the worker (if the load is still running;
        otherwise the caller embeds it when it needs it)."""
        with self._lock:
            if not self._loaded:
                self._want = text

    @property
    def running(self) -> bool:
        """Whether the load (or the embedding handed to it) is still running."""
        return self._thread.is_alive()

    def use_prefixes(self, prefixes: Any) -> None:
        """Give the embedder these ``Prefixes`` (the pack's), as ``Embedder(prefixes=...)``
        would have: for a load started before the pack was read (``kbpack.model.early``).
        They are set last in ``Embedder.__init__`` and nothing in the load reads them."""
        self._prefixes = prefixes

    def result(self) -> Any:
        """The loaded embedder, once the load is done; the load's exception, raised here."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        if self._prefixes is not None and self._embedder is not None:
            self._embedder.prefixes = self._prefixes
        return self._embedder

    def embedder_if_loaded(self) -> Any | None:
        """The embedder once the load is done, or None if it failed (its error dropped)."""
        self._thread.join()
        return self._embedder

    def wait(self) -> None:
        """Wait for the load to end (its error, if any, stays for ``result``)."""
        self._thread.join()

    def vector(self, text: str) -> np.ndarray | None:
        """The vector the worker embedded for ``text`` (once), or None."""
        self._thread.join()
        return self._vectors.pop(text, None)
