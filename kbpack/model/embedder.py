"""Embedder: texts -> L2-normalised float32 vectors, computed locally by llama.cpp.

llama.cpp aborts the whole process (SIGABRT, uncatchable) when a batch holds more tokens than
``n_ubatch`` for a non-causal model, when a sequence's positions exceed the model's, or when
it loads a context above 256 tokens that is not a multiple of 256. So the context is sized
from the model (``n_ctx = n_batch = n_ubatch``: ``context_tokens``) and every input is
tokenized first and cut to the token window explicitly -- counted in ``truncated`` -- before
llama.cpp sees it.

Data parallel: an ``Embedder`` holds up to ``contexts`` llama.cpp contexts on the one loaded
model (the weights are shared; each context adds only its compute buffers), each running its
share of ``threads``. A call's planned decode batches are spread over the free contexts, each
context in its own thread (ctypes releases the GIL in ``llama_decode``), and concurrent callers
(a server's request threads) each take free contexts, so ``embed`` may be called from several
threads at once. Which texts share a batch is decided before (``_plan``), never by the
contexts, and llama.cpp's result for a batch does not depend on the context or its thread
count (tests/model/test_contexts.py): the vectors are the same bits however many contexts run.
Contexts beyond the first are made when a call first needs them: a one-query CLI call makes
none.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import queue
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from kbpack.errors import ModelError
from kbpack.model import keys as K
from kbpack.model.cache import default_model_path
from kbpack.model.gguf_header import check_hyperparameters, read_gguf_metadata
from kbpack.model.identity import EMBEDDING_POOLINGS, ModelIdentity, identify_gguf, sha256_file
from kbpack.model.llama_backend import load_cpu_backend
from kbpack.model.prefixes import Prefixes, default_prefixes

# llama.cpp's CPU backend runs its threads under OpenMP (libgomp), which reads this variable
# once, when the library loads. With the default (spin, then sleep) a query embedded on the
# process's main thread took 134-472 ms vs 9 ms on a worker thread on this shared 2-core
# machine, and batch embedding 136 ms per text; with PASSIVE (idle threads sleep at once) all
# three took 6-18 ms (bench/embed_thread.py, bench/RESULTS.md). setdefault: a value the user
# chose wins. Every llama_cpp import in kbpack follows this module's import.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__all__ = ["Embedder", "ModelIdentity", "Prefixes", "default_model_path", "sha256_file"]

# Tokens per llama_decode call. Attention inside one batch runs across all its tokens (masked
# per sequence), so big batches cost more than they save: on MiniLM, 1 thread, real chunks,
# 256 tokens took 66 ms CPU per chunk, 512 took 69 (109 without flash attention).
BATCH_TOKENS = 256
# Flash attention: 66 vs 79 ms CPU per chunk at 256-token batches, same measurement.
FLASH_ATTENTION = True
# A call that is one decode batch of at least this many tokens (a long query) runs on all the
# embedder's threads while no other call holds a context; shorter ones, and every batch of a
# call that spreads over several contexts, on one. Alone, two idle cores, 1 vs 2 threads
# (bench/embed_contexts.py, bench/RESULTS.md): dev questions (~23 tokens) 10.9 vs 12.6 ms and
# 9.3 vs 11.3; 40-56 tokens mixed; 64 tokens 24.8 vs 19.2, 33.9 vs 26.4 (and a tie, 26.5 vs
# 26.8); 128 tokens 49.4 vs 37.9; 250 tokens 89.9 vs 53.9. The same bits either way.
ALL_THREADS_TOKENS = 64
# llama.cpp (llama-cpp-python 0.3.36) aborts the process (GGML_ASSERT(ggml_can_mul_mat),
# SIGABRT) while it loads a context of more than this many tokens that is not a multiple of
# it: 300, 320, 384, 400 and 640 aborted, 64, 100, 200, 256, 512 and 768 did not (tiny BERT
# models, tests/model/test_embed.py). A context larger than the model's positions is harmless:
# positions count per sequence, and no sequence is longer than the window.
CONTEXT_STEP = 256


def context_tokens(window: int, positions: int) -> int:
    """The context (= batch = ubatch) size for a model: room for a whole window and for
    ``BATCH_TOKENS``, and a size llama.cpp loads (see ``CONTEXT_STEP``)."""
    need = max(window, BATCH_TOKENS)
    if need <= CONTEXT_STEP:
        return min(positions, need)
    return -(-need // CONTEXT_STEP) * CONTEXT_STEP


_llama_errors: deque[str] = deque(maxlen=4)
_log_callback: Any = None  # kept referenced: llama.cpp holds a raw pointer to it


class BatchCache(Protocol):
    """Pooled outputs of whole decode batches (kbpack/model/embed_cache.py)."""

    def lookup(self, batch: Sequence[Sequence[int]]) -> np.ndarray | None: ...

    def store(self, batch: Sequence[Sequence[int]], pooled: np.ndarray) -> None: ...


# Told after each decode batch: (the batch's indices into the input, its tokens, whether it
# came from the cache).
OnBatch = Callable[[Sequence[int], int, bool], None]


# Contexts made by default at most: each holds its own compute buffers (~37 MB on MiniLM with a
# 256-token context, more for a model of a longer window), so a 64-core machine gets 16
# contexts of 4 threads (~0.6 GB on MiniLM) rather than 64 of one (2.4 GB). Not measured
# beyond 2 cores: a memory bound, not a tuned speed.
MAX_CONTEXTS = 16


def available_threads() -> int:
    """CPUs this process may run on (cgroup/affinity aware), not the machine's total."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class Embedder:
    """One loaded GGUF embedding model.

    ``embed(texts)`` returns float32 ``(n, dims)`` unit vectors, in input order. Inputs longer
    than ``window`` tokens are cut to ``window`` (keeping the closing special token, as
    sentence-transformers does) and counted in ``truncated``; callers that must not lose text
    check ``count_tokens`` first.

    ``prefixes`` are what ``embed_documents`` / ``embed_query`` put before each text (None: the
    defaults of the model's family, see kbpack/model/prefixes.py). ``embed`` adds none.

    ``threads`` (default: the available cores) is the CPU threads llama.cpp may use in all;
    ``contexts`` (default: ``threads``, at most ``MAX_CONTEXTS``) how many llama.cpp contexts
    share them, each with ``threads // contexts`` of them. One thread per context is the
    fastest use of the cores for a build (independent batches, no synchronisation inside a
    batch) and for a short query (one short batch ran slower on two threads than on one); a
    call that is one long batch (a long query, ``ALL_THREADS_TOKENS``) runs on all the threads
    while no other call runs.
    ``contexts=1`` is kbpack 0.2's single context running all the threads. The vectors are the
    same bits for every setting.
    """

    POOLINGS: tuple[str, ...] = EMBEDDING_POOLINGS  # what identify_gguf accepts
    # embed/embed_tokens/count_tokens may be called from several threads at once (a pool)
    concurrent = True

    def __init__(
        self,
        model_path: Path | None = None,
        *,
        threads: int | None = None,
        prefixes: Prefixes | None = None,
        contexts: int | None = None,
    ) -> None:
        path = Path(model_path) if model_path is not None else default_model_path()
        if not path.is_file():
            raise ModelError(f"{path}: model file not found; pass an existing FILE.gguf")
        self.path = path
        # validates the header first, the pooling included
        self.identity: ModelIdentity = identify_gguf(path, poolings=self.POOLINGS)
        meta = read_gguf_metadata(path)
        positions = int(meta[K.CONTEXT_LENGTH.format(arch=self.identity.architecture)])
        self.window: int = self.identity.window
        self.dims: int = self.identity.dims
        self._out_width = self.dims  # floats llama.cpp pools per sequence (a reranker: 1)
        self.truncated: int = 0
        self.threads = threads or available_threads()
        if contexts is not None and contexts < 1:
            raise ValueError(f"contexts must be 1 or more, not {contexts}")
        self.contexts: int = min(contexts or min(self.threads, MAX_CONTEXTS), self.threads)
        self._context_threads = max(1, self.threads // self.contexts)
        self._made_for = (self.threads, self.contexts)  # what ``share`` may give back
        # n_ctx bounds the tokens of one llama_decode; all of them must fit in one ubatch.
        self._n_ctx = context_tokens(self.window, positions)
        self._batch_tokens = min(BATCH_TOKENS, self._n_ctx)
        check_hyperparameters(path)  # llama.cpp aborts on some (block_count 0), uncatchably
        self._llm = _load(path, self._n_ctx, self._context_threads)
        n_embd = int(self._llm.n_embd())
        if n_embd != self.dims:
            raise ModelError(f"{path}: llama.cpp reports {n_embd} dims, the header {self.dims}")
        self._max_sequences = int(self._llm.context_params.n_seq_max)
        # The contexts not in use (the first: the Llama's own); ``_made`` counts all there are.
        self._idle: list[_Context] = [_Context(self._llm._ctx, self._llm._batch)]
        self._extra: list[_Context] = []  # the contexts made after the first, closed first
        self._made = 1
        self._pool = threading.Condition()
        self._making = threading.Lock()  # one llama.cpp context created at a time
        _check_special_tokens(path, self._llm)  # before the first tokenize() call
        self._prefix, self._suffix = self._special_layout()
        self.prefixes = (
            prefixes if prefixes is not None else default_prefixes(self.identity.name, path.stem)
        )

    @property
    def stamp(self) -> dict[str, str | int]:
        """What a pack records about the vectors: the model identity and the prefixes."""
        return {**self.identity.as_dict(), **self.prefixes.as_stamp()}

    def close(self) -> None:
        """Free llama.cpp's model and contexts now rather than at garbage collection."""
        for extra in self._extra:
            extra.close()
        self._extra.clear()
        self._llm.close()

    def share(self, threads: int) -> None:
        """Use at most ``threads`` CPU threads, and so contexts, from now on: a server's
        worker process, forked with this embedder, gets its share of the cores (contexts are
        made when calls need them, so after the fork, in each worker). Contexts already made
        stay."""
        with self._pool:
            self.threads = max(1, min(threads, self._made_for[0]))
            self.contexts = max(self._made, min(self._made_for[1], self.threads))

    @property
    def contexts_made(self) -> int:
        """The llama.cpp contexts made so far (they are made when a call first needs them)."""
        return self._made

    def __enter__(self) -> Embedder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- tokens --------------------------------------------------------------------------

    def tokenize(self, text: str) -> list[int]:
        """The model's own tokens for ``text``, special tokens included, never truncated."""
        # special=False: a literal "[CLS]" in a document is text, not a control token.
        tokens: list[int] = self._llm.tokenize(text.encode("utf-8", "replace"), add_bos=True)
        return tokens

    def count_tokens(self, text: str) -> int:
        """Tokens that would reach the model for ``text`` if the window were unlimited."""
        return len(self.tokenize(text))

    def count_document_tokens(self, text: str) -> int:
        """Tokens of ``text`` as a document reaches the model: the document prefix counts."""
        return len(self.tokenize(self.prefixes.document + text))

    def fit(self, tokens: list[int]) -> list[int]:
        """``tokens`` cut to the window, keeping the model's closing special tokens."""
        if len(tokens) <= self.window:
            return tokens
        keep = self.window - self._suffix
        return tokens[:keep] + tokens[len(tokens) - self._suffix :]

    # -- vectors -------------------------------------------------------------------------

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """float32 (len(texts), dims), L2-normalised, in input order."""
        return self.embed_tokens(self.prepare(texts))

    def prepare(self, texts: Sequence[str]) -> list[list[int]]:
        """The tokens ``embed`` gives the model for each text: cut to the window (counted in
        ``truncated``), never empty. A caller that wants the token count of a batch before
        the (long) model call prepares it first, then calls ``embed_tokens``."""
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of strings; wrap a single text in a list")
        tokenized = []
        for text in texts:
            tokens = self.tokenize(text)
            if len(tokens) > self.window:
                self.truncated += 1
                tokens = self.fit(tokens)
            tokenized.append(tokens or self._empty_input())
        return tokenized

    def embed_tokens(
        self,
        tokenized: Sequence[list[int]],
        cache: BatchCache | None = None,
        on_batch: OnBatch | None = None,
    ) -> np.ndarray:
        """``embed`` of texts already through ``prepare``: float32 unit vectors, input order.

        ``cache`` supplies (and keeps) whole decode batches; ``on_batch`` hears of each batch
        as it is done, so a caller can show progress inside one long call. Neither changes
        which texts share a decode batch, so the vectors are the same bits either way."""
        out = self._pooled(list(tokenized), cache, on_batch)
        if not tokenized:
            return out
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        if not np.all(np.isfinite(norms)) or np.any(norms == 0):
            raise ModelError(f"{self.path}: the model produced a zero or non-finite vector")
        out /= norms
        return out

    def _pooled(
        self,
        tokenized: list[list[int]],
        cache: BatchCache | None = None,
        on_batch: OnBatch | None = None,
    ) -> np.ndarray:
        """llama.cpp's pooled output, float32 (len(tokenized), width), for token lists that
        already fit the window, in input order, as few llama_decode calls as fit.

        ``cache`` supplies (and keeps) whole decode batches; the others are decoded over the
        free contexts. ``cache`` and ``on_batch`` are used in the calling thread only: the
        batches the cache holds first, then the decoded ones as each is done."""
        out = np.zeros((len(tokenized), self._out_width), dtype=np.float32)
        todo: list[list[int]] = []
        for batch in self._plan(tokenized):
            known = cache.lookup([tokenized[i] for i in batch]) if cache is not None else None
            if known is None:
                todo.append(batch)
                continue
            out[batch] = known
            if on_batch is not None:
                on_batch(batch, sum(len(tokenized[i]) for i in batch), True)

        def done(batch: list[int]) -> None:
            if cache is not None:
                cache.store([tokenized[i] for i in batch], out[batch])
            if on_batch is not None:
                on_batch(batch, sum(len(tokenized[i]) for i in batch), False)

        self._decode_all(todo, tokenized, out, done)
        return out

    def batches(self, tokenized: Sequence[list[int]]) -> list[list[list[int]]]:
        """The token lists of each llama_decode call ``embed_tokens`` makes for ``tokenized``."""
        return [[tokenized[i] for i in batch] for batch in self._plan(tokenized)]

    def _plan(self, tokenized: Sequence[list[int]]) -> list[list[int]]:
        """Which inputs share each llama_decode call (their indices). The vectors depend on it
        (llama.cpp's arithmetic runs over the whole batch), so it is a function of the inputs
        alone: the same texts in the same order always make the same batches."""
        # Similar lengths together: batches fill evenly and attention wastes less.
        order = sorted(range(len(tokenized)), key=lambda i: len(tokenized[i]))
        plan: list[list[int]] = []
        batch: list[int] = []
        used = 0
        for i in order:
            n = len(tokenized[i])
            # A text longer than the batch budget (but <= window <= n_ctx) goes alone; the
            # sequence cap keeps seq ids under llama.cpp's n_seq_max (many empty texts).
            full = used + n > self._batch_tokens or len(batch) >= self._max_sequences
            if batch and full:
                plan.append(batch)
                batch, used = [], 0
            batch.append(i)
            used += n
        if batch:
            plan.append(batch)
        return plan

    def _decode_all(
        self,
        todo: list[list[int]],
        tokenized: list[list[int]],
        out: np.ndarray,
        done: Callable[[list[int]], None],
    ) -> None:
        """Decode the batches ``todo`` into ``out``'s rows over as many free contexts as there
        are batches (up to ``contexts``), ``done`` told of each in the calling thread as it
        finishes. One context: decoded in the calling thread. Several: one thread each, taking
        the next batch (longest texts first) as they finish one; an error, or an exception
        from ``done`` (Ctrl-C), stops them after their current batch and is raised here once
        all have stopped."""
        if not todo:
            return
        held = self._take(len(todo))
        try:
            if len(held) == 1:
                with self._all_threads_if_alone(held[0], todo, tokenized):
                    for batch in todo:
                        self._decode(held[0], batch, tokenized, out)
                        done(batch)
                return
            self._decode_parallel(held, todo, tokenized, out, done)
        finally:
            self._give(held)

    def _decode_parallel(
        self,
        held: list[_Context],
        todo: list[list[int]],
        tokenized: list[list[int]],
        out: np.ndarray,
        done: Callable[[list[int]], None],
    ) -> None:
        # the plan goes from the shortest texts to the longest: the costliest batches first,
        # so that the contexts finish about together
        turn = reversed(todo)
        turn_lock = threading.Lock()
        stop = threading.Event()
        finished: queue.SimpleQueue[tuple[list[int], BaseException | None]] = queue.SimpleQueue()

        def work(context: _Context) -> None:
            while not stop.is_set():
                with turn_lock:
                    batch = next(turn, None)
                if batch is None:
                    return
                try:
                    self._decode(context, batch, tokenized, out)
                except BaseException as e:  # raised in the caller's thread
                    finished.put((batch, e))
                    return
                finished.put((batch, None))

        workers = [
            threading.Thread(target=work, args=(c,), name="kbpack-embed", daemon=True) for c in held
        ]
        started: list[threading.Thread] = []
        try:
            for w in workers:
                w.start()
                started.append(w)
            for _ in todo:
                batch, error = finished.get()
                if error is not None:
                    raise error
                done(batch)
        finally:
            stop.set()
            for w in started:
                w.join()  # a context goes back to the pool only once its decode is over

    @contextlib.contextmanager
    def _all_threads_if_alone(
        self, context: _Context, todo: list[list[int]], tokenized: list[list[int]]
    ) -> Iterator[None]:
        """Run ``context`` on all ``threads`` meanwhile if ``todo`` is one long batch and no
        other call holds a context (``ALL_THREADS_TOKENS``)."""
        with self._pool:
            alone = self._made - len(self._idle) == 1
        long = len(todo) == 1 and sum(len(tokenized[i]) for i in todo[0]) >= ALL_THREADS_TOKENS
        if not (alone and long and self.threads > self._context_threads):
            yield
            return
        import llama_cpp

        llama_cpp.llama_set_n_threads(context.ctx.ctx, self.threads, self.threads)
        try:
            yield
        finally:
            n = self._context_threads
            llama_cpp.llama_set_n_threads(context.ctx.ctx, n, n)

    def _take(self, want: int) -> list[_Context]:
        """Up to ``want`` contexts, at least one: the idle ones, then new ones while fewer
        than ``contexts`` exist; waits while all are in use. A context that cannot be made
        (memory) caps ``contexts`` at those there are, unless there would be none to use."""
        with self._pool:
            while not self._idle and self._made >= self.contexts:
                self._pool.wait()
            held = [self._idle.pop() for _ in range(min(want, len(self._idle)))]
            making = min(want - len(held), self.contexts - self._made)
            self._made += making
        try:
            for _ in range(making):
                held.append(self._new_context())
                making -= 1
        except ModelError:
            with self._pool:
                self._made -= making
                self.contexts = self._made
                self._pool.notify_all()
            if not held:
                raise
        return held

    def _give(self, held: list[_Context]) -> None:
        with self._pool:
            self._idle.extend(held)
            self._pool.notify_all()

    def _new_context(self) -> _Context:
        """Another llama.cpp context on the loaded model, as the first one was made."""
        import llama_cpp
        from llama_cpp import _internals

        llm = self._llm
        params = type(llm.context_params).from_buffer_copy(llm.context_params)
        with self._making, _log_discarded(llama_cpp):
            try:
                ctx = _internals.LlamaContext(model=llm._model, params=params, verbose=False)
            except (ValueError, RuntimeError, OSError) as e:
                raise ModelError(f"{self.path}: llama.cpp cannot make another context ({e})") from e
            batch = _internals.LlamaBatch(
                n_tokens=llm.n_batch, embd=0, n_seq_max=params.n_ctx, verbose=False
            )
            context = _Context(ctx, batch)
            self._extra.append(context)
        return context

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """``embed`` of each text behind the document prefix."""
        return self.embed(self.document_texts(texts))

    def document_texts(self, texts: Sequence[str]) -> list[str]:
        """``texts`` as ``embed_documents`` gives them to ``embed``: behind the prefix."""
        return [self.prefixes.document + t for t in texts]

    def embed_query(self, query: str) -> np.ndarray:
        """float32 (dims,) unit vector of ``query`` behind the query prefix."""
        return self.embed([self.prefixes.query + query])[0]

    def _decode(
        self, context: _Context, batch: list[int], tokenized: list[list[int]], out: np.ndarray
    ) -> None:
        import llama_cpp

        sizes = [len(tokenized[i]) for i in batch]
        # The last guard before C code that aborts the process instead of raising.
        if sum(sizes) > self._n_ctx or max(sizes) > self.window or len(batch) > self._max_sequences:
            raise ModelError(f"{self.path}: internal error: batch {sizes} exceeds {self._n_ctx}")
        ctx, lbatch = context.ctx, context.batch
        lbatch.reset()
        for seq, i in enumerate(batch):
            lbatch.add_sequence(tokenized[i], seq, True)
        ctx.kv_cache_clear()
        _llama_errors.clear()
        try:
            ctx.decode(lbatch)
        except RuntimeError as e:
            raise ModelError(
                f"{self.path}: llama.cpp failed to embed ({_last_error() or e})"
            ) from e
        finally:
            lbatch.reset()
        for seq, i in enumerate(batch):
            ptr = llama_cpp.llama_get_embeddings_seq(ctx.ctx, seq)
            if not ptr:
                raise ModelError(f"{self.path}: llama.cpp returned no pooled embedding")
            out[i] = np.ctypeslib.as_array(ptr, shape=(self._out_width,))

    def _empty_input(self) -> list[int]:
        """Tokens for an empty text on a model that adds no special tokens (llama.cpp cannot
        pool zero tokens): its end-of-sequence token, as such models mark a text's end."""
        import llama_cpp as L

        vocab = L.llama_model_get_vocab(self._llm._model.model)
        for token in (L.llama_vocab_eos(vocab), L.llama_vocab_bos(vocab)):
            if 0 <= token < L.llama_vocab_n_tokens(vocab):
                return [int(token)]
        raise ModelError(f"{self.path}: cannot embed an empty text: the model has no EOS or BOS")

    def _special_layout(self) -> tuple[int, int]:
        """How many special tokens the model adds before and after the text."""
        empty = self.tokenize("")
        probe = self.tokenize("a")
        prefix = 0
        while prefix < len(empty) and prefix < len(probe) and empty[prefix] == probe[prefix]:
            prefix += 1
        return prefix, len(empty) - prefix


class _Context:
    """One llama.cpp context of an ``Embedder`` and the batch it decodes from; used by one
    thread at a time (the pool hands it out)."""

    __slots__ = ("batch", "ctx")

    def __init__(self, ctx: Any, batch: Any) -> None:
        self.ctx = ctx
        self.batch = batch

    def close(self) -> None:
        self.batch.close()
        self.ctx.close()


def _load(path: Path, n_ctx: int, threads: int) -> Any:
    try:
        import llama_cpp
    except ImportError as e:
        raise ModelError(
            f"llama-cpp-python is not importable ({e}); install it with "
            '`CMAKE_ARGS="-DGGML_NATIVE=OFF" pip install llama-cpp-python`, '
            "or build with --no-vectors"
        ) from e
    _silence(llama_cpp)
    load_cpu_backend(llama_cpp)  # a runtime-dispatch build has none until asked
    with contextlib.suppress(ValueError, RuntimeError, OSError), _log_discarded(llama_cpp):
        return _llama(llama_cpp, path, n_ctx, threads)
    # It failed: load again with the log recorded, for llama.cpp's own lines saying why (a
    # failed load is quick, and rare: identify_gguf has checked the header already).
    _llama_errors.clear()
    try:
        return _llama(llama_cpp, path, n_ctx, threads)
    except (ValueError, RuntimeError, OSError) as e:
        # llama.cpp's own error lines say why; the Python exception only repeats the path.
        raise ModelError(f"{path}: llama.cpp cannot load the model ({_last_error() or e})") from e


def _llama(llama_cpp: Any, path: Path, n_ctx: int, threads: int) -> Any:
    return llama_cpp.Llama(
        model_path=str(path),
        embedding=True,
        n_ctx=n_ctx,
        n_batch=n_ctx,
        n_ubatch=n_ctx,  # non-causal models need a whole batch in one ubatch
        n_threads=threads,
        n_threads_batch=threads,
        flash_attn=FLASH_ATTENTION,
        verbose=False,
    )


@contextlib.contextmanager
def _log_discarded(llama_cpp: Any) -> Iterator[None]:
    """llama.cpp's log goes nowhere, without Python, while a model loads.

    A model load logs ~420 lines (the default model: 273 debug, 118 info, 33 continued), and
    a Python log callback takes the GIL for each. With the load in a worker thread while the
    main thread runs Python (kbpack/model/load.py, kbpack/model/early.py), every line waited
    for the main thread to let go of the GIL (up to 5 ms, ``sys.getswitchinterval``), and the
    load finished only when the main thread's imports did. The callback here is a C function
    of libllama that reads nothing and does nothing (``llama_supports_mmap``: ``bool (void)``);
    called with the callback's three arguments, it ignores them, as every C calling
    convention llama.cpp runs on (x86-64 SysV and Windows, AArch64) lets a callee do. If the
    library lacks it, the recording callback stays."""
    noop = _noop_log_callback(llama_cpp)
    if noop is None:
        yield
        return
    llama_cpp.llama_log_set(noop, ctypes.c_void_p(0))
    try:
        yield
    finally:
        llama_cpp.llama_log_set(_log_callback, ctypes.c_void_p(0))


_noop_callback: Any = None  # kept referenced, like _log_callback


def _noop_log_callback(llama_cpp: Any) -> Any | None:
    global _noop_callback
    if _noop_callback is None:
        try:
            address = ctypes.cast(llama_cpp.llama_cpp._lib.llama_supports_mmap, ctypes.c_void_p)
        except AttributeError:
            return None
        _noop_callback = llama_cpp.llama_log_callback(address.value)
    return _noop_callback


def _check_special_tokens(path: Path, llm: Any) -> None:
    """llama.cpp's tokenizer asserts (aborting the process) when it must add a BOS, EOS or SEP
    token the model does not define; refuse such a model here instead."""
    import llama_cpp as L

    vocab = L.llama_model_get_vocab(llm._model.model)
    n_vocab = L.llama_vocab_n_tokens(vocab)
    wordpiece = L.llama_vocab_type(vocab) == L.LLAMA_VOCAB_TYPE_WPM
    needed = {
        "bos": (wordpiece or L.llama_vocab_get_add_bos(vocab), L.llama_vocab_bos(vocab)),
        "eos": (L.llama_vocab_get_add_eos(vocab), L.llama_vocab_eos(vocab)),
        "sep": (wordpiece or L.llama_vocab_get_add_sep(vocab), L.llama_vocab_sep(vocab)),
    }
    for name, (used, token) in needed.items():
        if used and not 0 <= token < n_vocab:
            raise ModelError(
                f"{path}: the tokenizer adds a {name.upper()} token but tokenizer.ggml."
                f"{name}_token_id is missing or invalid; fix the GGUF's tokenizer metadata"
            )


def _silence(llama_cpp: Any) -> None:
    """Route llama.cpp's log to a small buffer: CLI output stays clean, and the last error
    lines can still explain a failed load."""
    global _log_callback
    if _log_callback is not None:
        return

    @llama_cpp.llama_log_callback  # type: ignore[untyped-decorator]
    def callback(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        if level == 4:  # GGML_LOG_LEVEL_ERROR (0 none, 1 debug, 2 info, 3 warn, 5 cont)
            _llama_errors.append(" ".join(text.decode("utf-8", "replace").split()))

    _log_callback = callback
    llama_cpp.llama_log_set(callback, ctypes.c_void_p(0))
    _keep_stdio(llama_cpp)


class _StdioKept:
    """Stands in for llama-cpp-python's ``suppress_stdout_stderr``, and suppresses nothing."""

    def __init__(self, disable: bool = True) -> None:
        pass

    def __enter__(self) -> _StdioKept:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def _keep_stdio(llama_cpp: Any) -> None:
    """Keep llama-cpp-python from silencing the process's stdout and stderr during a load.

    With ``verbose=False`` it points file descriptors 1 and 2 at /dev/null and swaps
    ``sys.stdout`` and ``sys.stderr`` for the whole process while llama.cpp loads the model,
    then puts back what it saw at the start. kbpack loads in a worker thread while the main
    thread goes on (kbpack/model/load.py, kbpack/model/early.py): a line the main thread wrote
    in that window went to /dev/null, and a stream it set meanwhile was replaced by a stale
    one (tests/model/test_early_model.py found it: a query's JSON lost under click's test runner).
    llama.cpp's log already comes to ``_silence``'s callback, so nothing is left to hide."""
    for name in ("llama_cpp.llama", "llama_cpp._internals"):
        module: Any = sys.modules.get(name)
        if module is not None and hasattr(module, "suppress_stdout_stderr"):
            module.suppress_stdout_stderr = _StdioKept


def _last_error() -> str:
    return "; ".join(line for line in _llama_errors if line)
