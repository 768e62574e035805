"""The packs a server serves, opened once: readers, searchers, one embedder per model, and the
batches that let concurrent requests share the work.

Concurrent searches of one searcher (a pack, or every pack as one) share their dense stage in
batches (``Batches``): each request runs its own steps in its own thread (``Searcher.begin``:
BM25 and the gates; its query embedded alone; ``Searcher.end``: ranking, refusal, citations)
and queues for the one step they share, the pass over the vectors (``Searcher.add_dense``):
whatever is queued while a batch runs becomes the next batch, one pass for all (a bfloat16
copy of the vectors where ``vector_memory_mb`` allows, ``Bf16Rows``, else the stored float16
rows). Either way each request's answer is the one it gets alone, bit for bit, and the one
``kbpack query`` gives (tests/search/test_search_batch.py). No lock is held around a search: a
``Searcher`` keeps no per-query state, its lazy reads are guarded where they are made (or are
idempotent), the embedder gives each concurrent call a llama.cpp context of its own (one per
core, ``kbpack.model.embedder``; a context is not thread-safe), and h5py serialises its own
calls.
"""

from __future__ import annotations

import contextlib
import fnmatch
import glob
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kbpack.errors import KbpackError, PackError, UsageError, describe
from kbpack.model.embedder import available_threads
from kbpack.pack import format as F
from kbpack.pack.checks import FileState, held_path
from kbpack.pack.read import PackReader
from kbpack.pack.sign import SignaturePolicy
from kbpack.search.assemble import SerialEmbedder as SerialEmbedder
from kbpack.search.assemble import assemble
from kbpack.search.citing import Query
from kbpack.search.searcher import MODES, Searcher, SearchRequest, SearchResponse
from kbpack.search.vectors import CopyBudget, PackVectors
from kbpack.text.document import Page

MAX_QUERY_CHARS = 1000
MAX_K = 50
# bfloat16 copies of the vectors that batches scan (``Bf16Rows``): at most this much for all the
# packs served (kbpack serve --vector-memory): 2 bytes a number, 296 MiB for a 100k-chunk pack
# with its 304k pieces, whose batches it makes ~1.8x faster (bench/RESULTS.md "Serve in batches")
VECTOR_MEMORY_MB = 1024


# How many requests run their own steps (``Searcher.begin`` / ``end``, mostly Python, under the
# GIL) at once, in all: one per core. 32 clients' threads all running them took turns with the
# GIL every 5 ms and finished together late: HTTP p99 3.5 s against 1.3 s with this gate, for the
# same requests per second (bench/RESULTS.md "Serve in batches").
_STEPS = threading.BoundedSemaphore(available_threads())


class Batches:
    """Runs the dense stage of a searcher's concurrent requests in batches, without a fixed
    wait: the first request starts a worker thread; every request queued while a batch runs
    joins the next one; the worker ends when the queue is empty. The rest of each request
    (its BM25 list and gates before, its ranking, refusal and citations after:
    ``Searcher.begin`` / ``end``) runs in the request's own thread, beside the batches. A
    batch that fails is run again request by request, so that one bad request fails alone.
    ``embed_together``: the batch's queries in one embedder call (faster; not bit for bit with
    a lone query, see ``search_many``)."""

    def __init__(self, searcher: Searcher, embed_together: bool = False) -> None:
        self.searcher = searcher
        self.embed_together = embed_together
        self._queue: list[tuple[Query, np.ndarray | None, Future[None]]] = []
        self._lock = threading.Lock()
        self._working = False
        self.batches = 0  # batches run, and the requests in them (tests, bench/serve_load.py)
        self.requests = 0

    def search(self, request: SearchRequest) -> SearchResponse:
        searcher = self.searcher
        with _STEPS:
            q = searcher.begin(request)
        if q.dense_wanted and searcher.embedder is not None:
            # the query is embedded here, in the caller's thread, alone (the vector a lone
            # search embeds), while the batch before it runs: the model and the scan of the
            # vectors overlap instead of one waiting for the other
            vector = None if self.embed_together else searcher.query_vector(request.query)
            done: Future[None] = Future()
            with self._lock:
                self._queue.append((q, vector, done))
                start = not self._working
                self._working = True
            if start:
                threading.Thread(target=self._work, daemon=True, name="kbpack-search").start()
            done.result()
        with _STEPS:
            return searcher.end(request, q)

    def _work(self) -> None:
        while True:
            with self._lock:
                batch, self._queue = self._queue, []
                if not batch:
                    self._working = False
                    return
            self.batches += 1
            self.requests += len(batch)
            queries = [q for q, _, _ in batch]
            given = [v for _, v, _ in batch]
            vectors = None if any(v is None for v in given) else np.stack(given)  # type: ignore[arg-type]
            try:
                self.searcher.add_dense(queries, vectors, embed_together=self.embed_together)
            except BaseException:
                pass
            else:
                for _, _, done in batch:
                    done.set_result(None)
                continue
            for j, (q, _, done) in enumerate(batch):
                try:
                    one = None if vectors is None else vectors[j : j + 1]
                    self.searcher.add_dense([q], one)
                    done.set_result(None)
                except BaseException as e:
                    done.set_exception(e)


@dataclass
class Section:
    row: int
    level: int
    title: str
    start: int
    end: int
    parent: int


@dataclass
class Document:
    """One document of a pack, as the reader page and ``/api/doc`` show it."""

    pack: str
    name: str
    title: str
    kind: str
    text: str
    sections: list[Section]
    pages: list[Page]
    # links to documents of the pack (spec §3.12): (from, to, target name, target offset)
    links: list[tuple[int, int, str, int]] = field(default_factory=list)

    def section_at(self, offset: int) -> list[Section]:
        """The sections containing ``offset``, outermost first (the breadcrumb)."""
        inside = [s for s in self.sections if s.start <= offset < s.end or s.start == offset]
        return sorted(inside, key=lambda s: (s.level, s.start))

    def page_at(self, offset: int) -> Page | None:
        for p in self.pages:
            if p.start <= offset < p.end:
                return p
        return None


@dataclass
class Served:
    """One open pack: the file checked at start (or at its last change) is the file served."""

    name: str
    path: Path
    reader: PackReader
    searcher: Searcher
    status: dict[str, Any]  # the check run on this very file (``check_held``)
    lock: threading.Lock = field(default_factory=threading.Lock)  # held while swapping files
    pending: FileState | None = None  # a new file at the path: being checked, or refused
    change_note: str | None = None  # why the new file at the path is not served (yet)
    batches: Batches = field(init=False)  # this searcher's concurrent requests, batched

    def __post_init__(self) -> None:
        self.batches = Batches(self.searcher)

    @property
    def verify(self) -> dict[str, Any]:
        """What was checked on the served file: the labels are made from this alone."""
        checks = self.reader.checks
        return {**self.status, "level": checks.level, "checks": checks.as_dict()}

    @property
    def change(self) -> str | None:
        """Why the file at the path is not the one served (being checked, or refused)."""
        change = self.change_note
        if change is None and self.pending is not None:
            change = f"{self.path} changed on disk: the new file is being checked; until it "
            change += "passes, the file checked before is served"
        return change

    @property
    def notes(self) -> list[str]:
        change = self.change
        return [*self.searcher.notes, *([change] if change else [])]

    @property
    def documents(self) -> list[str]:
        return self.reader.strings(F.DOC_NAME)

    @property
    def kinds(self) -> list[str]:
        """Document types present (md, pdf, ...), from the extractor column."""
        return sorted({e.split("/", 1)[0] for e in self.reader.strings(F.DOC_EXTRACTOR)})


def unique_names(paths: Sequence[Path]) -> list[str]:
    """URL names for the packs: the file stem, with -2, -3 ... when two stems are equal."""
    out: list[str] = []
    for p in paths:
        base = p.stem or "pack"
        name, n = base, 1
        while name in out:
            n += 1
            name = f"{base}-{n}"
        out.append(name)
    return out


class Library:
    """The packs of one ``kbpack serve`` or ``kbpack mcp``, looked up by name.

    Each pack is opened once and checked through that open file (``check_held``); a request
    first asks ``refresh`` whether the file at a pack's path changed (inode, size, mtime): a
    changed one is opened and checked in a background thread while the held file is served,
    and replaces it only once it passed the same check. A new file that fails is not served;
    a note says so until the path changes again.
    """

    def __init__(
        self,
        paths: Sequence[Path],
        *,
        model: Path | None = None,
        verify: bool = True,
        full_verify: bool = False,
        load_model: bool = True,
        on_progress: Callable[[str], None] | None = None,
        policy: SignaturePolicy | None = None,
        embed_together: bool = False,
        vector_memory_mb: int = VECTOR_MEMORY_MB,
        exact: bool = False,
        probe: int | None = None,
    ) -> None:
        """``embed_together``: a batch's queries embedded in one call (``Batches``).
        ``exact`` / ``probe``: how packs with an approximate (IVF) index are searched, as
        ``kbpack query --exact/--probe`` (``Searcher.use_ivf``).
        ``vector_memory_mb``: how much memory bfloat16 copies of the packs' vectors may take,
        for batches to scan (2 bytes per number of every chunk and piece vector; a pack that
        does not fit, or 0, is scanned from its stored float16 rows)."""
        if vector_memory_mb < 0:
            raise UsageError(f"--vector-memory {vector_memory_mb}: give megabytes, 0 or more")
        if not paths:
            raise UsageError("give at least one pack: kbpack serve PACK...")
        self._say = on_progress or (lambda _: None)
        self._model = model
        self._verify = verify
        self._full = full_verify
        self._load_model = load_model
        self._policy = policy or SignaturePolicy()  # default: the trusted keys configured
        self._together = embed_together
        self._ivf = (exact, probe)
        self.vector_memory = CopyBudget(vector_memory_mb << 20)
        self.packs: dict[str, Served] = {}
        self.federated: Searcher | None = None  # over every pack, when several are served
        self._federated_batches: Batches | None = None
        self.by_file: dict[str, str] = {}
        self._embedders: dict[str, tuple[Any, list[str]]] = {}
        self._retired: list[PackReader] = []  # replaced files: a request may still read them
        self._swap = threading.Lock()
        self._board: Any = None  # a worker's notes from its supervisor (``follow``)
        try:
            for name, path in zip(unique_names(paths), paths, strict=True):
                reader, searcher, status = self._open(Path(path))
                self.packs[name] = Served(name, Path(path), reader, searcher, status)
                self.packs[name].batches.embed_together = embed_together
            self.federated = self._federate()
            self._federated_batches = self._batches(self.federated)
        except BaseException:
            self.close()
            raise

    def make_vector_copies(self) -> int:
        """Make every pack's bfloat16 copies now (``--vector-memory``), instead of on its first
        batch; how many packs have them."""
        made = 0
        for p in self.packs.values():
            vectors = getattr(p.searcher.corpus, "vectors", None)
            made += isinstance(vectors, PackVectors) and vectors.make_copies()
        return made

    def _open(self, path: Path) -> tuple[PackReader, Searcher, dict[str, Any]]:
        """Open ``path`` once, check that open file, and make its searcher."""
        status: dict[str, Any] = {"checked": False, "intact": None, "signature": None}
        if self._verify:
            what = "all five steps" if self._full else "bytes, signature, structure"
            self._say(f"verifying {path} ({what})")
            reader, status = open_checked(path, full=self._full, policy=self._policy)
        else:
            reader = PackReader(path)
        try:
            reader.checks.signature = self._policy.enforce(reader.header, path).as_dict()
            if self._load_model and reader.model is not None:
                sha = str(reader.model[F.M_SHA256])
                if sha not in self._embedders:
                    self._say(f"loading the model of {path}")
            searcher = assemble(
                [reader], model=self._model, load_model=self._load_model, shared=self._embedders
            )
            searcher.prepare()
            searcher.use_ivf(*self._ivf)
            vectors = getattr(searcher.corpus, "vectors", None)
            if isinstance(vectors, PackVectors):  # (the set's searcher reuses these corpora)
                vectors.copy_budget = self.vector_memory
        except BaseException:
            reader.close()
            raise
        return reader, searcher, status

    def follow(self, board: Any) -> None:
        """In a worker of ``kbpack serve --workers``: its supervisor checks changed files
        (``kbpack.serve.workers``); ``refresh`` only shows the supervisor's notes."""
        self._board = board

    def share_cores(self, workers: int) -> None:
        """In each of ``workers`` worker processes: its embedders use its share of the cores
        (at least one), so that all the workers together make one llama.cpp context per core,
        not one per core each (~37 MB each on MiniLM)."""
        share = max(1, available_threads() // max(1, workers))
        for embedder, _ in self._embedders.values():
            if hasattr(embedder, "share"):  # (None, a pack without vectors: no)
                embedder.share(share)

    def refresh(self) -> list[threading.Thread]:
        """Notice packs whose file changed at their path; check each new file in a thread.
        Costs one ``stat`` per pack, so every request calls it. Returns the threads started."""
        started: list[threading.Thread] = []
        if self._board is not None:
            notes = self._board.read()
            for p in self.packs.values():
                p.change_note = notes.get(p.name)
            return started
        for p in list(self.packs.values()):
            now = p.reader.changed()
            if now is None or now == p.pending:
                continue
            with self._swap:
                if now == p.pending:
                    continue
                p.pending = now
            t = threading.Thread(target=self._replace, args=(p, now), daemon=True)
            t.start()
            started.append(t)
        return started

    def _replace(self, p: Served, now: FileState) -> None:
        try:
            reader, searcher, status = self._open(p.path)
        except Exception as e:  # refused (or unreadable): the held file stays served
            why = str(e) if isinstance(e, KbpackError) else describe(e)
            with self._swap:
                if p.pending == now:
                    p.change_note = (
                        f"{p.path} changed on disk and the new file was refused ({why}); "
                        "still serving the file checked before"
                    )
            return
        with self._swap:
            if p.pending != now or reader.checks.state != now:
                reader.close()  # changed again meanwhile: the next refresh checks that one
                return
            with contextlib.ExitStack() as held:
                for q in self.packs.values():
                    held.enter_context(q.lock)
                self._retired.append(p.reader)
                p.reader, p.searcher, p.status = reader, searcher, status
                p.batches = Batches(searcher, self._together)
                p.pending, p.change_note = None, None
                self.federated = self._federate()
                self._federated_batches = self._batches(self.federated)

    def _batches(self, searcher: Searcher | None) -> Batches | None:
        return Batches(searcher, self._together) if searcher is not None else None

    def _federate(self) -> Searcher | None:
        """One searcher over every pack (``kbpack query A B TEXT``'s), for a search that names
        no pack; None with one pack, or when two packs share a file name (results name their
        pack by file name, so such a set could not be told apart)."""
        served = list(self.packs.values())
        self.by_file = {p.path.name: p.name for p in served}
        if len(served) < 2 or len(self.by_file) < len(served):
            return None
        return assemble(
            [p.reader for p in served],
            model=self._model,
            load_model=self._load_model,
            shared=self._embedders,
            corpora=[p.searcher.corpus for p in served],  # type: ignore[misc]
        )

    def close(self) -> None:
        for p in self.packs.values():
            p.reader.close()
        for r in self._retired:
            r.close()

    def __enter__(self) -> Library:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- lookups -----------------------------------------------------------------------------
    def get(self, name: str | None) -> Served:
        """The pack called ``name``; the only pack when ``name`` is empty and there is one."""
        if not name:
            if len(self.packs) == 1:
                return next(iter(self.packs.values()))
            raise UsageError(f"several packs are served: name one with pack= ({self.names()})")
        # a result of a search over all packs names its pack by file name: accept that too
        name = self.by_file.get(name, name) if name not in self.packs else name
        if name not in self.packs:
            raise NotFound(f"no pack named {name!r} is served ({self.names()})")
        return self.packs[name]

    def names(self) -> str:
        return ", ".join(self.packs)

    # -- search ------------------------------------------------------------------------------
    def search(
        self,
        pack: str | None,
        query: str,
        *,
        k: int = 5,
        mode: str = "hybrid",
        doc: str | None = None,
        kind: str | None = None,
        section: str | None = None,
        refuse: bool = True,
    ) -> SearchResponse:
        check_query(query, k, mode)
        # a document filter is an exact name from the pack, so glob characters in it are literal
        doc_glob = glob.escape(doc) if doc else None
        request = SearchRequest(
            query, k=k, mode=mode, doc=doc_glob, kind=kind, section=section, refuse=refuse
        )
        federated, batches = self.federated, self._federated_batches
        if not pack and federated is not None and batches is not None:
            if mode == "dense" and federated.embedder is None:
                raise UsageError(f"{federated.notes[0]}; mode dense needs one model")
            return batches.search(request)
        return self.get(pack).batches.search(request)

    def pack_of(self, result: Any, pack: str | None) -> str:
        """The served name of the pack a result came from."""
        if getattr(result, "pack", None):
            return self.by_file[result.pack]
        return self.get(pack).name

    # -- documents ---------------------------------------------------------------------------
    def document(self, pack: str | None, name: str) -> Document:
        """A document by its name in the pack (with no pack named: in the only pack that holds
        a document of that name); names never reach the file system."""
        if not pack and len(self.packs) > 1:
            holders = [p.name for p in self.packs.values() if name in p.documents]
            if len(holders) == 1:
                pack = holders[0]
            elif not holders:
                raise NotFound(f"no served pack has a document named {name!r}")
        p = self.get(pack)
        r = p.reader  # once: a file swapped in meanwhile is not mixed into this answer
        names = r.strings(F.DOC_NAME)
        try:
            row = names.index(name)
        except ValueError:
            raise NotFound(f"pack {p.name!r} has no document named {name!r}") from None
        sec_doc = r.column(F.SEC_DOCUMENT)
        rows = np.flatnonzero(sec_doc == row)
        levels, parents = r.column(F.SEC_LEVEL), r.column(F.SEC_PARENT)
        starts, ends, titles = r.column(F.SEC_FROM), r.column(F.SEC_TO), r.strings(F.SEC_TITLE)
        sections = [
            Section(
                int(s), int(levels[s]), titles[s], int(starts[s]), int(ends[s]), int(parents[s])
            )
            for s in rows
        ]
        pages: list[Page] = []
        if r.counts.get("pages", 0):
            pd = r.column(F.PAGE_DOCUMENT)
            pn, pf, pt = r.column(F.PAGE_NUMBER), r.column(F.PAGE_FROM), r.column(F.PAGE_TO)
            pages = [Page(int(pn[i]), int(pf[i]), int(pt[i])) for i in np.flatnonzero(pd == row)]
        return Document(
            pack=p.name,
            name=name,
            title=r.string_at(F.DOC_TITLE, row),
            kind=r.strings(F.DOC_EXTRACTOR)[row].split("/", 1)[0],
            text=r.text(row),
            sections=sections,
            pages=pages,
            links=[(a, b, names[t], at) for a, b, t, at, _ in r.links_of(row)],
        )

    def matching_documents(self, pack: str | None, pattern: str) -> list[str]:
        return [n for n in self.get(pack).documents if fnmatch.fnmatch(n, pattern)]


class NotFound(UsageError):
    """A pack or document name that the library does not hold (HTTP 404)."""


def check_query(query: str, k: int, mode: str) -> None:
    """Bounds on what one request may ask for: a query is short text, k is small."""
    if not query.strip():
        raise UsageError("the query is empty: type some words to search for")
    if len(query) > MAX_QUERY_CHARS:
        raise UsageError(
            f"the query is {len(query)} characters; the limit is {MAX_QUERY_CHARS}: shorten it"
        )
    if not 1 <= k <= MAX_K:
        raise UsageError(f"k must be between 1 and {MAX_K}, not {k}")
    if mode not in MODES:
        raise UsageError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")


class ChangedWhileChecked(PackError):
    """The file at a pack's path changed while it was being checked: check the new one."""


def open_checked(
    path: Path, *, full: bool = False, policy: SignaturePolicy | None = None
) -> tuple[PackReader, dict[str, Any]]:
    """Open ``path`` once and check that open file, retrying (a few times) when the path was
    swapped meanwhile: see :func:`check_once`."""
    for _ in range(3):
        try:
            return check_once(path, full=full, policy=policy)
        except ChangedWhileChecked:
            continue
    raise PackError(f"{path}: refused: the file keeps changing while it is checked; try again")


def check_once(
    path: Path, *, full: bool = False, policy: SignaturePolicy | None = None
) -> tuple[PackReader, dict[str, Any]]:
    """Open ``path`` once, verify that open file (the quick steps: bytes, signature,
    structure; all five with ``full``), then read that same file (its inode, through the open
    descriptor): a file swapped in at the path meanwhile is neither checked nor read. A pack
    that fails is refused; the reader of one that passes records what ran in ``checks``."""
    from kbpack.pack.manifest import refuse_non_regular
    from kbpack.verify.pipeline import verify_pack

    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise UsageError(f"{path}: cannot read: {e.strerror or e}; check the path") from e
    try:
        st = os.fstat(fd)
        refuse_non_regular(path, st.st_mode)
        held = held_path(fd)
        p = policy or SignaturePolicy()
        report = verify_pack(
            Path(held or path),
            quick=not full,
            shown=path,
            key=p.key,
            require_signature=p.require,
            allow_unsigned=p.allow_unsigned,
        )
        if not report.intact:
            first = report.findings[0]
            raise PackError(
                f"{path}: refused: verify found {len(report.findings)} problem(s), first "
                f"{first}; run kbpack verify on it, or serve it anyway with --no-verify"
            )
        try:
            reader = PackReader(path, via=held)
        except PackError:
            # HDF5 resolves the /proc link to a real path, which a file removed from its
            # path (swapped) no longer has: then the path changed, and the new file is checked
            if _state(path) != FileState.of(st):
                raise ChangedWhileChecked(str(path)) from None
            raise
    finally:
        os.close(fd)
    if reader.checks.state != FileState.of(st):  # written in place while it was checked
        reader.close()
        raise ChangedWhileChecked(str(path))
    checks = reader.checks
    checks.bytes_sha256 = True
    checks.signature = report.signature
    checks.full_verify = full
    status = {"checked": True, "intact": True, "signature": report.signature, "notes": report.notes}
    return reader, status


def _state(path: Path) -> FileState | None:
    try:
        return FileState.of(os.stat(path))
    except OSError:
        return None
