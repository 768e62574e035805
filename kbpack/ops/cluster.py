"""Builds on a Dask cluster (``kbpack build SRC -o OUT --workers N`` or ``--scheduler ADDR``).

Extraction, chunking and embedding -- the work that costs -- run on the cluster's workers in
batches of documents; each worker process loads the model once and keeps it. The writer stays
here, on the client: results are taken in the order of the documents (not as they finish) and
streamed through the same pipeline as a local build (``build.build_from``, with the workers'
chunks and vectors handed in through its reuse hook), so the pack holds what a one-process
build of the same sources holds. At most ``2 x workers`` batches are in flight, which bounds
the client's memory.

Failures: Dask reschedules the tasks of a worker that dies. With the scheduler's
``distributed.scheduler.allowed-failures`` at 1 (set here for a local cluster; set it on a
remote scheduler), a task that kills a second worker fails with ``KilledWorker``; its batch is
then sent again one document per task, and a document whose task kills workers twice is
recorded as a failed document (stage ``crash``), never retried forever.

Paths are sent as they are: the workers must see the sources and the model at the same paths
(one machine, or a shared file system).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from kbpack.errors import UsageError
from kbpack.extract import Candidate, Limits, discover, extract_all
from kbpack.extract.common import blank_document, failed
from kbpack.index.chunk import ChunkConfig, chunk_document, embedded_text, header, section_path
from kbpack.index.pieces import piece_texts, pieces_of
from kbpack.ops.build import BuildOptions, BuildReport, build_from
from kbpack.ops.shards import in_shard
from kbpack.runtime.progress import Progress
from kbpack.text.document import Document

BATCH_DOCS = 8  # documents per task: enough chunks to batch embedding, small enough to retry
ALLOWED_FAILURES = 1  # a task may kill one worker and be retried; the second death fails it
# How often a wait for a result looks at the workers. A nanny does not restart a worker that
# dies while it is starting (distributed's Nanny: an exit seen before it reports "running" is
# not restarted), which a document that kills workers makes likely on a loaded machine; a
# local cluster left with fewer workers than asked for is scaled back up instead of waited on
# forever.
WORKER_CHECK_S = 5.0

# Test hooks (tests/ops/test_cluster.py): a worker processing a document of these names exits at
# once, as a segfault or the OOM killer would end it. ``..._ONCE`` kills only the first time
# (a marker file in KBPACK_TEST_KILL_MARKERS remembers), ``..._ALWAYS`` every time.
_KILL_ONCE = "KBPACK_TEST_KILL_ONCE"
_KILL_ALWAYS = "KBPACK_TEST_KILL_ALWAYS"
_KILL_MARKERS = "KBPACK_TEST_KILL_MARKERS"

_EMBEDDERS: dict[tuple[str, int], Any] = {}  # in each worker process: model loaded once


@dataclass
class Processed:
    """What a worker returns for one document."""

    doc: Document
    chunks: list[Any]
    vectors: np.ndarray | None
    problems: list[str]
    tokens: int  # model tokens embedded (header and content, specials included)
    header_tokens: int
    # --pieces: each piece's embedded text -> its vector (the client cuts the same pieces and
    # takes their vectors from here through build_from's known_vectors hook)
    piece_vectors: dict[str, np.ndarray] = field(default_factory=dict)


def _embedder(
    model: str | None, threads: int, query_prefix: str | None, doc_prefix: str | None
) -> Any:
    """This worker's model (loaded at its first task), with the build's prefixes."""
    from kbpack.model.embedder import Embedder, default_model_path
    from kbpack.model.prefixes import override

    path = model or str(default_model_path())
    key = (path, threads)
    if key not in _EMBEDDERS:
        _EMBEDDERS[key] = Embedder(Path(path), threads=threads)
    embedder = _EMBEDDERS[key]
    embedder.prefixes = override(embedder.prefixes, query_prefix, doc_prefix)
    return embedder


def _maybe_die(name: str) -> None:
    if name in os.environ.get(_KILL_ALWAYS, "").split(","):
        os._exit(70)
    if name in os.environ.get(_KILL_ONCE, "").split(","):
        marker = Path(os.environ[_KILL_MARKERS]) / f"killed-{abs(hash(name))}"
        if not marker.exists():
            marker.touch()
            os._exit(70)


def process_batch(
    batch: Sequence[Candidate],
    model: str | None,
    vectors: bool,
    threads: int,
    limits: Limits,
    max_chars: int | None,
    overlap: int,
    prefixes: tuple[str | None, str | None] = (None, None),
    pieces: bool = False,
) -> list[Processed]:
    """Run on a worker: extract (in kbpack's time-limited child process), chunk and embed, as
    ``build.build_from`` does (the document prefix counts against the window)."""
    for candidate in batch:
        _maybe_die(candidate.name)
    embedder = _embedder(model, threads, *prefixes) if vectors else None
    count = embedder.count_document_tokens if embedder else None
    config = ChunkConfig(
        window=embedder.window if embedder else None,
        max_chars=max_chars if (max_chars or embedder) else 1500,
        overlap=overlap,
    )
    specials = count("") if count else 0
    out: list[Processed] = []
    texts: list[str] = []
    extra: list[tuple[Processed, list[str]]] = []  # piece texts of each document
    for doc in extract_all(list(batch), limits):
        chunks: list[Any] = []
        problems: list[str] = []
        tokens = header_tokens = 0
        if doc.status == "ok":
            result = chunk_document(doc, count, config)
            chunks, problems = result.chunks, list(result.problems)
            for c in chunks:
                h = header(doc.title, section_path(doc, c.section))
                texts.append(embedded_text(h, doc.text[c.start : c.end]))
                if count:
                    header_tokens += count(h) - specials
                    tokens += c.tokens
        out.append(Processed(doc, chunks, None, problems, tokens, header_tokens))
        if pieces and embedder is not None and chunks:
            heads = [header(doc.title, section_path(doc, c.section)) for c in chunks]
            cut = pieces_of(doc.text, [(c.start, c.end) for c in chunks])
            extra.append((out[-1], piece_texts(doc.text, heads, cut)))
    if embedder is not None:
        more = [t for _, ts in extra for t in ts]
        if more:
            piece_block = np.asarray(embedder.embed_documents(more), dtype=np.float32)
            at = 0
            for p, ts in extra:
                p.piece_vectors = dict(zip(ts, piece_block[at : at + len(ts)], strict=True))
                at += len(ts)
        block = np.asarray(embedder.embed_documents(texts), dtype=np.float32) if texts else None
        at = 0
        for p in out:
            n = len(p.chunks)
            p.vectors = (
                block[at : at + n]
                if block is not None
                else np.zeros((0, embedder.dims), np.float32)
            )
            at += n
    return out


class _Results:
    """Documents in discovery order, fetched from the cluster, with their chunks and vectors."""

    def __init__(
        self,
        client: Any,
        batches: list[list[Candidate]],
        opts: BuildOptions,
        workers: int,
        local: Any | None = None,
    ):
        self.client = client
        self.local = local  # the LocalCluster to scale back up, None for a remote scheduler
        self.workers = workers
        self.batches = batches
        self.opts = opts
        self.window = max(2, 2 * workers)
        self.by_name: dict[str, Processed] = {}
        self.problems: list[dict[str, str]] = []
        self.tokens = 0
        self.header_tokens = 0
        self.embedded = 0
        self.crashed: list[str] = []
        self.piece_vectors: dict[str, np.ndarray] = {}  # embedded text -> vector, until used
        self.fetched: dict[str, tuple[bool, Any]] = {}  # settled results, by task key

    def _submit(self, batch: list[Candidate]) -> Any:
        o = self.opts
        return self.client.submit(
            process_batch,
            batch,
            None if o.model is None else str(o.model),
            o.vectors,
            o.threads or 1,
            o.limits,
            o.max_chars,
            o.overlap,
            (o.query_prefix, o.doc_prefix),
            bool(o.pieces),
            pure=False,
        )

    def _gather(
        self, future: Any, batch: list[Candidate], others: Sequence[Any] = (), alone: bool = False
    ) -> list[Processed]:
        """The batch's results. A batch whose task failed with KilledWorker is sent again one
        document per task, one task at a time (``alone``), once every other task in flight
        (``others``) has settled: the scheduler also blames the tasks running on a worker that
        dies, so only a document that kills workers on its own is recorded as failed."""
        from distributed import KilledWorker

        try:
            return list(self._result(future))
        except KilledWorker:
            if not alone:
                # A batch still in flight may hold the document that killed the workers; run
                # beside it, an innocent document could be blamed twice (seen under load).
                self._settle(others)
                out: list[Processed] = []
                for c in batch:
                    out.extend(self._gather(self._submit([c]), [c], alone=True))
                return out
            c = batch[0]
            self.crashed.append(c.name)
            doc = failed(
                blank_document(c.path, c.name, c.kind),
                f"killed {ALLOWED_FAILURES + 1} cluster workers while being processed",
                "crash",
            )
            return [Processed(doc, [], None, [], 0, 0)]

    def _result(self, future: Any) -> Any:
        """``future.result()``, with a local cluster that lost workers for good scaled back to
        its size (see WORKER_CHECK_S); a remote cluster is waited on, as its operator decides."""
        if future.key in self.fetched:
            ok, value = self.fetched.pop(future.key)
            if not ok:
                raise value
            return value
        while True:
            try:
                return future.result(timeout=WORKER_CHECK_S)
            except TimeoutError:
                self._keep_workers()

    def _settle(self, futures: Sequence[Any]) -> None:
        """Wait until every one of ``futures`` has finished or failed (as ``_result`` waits),
        then bring their results here and release them from the cluster: a result left on a
        worker is recomputed when that worker dies, and Dask blames the recomputation too."""
        from distributed import wait

        while futures:
            try:
                wait(list(futures), timeout=WORKER_CHECK_S)
                break
            except TimeoutError:
                self._keep_workers()
        for f in futures:
            try:
                self.fetched[f.key] = (True, f.result())
            except Exception as e:  # re-raised in order, when the caller reaches this batch
                self.fetched[f.key] = (False, e)
            f.release()

    def _keep_workers(self) -> None:
        live = len(self.client.scheduler_info().get("workers", {}))
        if self.local is not None and live < self.workers:
            self.local.scale(self.workers)  # new nannies for the ones that gave up

    def documents(self, records: Sequence[Document]) -> Iterator[Document]:
        yield from records
        pending: deque[tuple[Any, list[Candidate]]] = deque()
        todo = deque(self.batches)
        while todo or pending:
            while todo and len(pending) < self.window:
                b = todo.popleft()
                pending.append((self._submit(b), b))
            future, batch = pending.popleft()
            for p in self._gather(future, batch, [f for f, _ in pending]):
                self.by_name[p.doc.name] = p
                self.piece_vectors.update(p.piece_vectors)
                self.problems.extend({"name": p.doc.name, "problem": x} for x in p.problems)
                self.tokens += p.tokens
                self.header_tokens += p.header_tokens
                self.embedded += len(p.chunks) if p.vectors is not None else 0
                yield p.doc

    def known(self, text: str) -> np.ndarray | None:
        """A piece's vector the workers computed (each is taken once)."""
        return self.piece_vectors.pop(text, None)

    def reuse(self, doc: Document) -> tuple[list[Any], np.ndarray | None] | None:
        p = self.by_name.pop(doc.name, None)
        return None if p is None else (p.chunks, p.vectors)


def cluster_build(
    opts: BuildOptions,
    workers: int | None = None,
    scheduler: str | None = None,
    progress: Progress | None = None,
) -> BuildReport:
    """Build ``opts`` with a Dask cluster: a local one of ``workers`` processes, or the
    scheduler at ``scheduler``."""
    try:
        import dask
        from distributed import Client, LocalCluster
    except ImportError as e:
        raise UsageError(
            "--workers/--scheduler need Dask: pip install 'distributed' (or kbpack[cluster])"
        ) from e
    if (workers is None) == (scheduler is None):
        raise UsageError("give either --workers N or --scheduler ADDRESS")
    found = discover(opts.sources, opts.include, opts.exclude, opts.follow_symlinks)
    if opts.shard is not None:
        found.candidates = [c for c in found.candidates if in_shard(c.name, opts.shard)]
        found.records = [d for d in found.records if in_shard(d.name, opts.shard)]
    batches = [
        found.candidates[i : i + BATCH_DOCS] for i in range(0, len(found.candidates), BATCH_DOCS)
    ]
    with dask.config.set({"distributed.scheduler.allowed-failures": ALLOWED_FAILURES}):
        cluster = (
            LocalCluster(
                n_workers=workers,
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
                silence_logs=50,
            )
            if workers is not None
            else None
        )
        try:
            with Client(cluster if cluster is not None else scheduler) as client:
                n = workers or max(1, len(client.scheduler_info().get("workers", {})))
                results = _Results(client, batches, opts, n, cluster)
                # the client embeds nothing: one thread for the model build_from loads to
                # stamp the pack's identity and count tokens
                report = build_from(
                    results.documents(found.records),
                    len(found.candidates) + len(found.records),
                    replace(opts, threads=1),
                    progress,
                    reuse=results.reuse,
                    known_vectors=results.known if opts.pieces else None,
                    found=found,
                )
        finally:
            if cluster is not None:
                cluster.close()
    report.problems.extend(results.problems)
    report.tokens_embedded = results.tokens
    report.header_tokens = results.header_tokens
    report.reused_documents = 0
    report.vectors_embedded = results.embedded
    return report


__all__ = ["cluster_build", "process_batch"]
