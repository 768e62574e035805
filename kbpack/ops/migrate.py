"""``kbpack migrate``: bring a pack to the current format, pipeline and (optionally) a new model.

Three kinds of staleness, each fixed from what the pack itself holds (no sources needed):

* **format** -- a pack of an older format version goes through registered steps, one per
  version (``STEPS[n]`` rewrites a version-``n`` file as version ``n + 1``), into a temporary
  file beside the output. Each step lives in its own module (``format_1_to_2.py``), imported
  at the end of this one so that it is registered whenever migration runs, and is tested on
  the golden pack of its version in ``fixtures/golden/``. A pack from a newer format is
  refused ("upgrade kbpack").
* **pipeline** -- a pack built by an older chunking pipeline is chunked again from its stored
  canonical text and section tree.
* **model** -- ``--model`` re-embeds every chunk from its stored embedded text
  (``header + "\\n\\n" + content``). Chunks are kept when the new model has the same window and
  counts the same tokens for every chunk of the document; otherwise that document is chunked
  again so every chunk fits the new window. The result is stamped with the new model.

Only what is stale is recomputed: a vector is reused whenever the model is unchanged and the
chunk's embedded text is unchanged, so migrating a migrated pack embeds nothing. The output is
always a new file written atomically by ``PackWriter`` and verified; the source is only read.
Extractor staleness cannot be fixed without the sources: ``staleness()`` points at
``kbpack update`` for it.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from kbpack.errors import ModelError, NewerFormatError, PackError, UsageError
from kbpack.index.chunk import (
    Chunk,
    ChunkConfig,
    chunk_document,
    embedded_text,
    header,
    section_path,
)
from kbpack.ops import format_1_to_2 as format_1_to_2  # registers step 1 -> 2 (format_steps.py)
from kbpack.ops.format_steps import STEPS as STEPS
from kbpack.ops.format_steps import FormatStep as FormatStep
from kbpack.ops.format_steps import format_step as format_step
from kbpack.ops.restore import PackContents
from kbpack.pack import format as F
from kbpack.pack.manifest import read_header
from kbpack.pack.read import PackReader
from kbpack.pack.write import temp_path_for
from kbpack.runtime.progress import Progress

# --- format steps ------------------------------------------------------------------------------


def plan_format_steps(
    version: int, current: int | None = None, steps: dict[int, FormatStep] | None = None
) -> list[tuple[int, FormatStep]]:
    """The steps that take a pack of ``version`` to ``current`` (this kbpack's), in order."""
    current = F.FORMAT_VERSION if current is None else current
    steps = STEPS if steps is None else steps
    if version > current:
        raise NewerFormatError(
            f"format {version} is newer than this kbpack reads ({current}). Upgrade kbpack."
        )
    plan = []
    for v in range(version, current):
        if v not in steps:
            raise PackError(
                f"no migration step from format {v} to {v + 1} in this kbpack; "
                f"use the kbpack release that introduced format {v + 1} first"
            )
        plan.append((v, steps[v]))
    return plan


def upgrade_format(src: Path, near: Path) -> tuple[Path, int, list[str], list[Path]]:
    """Run the steps on ``src``: (a current-format file, ``src``'s format version, the steps
    applied, the temporary files made).

    Temporary files are made beside ``near`` (the output) and are the caller's to remove.
    """
    version = read_header(src).manifest.format_version  # refuses a newer format
    current = src
    done: list[str] = []
    temps: list[Path] = []
    try:
        for v, step in plan_format_steps(version):
            nxt = temp_path_for(near)
            temps.append(nxt)
            step(current, nxt)
            done.append(f"format {v} -> {v + 1}")
            current = nxt
    except BaseException:
        for t in temps:
            t.unlink(missing_ok=True)
        raise
    return current, version, done, temps


# --- the plan ----------------------------------------------------------------------------------


@dataclass
class _DocPlan:
    action: str  # "keep": chunks and vectors as they are; "reembed": same chunks; "rechunk"
    chunks: list[Chunk]
    embedded: list[str] = field(default_factory=list)  # embedded texts, when vectors are made


@dataclass
class MigrationPlan:
    source: Path
    format_from: int
    format_steps: list[str]
    pipeline_from: int
    pipeline_to: int
    model_from: dict[str, Any] | None
    model_to: dict[str, Any] | None
    documents: int
    kept: int = 0  # documents whose chunks and vectors stay as they are
    reembedded: int = 0  # documents whose chunks stay and whose vectors are recomputed
    rechunked: int = 0  # documents chunked again
    chunks_before: int = 0
    chunks_after: int = 0
    chunks_to_embed: int = 0
    vectors_reused: int = 0
    stale_extractor: list[str] = field(default_factory=list)  # needs the sources: kbpack update
    notes: list[str] = field(default_factory=list)

    @property
    def model_changes(self) -> bool:
        return _sha(self.model_from) != _sha(self.model_to)

    @property
    def needs_work(self) -> bool:
        return bool(self.reembedded or self.rechunked or self.chunks_to_embed)

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": str(self.source),
            "format": {
                "from": self.format_from,
                "to": F.FORMAT_VERSION,
                "steps": self.format_steps,
            },
            "pipeline": {"from": self.pipeline_from, "to": self.pipeline_to},
            "model": {
                "changed": self.model_changes,
                "from": self.model_from,
                "to": self.model_to,
            },
            "documents": {
                "total": self.documents,
                "kept": self.kept,
                "reembedded": self.reembedded,
                "rechunked": self.rechunked,
                "stale_extractor": self.stale_extractor,
            },
            "chunks": {
                "before": self.chunks_before,
                "after": self.chunks_after,
                "to_embed": self.chunks_to_embed,
                "vectors_reused": self.vectors_reused,
            },
            "needs_work": self.needs_work,
            "notes": self.notes,
        }


def _sha(model: dict[str, Any] | None) -> tuple[str, str, str] | None:
    """What decides whether vectors can be kept: the model's hash and its prefixes (a prefix
    change re-embeds like a model change)."""
    from kbpack.model.prefixes import vectors_key

    return vectors_key(model)


def _config(embedder: Any | None, recorded: dict[str, Any] | None = None) -> ChunkConfig:
    """The chunking of a build with the pack's recorded settings (see build_from): the new
    model's window, or characters without a model."""
    rec = recorded or {}
    max_chars, overlap = rec.get("max_chars"), int(rec.get("overlap") or 0)
    if embedder is None:
        return ChunkConfig(window=None, max_chars=max_chars or 1500, overlap=overlap)
    return ChunkConfig(window=embedder.window, max_chars=max_chars, overlap=overlap)


class _Planner:
    """Decides, document by document, what to keep, re-embed or re-chunk."""

    def __init__(
        self,
        contents: PackContents,
        embedder: Any | None,
        pipeline_stale: bool,
        model_changes: bool,
    ) -> None:
        self.c = contents
        self.embedder = embedder
        self.pipeline_stale = pipeline_stale
        self.model_changes = model_changes
        stamp = contents.r.model
        self.old_window = int(stamp[F.M_WINDOW]) if stamp else None
        self.count = embedder.count_document_tokens if embedder else None
        self.config = _config(embedder, contents.r.chunking)
        self.problems: list[str] = []

    def plan(self, row: int) -> _DocPlan:
        c = self.c
        doc = c.document(row)
        chunks = c.chunks(row)
        if not self.pipeline_stale and not self.model_changes:
            return _DocPlan("keep", chunks)
        texts = _embedded_texts(doc, chunks)
        if not self.pipeline_stale and self._fits_unchanged(chunks, texts):
            return _DocPlan("reembed", chunks, texts)
        result = chunk_document(doc, self.count, self.config)
        self.problems.extend(result.problems)
        return _DocPlan("rechunk", result.chunks, _embedded_texts(doc, result.chunks))

    def _fits_unchanged(self, chunks: list[Chunk], texts: list[str]) -> bool:
        """Whether the new model reads these chunks as the old one did: same window, same
        token count for every embedded text (so the same chunking would come out)."""
        if self.count is None or self.embedder is None:
            return False
        if self.old_window != self.embedder.window:
            return False
        return all(self.count(t) == ch.tokens for t, ch in zip(texts, chunks, strict=True))


def _embedded_texts(doc: Any, chunks: list[Chunk]) -> list[str]:
    return [
        embedded_text(header(doc.title, section_path(doc, ch.section)), doc.text[ch.start : ch.end])
        for ch in chunks
    ]


def _text_key(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


def _stale_extractors(contents: PackContents) -> list[str]:
    from kbpack.extract import EXTRACTOR_VERSIONS

    r = contents.r
    out = []
    for i, name in enumerate(contents.names):
        kind = r.strings(F.DOC_EXTRACTOR)[i].split("/", 1)[0]
        current = EXTRACTOR_VERSIONS.get(kind)
        if current is not None and int(r.column(F.DOC_EXTRACTOR_VERSION)[i]) < current:
            out.append(name)
    return out


# --- running it --------------------------------------------------------------------------------


@dataclass
class MigrationReport:
    plan: MigrationPlan
    path: Path | None  # None on a dry run
    size: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    vectors_embedded: int = 0
    verified: str = ""  # how the output was checked
    dry_run: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.plan.as_dict(),
            "dry_run": self.dry_run,
            "output": str(self.path) if self.path else None,
            "size": self.size,
            "counts": self.counts,
            "vectors_embedded": self.vectors_embedded,
            "verified": self.verified,
        }


def migrate_pack(
    src: Path,
    out: Path | None,
    *,
    model: Path | None = None,
    dry_run: bool = False,
    threads: int | None = None,
    progress: Progress | None = None,
    query_prefix: str | None = None,
    doc_prefix: str | None = None,
) -> MigrationReport:
    """Migrate ``src`` into the new file ``out`` (never ``src`` itself); see the module doc.

    ``query_prefix`` / ``doc_prefix`` (None: the pack's for the same model, the new model's
    family defaults for another) re-embed every chunk when they change the pack's."""
    src = Path(src)
    if out is None and not dry_run:
        raise UsageError("migrate writes a new file: give -o OUT")
    if out is not None:
        out = Path(out)
        if out.exists() and src.exists() and out.resolve() == src.resolve():
            raise UsageError(
                f"{out}: is the source pack; migrate writes a new file, give another -o"
            )
    near = out if out is not None else src
    current, version, steps, temps = upgrade_format(src, near)
    try:
        with PackReader(current) as reader:
            plan = MigrationPlan(
                source=src,
                format_from=version,
                format_steps=steps,
                pipeline_from=reader.pipeline_version,
                pipeline_to=F.PIPELINE_VERSION,
                model_from=reader.model,
                model_to=reader.model,
                documents=0,
            )
            target = _Target(model, query_prefix, doc_prefix, threads)
            return _migrate_current(reader, plan, out, target, dry_run, progress or Progress(False))
    finally:
        for t in temps:
            with contextlib.suppress(OSError):
                t.unlink(missing_ok=True)


@dataclass(frozen=True)
class _Target:
    """What the user asked the migrated pack to be embedded with."""

    model: Path | None
    query_prefix: str | None
    doc_prefix: str | None
    threads: int | None


def _migrate_current(
    reader: PackReader,
    plan: MigrationPlan,
    out: Path | None,
    want: _Target,
    dry_run: bool,
    progress: Progress,
) -> MigrationReport:
    contents = PackContents(reader)
    pipeline_stale = plan.pipeline_from < F.PIPELINE_VERSION
    plan.pipeline_to = max(plan.pipeline_from, F.PIPELINE_VERSION)
    embedder, model_path = _target_embedder(reader, want, pipeline_stale)
    threads = want.threads
    target = embedder.stamp if embedder is not None else reader.model
    plan.model_to = target
    plan.documents = contents.n
    plan.chunks_before = int(reader.counts.get("chunks", 0))
    plan.stale_extractor = _stale_extractors(contents)
    if plan.stale_extractor:
        plan.notes.append(
            f"{len(plan.stale_extractor)} documents were extracted by an older extractor; "
            "migrate cannot re-extract them: run kbpack update PACK SOURCES..."
        )
    search = reader.search_defaults
    if plan.model_changes and (
        "calibration" in search or search["max_distance"] != F.DEFAULT_MAX_DISTANCE
    ):
        plan.notes.append(
            f"the refusal threshold {search['max_distance']:g} was set for the old model; the "
            f"new pack has the default {F.DEFAULT_MAX_DISTANCE}: run kbpack calibrate on it"
        )
    planner = _Planner(contents, embedder, pipeline_stale, plan.model_changes)
    plans: dict[int, _DocPlan] = {}
    # Vectors the old pack holds, by embedded text: reusable when the model does not change.
    by_text: dict[bytes, int] = {}
    ok = reader.strings(F.DOC_STATUS)
    for row in contents:
        if ok[row] != "ok":
            continue
        p = planner.plan(row)
        plans[row] = p
        if p.action == "keep":
            plan.kept += 1
        elif p.action == "reembed":
            plan.reembedded += 1
        else:
            plan.rechunked += 1
        plan.chunks_after += len(p.chunks)
        progress.update("planning", row + 1, contents.n)
    progress.done()
    if not plan.model_changes and reader.has_vectors and any(p.embedded for p in plans.values()):
        for row, p in plans.items():
            if p.action != "keep":
                first, _ = contents.chunk_range(row)
                old_texts = _embedded_texts(contents.document(row), contents.chunks(row))
                for k, t in enumerate(old_texts):
                    by_text[_text_key(t)] = first + k
    if target is not None:
        for p in plans.values():
            for t in p.embedded:
                if _text_key(t) in by_text:
                    plan.vectors_reused += 1
                else:
                    plan.chunks_to_embed += 1
    plan.notes.extend(sorted(set(planner.problems)))
    if dry_run:
        return MigrationReport(plan=plan, path=None, dry_run=True)
    assert out is not None
    if plan.needs_work:
        prefixes = embedder.prefixes if embedder is not None else None
        written = _rebuild(
            reader, contents, plans, by_text, out, model_path, prefixes, threads, progress
        )
        if not plan.model_changes:  # same model: its threshold (and calibration) still hold
            from kbpack.pack.rewrite import rewrite_search_settings

            rewrite_search_settings(out, out, search["max_distance"], search.get("calibration"))
    else:
        written = _copy(reader, contents, out)
    path, size, counts, embedded = written
    return MigrationReport(
        plan=plan,
        path=path,
        size=size,
        counts=counts,
        vectors_embedded=embedded,
        verified=_verify(path),
    )


def _target_embedder(
    reader: PackReader, want: _Target, pipeline_stale: bool
) -> tuple[Any | None, Path | None]:
    """The model to embed with, loaded with its prefixes, and its file; (None, None) when
    nothing is embedded."""
    from kbpack.model.embedder import Embedder
    from kbpack.model.prefixes import Prefixes, override

    stamp = reader.model
    kept = Prefixes.from_stamp(stamp) if stamp is not None else Prefixes()
    model = want.model
    if model is not None:
        if not model.is_file():
            raise UsageError(f"{model}: model file not found; pass an existing FILE.gguf")
        given = Embedder(model, threads=want.threads)
        # The same model keeps the pack's prefixes; another one starts from its family's.
        same = stamp is not None and given.identity.sha256 == stamp[F.M_SHA256]
        base = kept if same else given.prefixes
        given.prefixes = override(base, want.query_prefix, want.doc_prefix)
        return given, model
    changed = override(kept, want.query_prefix, want.doc_prefix)
    if stamp is None:
        if changed != kept:
            raise UsageError(
                f"{reader.path}: a BM25-only pack has no vectors to prefix; pass --model too"
            )
        return None, None  # BM25-only stays BM25-only
    if not pipeline_stale and changed == kept:
        return None, None  # the same model with the same prefixes re-embeds nothing
    from kbpack.model.resolve import resolve_embedder

    embedder, notes = resolve_embedder(reader, None)
    if embedder is None:
        raise ModelError(
            f"{reader.path}: re-chunking or new prefixes need the pack's model to embed "
            f"({'; '.join(notes)}); pass --model FILE.gguf"
        )
    embedder.prefixes = changed
    return embedder, Path(embedder.path)


def _restored_documents(contents: PackContents) -> Iterator[Any]:
    for row in contents:
        yield contents.document(row)


def _rebuild(
    reader: PackReader,
    contents: PackContents,
    plans: dict[int, _DocPlan],
    by_text: dict[bytes, int],
    out: Path,
    model_path: Path | None,
    prefixes: Any | None,
    threads: int | None,
    progress: Progress,
) -> tuple[Path, int, dict[str, int], int]:
    """Write through the build pipeline: planned chunks in, vectors reused where they can be."""
    from kbpack.ops.build import BuildOptions, build_from

    by_name = {contents.names[row]: p for row, p in plans.items()}
    rows = contents.row_of

    def reuse(doc: Any) -> tuple[list[Any], np.ndarray | None] | None:
        p = by_name.get(doc.name)
        if p is None:
            return None
        vectors = contents.vectors(rows[doc.name]) if p.action == "keep" else None
        return p.chunks, vectors

    def known(text: str) -> np.ndarray | None:
        row = by_text.get(_text_key(text))
        return None if row is None else contents.vector(row)

    opts = BuildOptions(
        sources=[],
        out=out,
        model=model_path,
        vectors=model_path is not None,
        embed_model=reader.has_embedded_model and model_path is not None,
        threads=threads,
        query_prefix=prefixes.query if prefixes is not None else None,
        doc_prefix=prefixes.document if prefixes is not None else None,
        allow_empty=True,  # a migrated pack holds what the old one held, even nothing
        pieces=reader.has_pieces,  # a pack with the piece level keeps it (re-embedded if new model)
        ivf=reader.has_ivf,  # and one with an IVF index keeps it, rebuilt over the new vectors
        ivf_lists=reader.counts.get("ivf_lists"),
    )
    result = build_from(
        _restored_documents(contents),
        contents.n,
        opts,
        progress,
        reuse=reuse,
        known_vectors=known if by_text else None,
    )
    return result.path, result.size, result.counts, result.vectors_embedded


def _copy(
    reader: PackReader, contents: PackContents, out: Path
) -> tuple[Path, int, dict[str, int], int]:
    """Nothing to recompute: every document, chunk, vector and setting written as it is."""
    from kbpack.index.postings import PostingsBuilder
    from kbpack.pack.write import PackWriter

    stamp = reader.model
    dims = int(stamp[F.M_DIMS]) if stamp else None
    gguf = None
    # migrate keeps the pack's analyzer; the header is indexed even where the old pack did not
    postings = PostingsBuilder(reader.bm25_analyzer, headers=True)
    search = reader.search_defaults
    with contextlib.ExitStack() as stack:
        if reader.has_embedded_model:
            tmp = temp_path_for(out)
            gguf = tmp.with_name(tmp.name + ".gguf")  # the stored model, copied for the writer
            stack.callback(gguf.unlink, missing_ok=True)
            reader.write_gguf(gguf)
        with PackWriter(
            out,
            model=stamp,
            dims=dims,
            gguf=gguf,
            created=reader.manifest.created,
            chunking=reader.chunking,
            pieces=reader.has_pieces,
            # the same vectors and lists: k-means from its fixed seed writes the same index
            ivf=reader.has_ivf,
            ivf_lists=reader.counts.get("ivf_lists"),
        ) as writer:
            for row in contents:
                doc = contents.document(row)
                chunks: list[Any] = list(contents.chunks(row))
                first = writer.n_chunks
                pieces, piece_vectors = contents.pieces(row)
                writer.add_document(
                    doc,
                    chunks,
                    contents.vectors(row),
                    pieces,
                    piece_vectors if reader.has_pieces else None,
                )
                for k, ch in enumerate(chunks):
                    postings.add_chunk(first + k, doc, ch)
            writer.set_postings(postings.finish(writer.n_chunks))
            writer.set_search_defaults(search["max_distance"], search.get("calibration"))
            result = writer.commit()
    return result.path, result.size, result.counts, 0


def _verify(path: Path) -> str:
    """Verify the written pack; a pack that fails is removed and the migration fails."""
    problem = ""
    try:
        from kbpack.verify.pipeline import verify_pack
    except ImportError:  # verify not available: at least the reader's checks and the bytes
        from kbpack.pack.manifest import hash_hdf5_bytes

        how = "opened and hashed (kbpack.verify.pipeline not available)"
        with PackReader(path) as r:
            size, sha = hash_hdf5_bytes(path)
            if size != r.manifest.file_size or sha != r.manifest.hdf5_sha256:
                problem = "its bytes do not match the manifest's SHA-256"
    else:
        how = "kbpack verify: intact"
        report = verify_pack(path)
        if not report.intact:
            problem = str(report.findings[0])
    if problem:
        path.unlink(missing_ok=True)
        raise PackError(f"{path}: the migrated pack fails verification ({problem}); removed it")
    return how


# --- staleness, for inspect --------------------------------------------------------------------


@lru_cache(maxsize=1)
def default_model_sha() -> str | None:
    """SHA-256 of the default model's GGUF, or None when its weights are not installed."""
    from kbpack.model.cache import default_model_path
    from kbpack.model.identity import sha256_file

    try:
        return sha256_file(default_model_path())
    except ModelError:
        return None


_UNSET: Any = object()


def staleness(reader: PackReader, default_sha: str | None = _UNSET) -> list[dict[str, Any]]:
    """What in ``reader``'s pack is older than this kbpack would make, with the fixing command.

    One entry per cause: ``{"stale": "extractor" | "pipeline" | "model", "detail": one line,
    "documents": [names], "fix": command}``. ``default_sha`` is the default model's SHA-256
    (computed when not given; None skips the model check).
    """
    from kbpack.extract import EXTRACTOR_VERSIONS

    contents = PackContents(reader)
    ok = [
        name
        for name, status in zip(contents.names, reader.strings(F.DOC_STATUS), strict=True)
        if status == "ok"
    ]
    out: list[dict[str, Any]] = []
    by_kind: dict[tuple[str, int, int], list[str]] = {}
    for i, name in enumerate(contents.names):
        kind = reader.strings(F.DOC_EXTRACTOR)[i].split("/", 1)[0]
        have = int(reader.column(F.DOC_EXTRACTOR_VERSION)[i])
        current = EXTRACTOR_VERSIONS.get(kind)
        if current is not None and have < current:
            by_kind.setdefault((kind, have, current), []).append(name)
    for (kind, have, current), names in sorted(by_kind.items()):
        out.append(
            {
                "stale": "extractor",
                "detail": f"{kind} extractor v{have}, this kbpack has v{current}",
                "documents": names,
                "fix": f"kbpack update {reader.path} SOURCES...",
            }
        )
    pipeline = reader.pipeline_version
    if pipeline < F.PIPELINE_VERSION and ok:
        out.append(
            {
                "stale": "pipeline",
                "detail": f"chunked by pipeline v{pipeline}, this kbpack has v{F.PIPELINE_VERSION}",
                "documents": ok,
                "fix": f"kbpack migrate {reader.path} -o NEW.kbpack",
            }
        )
    stamp = reader.model
    if default_sha is _UNSET:
        default_sha = default_model_sha() if stamp is not None else None
    if stamp is not None and default_sha is not None and stamp[F.M_SHA256] != default_sha and ok:
        out.append(
            {
                "stale": "model",
                "detail": (
                    f"embedded with {stamp[F.M_NAME]} (sha256 {str(stamp[F.M_SHA256])[:12]}), "
                    f"not the default model (sha256 {default_sha[:12]})"
                ),
                "documents": ok,
                "fix": f"kbpack migrate {reader.path} -o NEW.kbpack --model FILE.gguf",
            }
        )
    return out


__all__ = [
    "STEPS",
    "MigrationPlan",
    "MigrationReport",
    "format_step",
    "migrate_pack",
    "plan_format_steps",
    "staleness",
    "upgrade_format",
]
