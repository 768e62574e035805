"""The build pipeline: extract -> chunk -> embed -> index -> atomic pack write.

Documents stream through: extraction runs in a worker process one document at a time, chunks
are embedded in batches across documents (throughput), and only one batch of vectors plus the
growing BM25 postings are held in memory. Counts in the report are read back from what the
writer committed, never from what was attempted.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kbpack.errors import KbpackError
from kbpack.extract import Limits, discover, extract_all
from kbpack.extract.common import is_unsupported
from kbpack.extract.discover import Discovery
from kbpack.extract.repeated import RepeatedBlocks
from kbpack.index.chunk import ChunkConfig, chunk_document, embedded_text, header, section_path
from kbpack.index.pieces import Piece, piece_texts, pieces_of
from kbpack.index.postings import PostingsBuilder
from kbpack.ops.estimate import DryRun
from kbpack.ops.shards import in_shard
from kbpack.ops.written import WrittenPack, written
from kbpack.pack.write import PackWriter
from kbpack.runtime import interrupt
from kbpack.runtime.progress import Progress, file_kind, peak_rss_mb
from kbpack.text.document import Document

EMBED_BATCH = 64  # chunks per embedding call: large enough to batch, small enough to stream


@dataclass
class BuildOptions:
    sources: Sequence[Path]
    out: Path
    model: Path | None = None  # None: the default model
    vectors: bool = True  # False: a BM25-only pack (--no-vectors)
    embed_model: bool = False  # store the GGUF inside the pack
    include: Sequence[str] = ()
    exclude: Sequence[str] = ()
    follow_symlinks: bool = False  # read folders outside the tree that links point to
    keep_repeated: bool = False  # True: no folder banner pass (kbpack/extract/repeated.py)
    allow_empty: bool = False  # False: a build that yields no document fails (EmptyBuildError)
    limits: Limits = field(default_factory=Limits)
    max_chars: int | None = None
    overlap: int = 0
    threads: int | None = None
    # llama.cpp contexts sharing ``threads`` (kbpack.model.embedder.Embedder); None: one per
    # thread, the fastest; 1: a single context running all the threads (kbpack 0.2)
    contexts: int | None = None
    shard: tuple[int, int] | None = None  # (I, N): only the documents of shard I of N
    # None: the model family's default (kbpack/model/prefixes.py); "" turns a default off.
    query_prefix: str | None = None
    doc_prefix: str | None = None
    # also embed sentence pieces of each chunk (kbpack/index/pieces.py); None: update keeps the old
    # pack's choice
    pieces: bool | None = False
    # BM25 terms rule recorded in the pack (kbpack.search.bm25.ANALYZERS); None: plain for a
    # build, the old pack's for update
    analyzer: str | None = None
    # bytes the embedding cache may hold (kbpack/model/embed_cache.py); None: its default,
    # 0: no cache (nothing read, nothing kept)
    embed_cache_max: int | None = None
    # the approximate index /ivf (kbpack/pack/ivf.py): True, False, or None: from
    # ivf.MIN_CHUNKS chunks for a build, the old pack's choice for update; its lists (None:
    # about 2 sqrt(chunks))
    ivf: bool | None = None
    ivf_lists: int | None = None


@dataclass
class BuildReport(WrittenPack):
    failed: list[dict[str, str]]
    skipped: list[dict[str, str]]
    warnings: list[dict[str, str]]
    problems: list[dict[str, str]]  # chunking reports: text that could not fit the window
    seconds: dict[str, float]
    tokens_embedded: int
    header_tokens: int
    truncated: int
    model: dict[str, Any] | None
    peak_rss_mb: float
    peak_rss_workers_mb: float  # the largest worker process (extraction), apart from kbpack's
    reused_documents: int = 0
    vectors_embedded: int = 0  # chunks that went through the model (the rest were reused)
    pieces_embedded: int = 0  # pieces that went through the model (the rest were reused)
    filtered: int = 0  # files left out by --include/--exclude (not documents)
    links_not_followed: int = 0  # symlinks outside the input, skipped (no --follow-symlinks)
    links_followed: int = 0  # files outside the input read through a symlink
    # blocks dropped as repeated across a folder's documents (kbpack/extract/repeated.py)
    repeated_blocks: int = 0
    # texts sent to the model's embedding calls, and those of them whose vectors came from the
    # embedding cache (an earlier or interrupted build of the same texts) instead
    embeddings_total: int = 0
    embeddings_reused: int = 0
    # build --dry-run (kbpack/ops/estimate.py): the sample measured and the estimates; the
    # rest of the report describes the pack that was written to a temporary file and removed
    dry_run: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        d = super().as_dict()
        d["header_token_share"] = self.header_share
        d["unsupported"] = self.unsupported
        d["outside_input"] = self.links_not_followed  # the name the summary line uses
        return d

    @property
    def unsupported(self) -> int:
        """Skipped documents of a type kbpack does not read (by extension): never tried."""
        return sum(is_unsupported(s["reason"]) for s in self.skipped)

    def strict_failures(self) -> int:
        """What ``--strict`` fails on: failed documents and skipped ones other than unsupported
        types (a symlink loop, a folder not followed, a path that is not a regular file). A
        documentation folder's _static/*.js and *.png are not documents kbpack could not read."""
        return len(self.failed) + len(self.skipped) - self.unsupported

    @property
    def header_share(self) -> float:
        return self.header_tokens / self.tokens_embedded if self.tokens_embedded else 0.0


class _Timer:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def add(self, stage: str, since: float) -> float:
        now = time.perf_counter()
        self.seconds[stage] = self.seconds.get(stage, 0.0) + now - since
        return now


# A reuse hook: given a document about to be chunked, return its chunks and vectors from an
# earlier pack (update, migrate) or None to chunk and embed it afresh.
Reuse = Callable[[Document], "tuple[list[Any], np.ndarray | None] | None"]
# A vector cache: embedded text -> the vector the same model computed for it earlier, or None.
KnownVectors = Callable[[str], "np.ndarray | None"]


def build(
    opts: BuildOptions, progress: Progress | None = None, dry: DryRun | None = None
) -> BuildReport:
    """Discover and extract the sources, then build the pack (``dry``: see build_from)."""
    found = discover(opts.sources, opts.include, opts.exclude, opts.follow_symlinks)
    if opts.shard is not None:
        found.candidates = [c for c in found.candidates if in_shard(c.name, opts.shard)]
        found.records = [d for d in found.records if in_shard(d.name, opts.shard)]
    # a folder's banners and footers go before chunking (kbpack/extract/repeated.py)
    repeated = RepeatedBlocks()
    extracted = _told(progress, extract_all(found.candidates, opts.limits))
    documents = _with_skipped(found.records, extracted)
    if not opts.keep_repeated:
        documents = repeated(documents)
    total = len(found.candidates) + len(found.records)
    if progress is not None:  # the ETA's denominator
        for c in found.candidates:
            kind = file_kind(c.name)
            size = _size(c.path)
            progress.source_bytes_total += size
            progress.source_bytes_by_kind[kind] = progress.source_bytes_by_kind.get(kind, 0) + size
    report = build_from(documents, total, opts, progress, found=found, dry=dry)
    report.repeated_blocks = repeated.removed
    return report


class EmptyBuildError(KbpackError):
    """The build yielded no document to search (and ``allow_empty`` was not given)."""


def _refuse_empty(
    opts: BuildOptions,
    failed: list[dict[str, str]],
    skipped: list[dict[str, str]],
    found: Discovery | None,
) -> None:
    where = ", ".join(str(s) for s in opts.sources) or "the sources"
    parts = [f"{len(failed)} failed", f"{len(skipped)} skipped"]
    if found is not None and found.filtered:
        parts.append(f"{found.filtered} left out by --include/--exclude")
    first = next(iter(failed or skipped), None)
    why = f"; first: {first['name']}: {first['reason']}" if first else ""
    hint = ""
    if found is not None and found.links_not_followed and "--follow-symlinks" not in why:
        hint = (
            f" ({found.links_not_followed} symlinks outside the input not followed: pass "
            "--follow-symlinks)"
        )
    raise EmptyBuildError(
        f"{where}: no documents to pack ({', '.join(parts)}){why}{hint}; fix the sources or "
        "pass --allow-empty to write an empty pack"
    )


def build_from(
    documents: Iterator[Document],
    total: int,
    opts: BuildOptions,
    progress: Progress | None = None,
    reuse: Reuse | None = None,
    known_vectors: KnownVectors | None = None,
    found: Discovery | None = None,
    dry: DryRun | None = None,
) -> BuildReport:
    """Chunk, embed, index and write ``documents`` (in order) to ``opts.out``.

    ``opts.sources`` and the extraction options are not used here. ``reuse`` lets a caller
    supply the chunks and vectors of documents it already has (same model, same pipeline); it
    may return vectors None to have the given chunks embedded. ``known_vectors`` maps an
    embedded text to the vector this very model gave it before (or None): those are not
    embedded again. ``found`` is what discovery counted, for the report and the refusal of an
    empty build (EmptyBuildError unless ``opts.allow_empty``; the output is then untouched).
    ``dry`` makes it a dry run (kbpack/ops/estimate.py): nothing is embedded, ``dry`` records
    what would be, then measures the model on a sample of it.
    """
    progress = progress or Progress(enabled=False)
    timer = _Timer()
    t = time.perf_counter()
    embedder = None
    if opts.vectors:
        from kbpack.model.embedder import Embedder
        from kbpack.model.prefixes import override

        embedder = Embedder(opts.model, threads=opts.threads, contexts=opts.contexts)
        embedder.prefixes = override(embedder.prefixes, opts.query_prefix, opts.doc_prefix)
    cache = _open_cache(embedder, opts.embed_cache_max, readonly=dry is not None)
    t = timer.add("load", t)

    window = embedder.window if embedder else None
    max_chars = opts.max_chars if (opts.max_chars or embedder) else 1500
    config = ChunkConfig(window=window, max_chars=max_chars, overlap=opts.overlap)
    # The document prefix is part of every embedded text: it counts against the window.
    count = embedder.count_document_tokens if embedder else None
    specials = count("") if count else 0
    header_cost: dict[str, int] = {}

    postings = PostingsBuilder(opts.analyzer, headers=True)
    failed: list[dict[str, str]] = []
    skipped: list[dict[str, str]] = []
    warnings: list[dict[str, str]] = []
    problems: list[dict[str, str]] = []
    tokens_embedded = 0
    header_tokens = 0
    # Documents waiting for the next embedding batch.
    pending: list[_Pending] = []
    n_docs = 0
    n_reused = 0
    n_embedded = 0  # chunk texts embedded (not from known_vectors; the cache's hits included)
    n_pieces_embedded = 0  # the same for piece texts
    n_sent = 0  # texts given to the model's embedding calls (the cache's hits included)

    identity = embedder.stamp if embedder else None
    gguf = embedder.path if (embedder and opts.embed_model) else None
    chunking = {"window": config.window, "max_chars": config.max_chars, "overlap": config.overlap}
    with_pieces = bool(opts.pieces) and embedder is not None
    try:
        with PackWriter(
            opts.out,
            model=identity,
            dims=embedder.dims if embedder else None,
            gguf=gguf,
            chunking=chunking,
            manifest_extra=(
                {"shard": {"index": opts.shard[0], "count": opts.shard[1]}} if opts.shard else None
            ),
            pieces=with_pieces,
            ivf=opts.ivf,
            ivf_lists=opts.ivf_lists,
        ) as writer:

            def flush() -> None:
                nonlocal t, n_embedded, n_pieces_embedded, n_sent, tokens_embedded, header_tokens
                # one model call for the batch: chunk texts, then piece texts
                texts = [s for p in pending for s in p.embedded] + [
                    s for p in pending for s in p.piece_texts
                ]
                fresh = np.zeros((0, embedder.dims if embedder else 0), np.float32)
                if embedder and texts:
                    fresh, done, sent = _embed(embedder, texts, known_vectors, progress, cache, dry)
                    n_sent += sent
                    n_chunk_texts = sum(len(p.embedded) for p in pending)
                    n_embedded += sum(1 for i in done if i < n_chunk_texts)
                    n_pieces_embedded += sum(1 for i in done if i >= n_chunk_texts)
                    # tokens of the chunk texts the model read: a text whose vector the old pack
                    # had (update) costs nothing, so the summary's counts agree
                    costs = [c for p in pending for c in p.costs]
                    tokens_embedded += sum(costs[i][0] for i in done if i < n_chunk_texts)
                    header_tokens += sum(costs[i][1] for i in done if i < n_chunk_texts)
                t = timer.add("embed", t)
                at = 0
                for p in pending:
                    if p.given is None and embedder:
                        p.given = fresh[at : at + len(p.embedded)]
                        at += len(p.embedded)
                for p in pending:
                    piece_vectors = None
                    if with_pieces:
                        piece_vectors = fresh[at : at + len(p.piece_texts)]
                        at += len(p.piece_texts)
                    first = writer.n_chunks
                    writer.add_document(p.doc, p.chunks, p.given, p.pieces, piece_vectors)
                    for i, c in enumerate(p.chunks):
                        postings.add_chunk(first + i, p.doc, c)
                pending.clear()
                t = timer.add("index", t)

            for doc in documents:
                interrupt.check()  # stop at the next document even if a Ctrl-C was swallowed
                t = timer.add("extract", t)
                n_docs += 1
                progress.building(
                    n_docs, total, doc.source_size or 0, writer.n_chunks, len(doc.text or "")
                )
                if doc.status == "skipped":
                    skipped.append({"name": doc.name, "reason": doc.reason})
                if doc.status == "failed":
                    failed.append({"name": doc.name, "stage": doc.stage, "reason": doc.reason})
                warnings.extend({"name": doc.name, "warning": w} for w in doc.warnings)
                chunks: list[Any] = []
                embedded: list[str] = []
                costs: list[tuple[int, int]] = []
                given: np.ndarray | None = None
                reused = reuse(doc) if (reuse and doc.status == "ok") else None
                if reused is not None:
                    chunks, given = reused
                    if given is not None or embedder is None:  # else: only re-embedded
                        n_reused += 1
                elif doc.status == "ok":
                    result = chunk_document(doc, count, config)
                    chunks = result.chunks
                    problems.extend({"name": doc.name, "problem": p} for p in result.problems)
                if given is None:
                    for c in chunks:
                        h = header(doc.title, section_path(doc, c.section))
                        embedded.append(embedded_text(h, doc.text[c.start : c.end]))
                        if count and h not in header_cost:
                            header_cost[h] = count(h) - specials
                        costs.append((c.tokens, header_cost.get(h, 0)))
                item = _Pending(doc, chunks, embedded, given, costs=costs)
                if with_pieces and chunks:
                    heads = [header(doc.title, section_path(doc, c.section)) for c in chunks]
                    item.pieces = pieces_of(doc.text, [(c.start, c.end) for c in chunks])
                    item.piece_texts = piece_texts(doc.text, heads, item.pieces)
                t = timer.add("chunk", t)
                pending.append(item)
                waiting = sum(len(p.embedded) + len(p.piece_texts) for p in pending)
                if waiting >= EMBED_BATCH or len(pending) >= EMBED_BATCH:
                    flush()
                    progress.building(n_docs, total, 0, writer.n_chunks)
            flush()
            progress.done()
            if n_docs == len(failed) + len(skipped) and not opts.allow_empty:
                _refuse_empty(opts, failed, skipped, found)  # the writer aborts: nothing replaced
            writer.set_postings(postings.finish(writer.n_chunks))
            t = timer.add("index", t)
            committed = writer.commit()
            timer.add("write", t)

    except KeyboardInterrupt:
        progress.interrupted()  # the interrupt's message goes below the line, not on it
        raise
    finally:
        if cache is not None:
            cache.close()  # what was embedded stays for the next build
        from_cache = cache.hits if cache is not None else 0

    if dry is not None and embedder is not None:
        dry.measure(embedder)
    return BuildReport(
        *written(committed),
        failed=failed,
        skipped=skipped,
        warnings=warnings,
        problems=problems,
        seconds={k: round(v, 3) for k, v in timer.seconds.items()},
        tokens_embedded=tokens_embedded,
        header_tokens=header_tokens,
        truncated=embedder.truncated if embedder else 0,
        model=identity,
        peak_rss_mb=peak_rss_mb()[0],
        peak_rss_workers_mb=peak_rss_mb()[1],
        reused_documents=n_reused,
        vectors_embedded=n_embedded,
        pieces_embedded=n_pieces_embedded,
        filtered=found.filtered if found else 0,
        links_not_followed=found.links_not_followed if found else 0,
        links_followed=found.links_followed if found else 0,
        embeddings_total=n_sent,
        embeddings_reused=from_cache,
        dry_run=None if dry is None else dry.summary(sum(timer.seconds.values())),
    )


@dataclass
class _Pending:
    """A document waiting for the next embedding batch: its chunks, the texts to embed for them
    (or ``given``: vectors a reuse hook supplied), and its pieces with their texts."""

    doc: Document
    chunks: list[Any]
    embedded: list[str]
    given: np.ndarray | None
    pieces: list[Piece] = field(default_factory=list)
    piece_texts: list[str] = field(default_factory=list)
    costs: list[tuple[int, int]] = field(default_factory=list)  # (tokens, header tokens) per text


def _open_cache(embedder: Any, max_bytes: int | None, readonly: bool = False) -> Any:
    """The embedding cache of ``embedder``'s model, or None (no vectors, or turned off)."""
    if embedder is None or max_bytes == 0:
        return None
    from kbpack.model.embed_cache import DEFAULT_MAX_BYTES, EmbeddingCache

    return EmbeddingCache(
        embedder.identity.sha256,
        embedder.dims,
        DEFAULT_MAX_BYTES if max_bytes is None else max_bytes,
        readonly=readonly,
    )


def _embed(
    embedder: Any,
    texts: list[str],
    known: KnownVectors | None,
    progress: Progress,
    cache: Any = None,
    dry: DryRun | None = None,
) -> tuple[np.ndarray, list[int], int]:
    """Vectors of ``texts`` -- those ``known`` already has, the rest embedded in one call (the
    embedding cache may hold some of those: ``cache.hits`` counts them) -- the indices of the
    texts embedded, and how many they are. ``progress`` hears of the call first, with every
    token it holds (chunk and piece texts alike: the ETA's unit), then of each decode batch
    as it is done. ``dry``: record instead of embedding (build --dry-run)."""
    out = np.zeros((len(texts), embedder.dims), np.float32)
    missing = []
    for i, text in enumerate(texts):
        v = known(text) if known is not None else None
        if v is None:
            missing.append(i)
        else:
            out[i] = v
    if not missing:
        return out, missing, 0
    tokens = embedder.prepare(embedder.document_texts([texts[i] for i in missing]))
    progress.embedding(len(missing), sum(map(len, tokens)))
    if dry is not None:
        out[missing] = dry.vectors(embedder, tokens, cache)
        progress.embedded(len(missing), sum(map(len, tokens)), reused=True)  # no model time
        return out, missing, len(missing)

    def on_batch(batch: Sequence[int], n_tokens: int, reused: bool) -> None:
        progress.embedded(len(batch), n_tokens, reused)
        interrupt.check()  # a swallowed Ctrl-C stops within one batch

    out[missing] = embedder.embed_tokens(tokens, cache, on_batch)
    return out, missing, len(missing)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _told(progress: Progress | None, documents: Iterator[Document]) -> Iterator[Document]:
    """``documents``, each told to ``progress`` as it leaves the extractor: a build holds a
    folder's documents back until all are read (kbpack/extract/repeated.py), and the ETA
    extrapolates from their text (kbpack/runtime/progress.py)."""
    for doc in documents:
        if progress is not None:
            progress.extracted(doc.name, doc.source_size or 0, len(doc.text or ""))
        yield doc


def _with_skipped(skipped: list[Document], extracted: Any) -> Any:
    yield from skipped
    yield from extracted
