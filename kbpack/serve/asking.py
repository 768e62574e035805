"""``ask`` for ``kbpack serve`` and ``kbpack mcp``: the chat model loaded once, generation one
request at a time, and the extractive answer when no model was given.

Why a lock and a bound: a llama.cpp context serves one caller at a time, and a generation holds
the CPU for seconds. Asks wait on one lock in the server's thread pool; at most ``MAX_WAITING``
wait (more get ``Busy``, HTTP 503) and none waits longer than ``WAIT_S``, so queued asks can
never take every thread of the pool: searches and pages keep being answered meanwhile. Each
generation is bounded by ``max_tokens``. A refused question never reaches the lock.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from kbpack.answer.answer import DEFAULT_MAX_TOKENS, Answer, ask
from kbpack.answer.generate import DEFAULT_CONTEXT, ChatModel, load_chat_model
from kbpack.errors import KbpackError
from kbpack.schema import SCHEMA
from kbpack.serve.library import Library, check_query

MAX_WAITING = 4  # asks queued behind the one generating
WAIT_S = 120.0  # the longest an ask waits for the model
NO_MODEL = (
    "no chat model is loaded (kbpack serve PACK... --llm MODEL.gguf): "
    "the answer is quoted from the pack"
)


class Busy(KbpackError):
    """Too many asks are waiting for the model (HTTP 503: try again shortly)."""


class _Searchable:
    """What ``kbpack.answer.ask`` searches: one served pack, or all of them as one, through the
    library (so its locks apply). The last response is kept: the server searches once to learn
    whether the question is refused, and ``ask`` then gets that same response."""

    def __init__(self, library: Library, pack: str | None, mode: str) -> None:
        self.library, self.pack, self.mode = library, pack, mode
        self._last: tuple[Any, Any] | None = None
        self.seconds = 0.0  # the last search that ran (a kept one costs nothing)

    def search(self, question: str, *, k: int = 5, refuse: bool = True, **kw: Any) -> Any:
        key = (question, k, refuse, sorted(kw.items()))
        if self._last is None or self._last[0] != key:
            t0 = time.perf_counter()
            resp = self.library.search(
                self.pack, question, k=k, mode=self.mode, refuse=refuse, **kw
            )
            self._last = (key, resp)
            self.seconds = time.perf_counter() - t0
        return self._last[1]


class Asker:
    """The server's answerer: ``llm`` (a chat GGUF) is checked, hashed and loaded here, once."""

    def __init__(
        self,
        library: Library,
        llm: Path | None = None,
        *,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        context: int = DEFAULT_CONTEXT,
        threads: int | None = None,
        waiting: int = MAX_WAITING,
    ) -> None:
        self.library = library
        self.max_tokens, self.context = max_tokens, context
        self.model: ChatModel | None = None
        if llm is not None:
            self.model = load_chat_model(Path(llm), threads, context + max_tokens)
        self.generations = 0  # answers the model was asked to write, since the server started
        self._lock = threading.Lock()
        self.waiting = waiting
        self._slots = threading.BoundedSemaphore(waiting + 1)

    def answer(
        self,
        question: str,
        pack: str | None = None,
        *,
        k: int = 5,
        mode: str = "hybrid",
        **filters: Any,
    ) -> Answer:
        """The checked answer to ``question`` from ``pack`` (None: every pack as one).
        ``filters``: ``doc``, ``kind``, ``section``, as for ``Library.search``."""
        check_query(question, k, mode)
        filters = {key: v for key, v in filters.items() if v}
        where = _Searchable(self.library, pack, mode)
        if self.model is None:  # extractive: no model, no lock
            a = ask(where, question, None, k=k, **filters)
            if not a.refused:
                a.notes.append(NO_MODEL)
            return a
        # retrieval first, outside the lock: a refused question never waits for the model
        if not where.search(question, k=k, **filters).answered:
            return _retrieval_timed(ask(where, question, None, k=k, **filters), where)
        if not self._slots.acquire(blocking=False):
            raise Busy(
                f"{self.waiting + 1} questions are already with the model: ask again shortly"
            )
        try:
            if not self._lock.acquire(timeout=WAIT_S):
                raise Busy(f"the model stayed busy for {WAIT_S:.0f} s: ask again shortly")
            try:
                self.generations += 1
                model, n, most = self.model, self.context, self.max_tokens
                a = ask(where, question, model, k=k, max_tokens=most, context=n, **filters)
                return _retrieval_timed(a, where)
            finally:
                self._lock.release()
        finally:
            self._slots.release()

    def identity(self) -> dict[str, Any] | None:
        return None if self.model is None else self.model.identity()


def _retrieval_timed(a: Answer, where: _Searchable) -> Answer:
    """The answer's ``retrieval_s`` is the search run before the lock, not ``ask``'s re-use."""
    a.timings["retrieval_s"] = round(where.seconds, 4)
    return a


def answer_json(a: Answer, pack: str | None) -> dict[str, Any]:
    """``/api/ask``'s and the MCP tool's object: the envelope, the pack, ``ask --json``'s keys."""
    return {"schema": SCHEMA, "command": "ask", "pack": pack, **a.as_dict()}
