"""``kbpack merge A.kbpack B.kbpack ... -o OUT``: several packs streamed into one.

Nothing is extracted or embedded again: each document's text, sections, pages, chunks and
vectors are copied as stored (float16 widened to float32 and narrowed back, which is exact),
and the BM25 postings and statistics are rebuilt over the merged chunks. Documents are written
in the order a build of the union would write them -- skipped records first, then by name, as
a build walks one folder -- so merging the shards of a build (``build --shard I/N``) gives the
pack the single build gives. Memory holds one document's text at a time plus the postings (as
a build does).

The packs must agree on everything that makes chunks and vectors comparable: the model
identity (GGUF SHA-256; or BM25-only on all sides), the pipeline version and the chunking
settings. A document name found in two packs is an error unless ``prefer`` says which copy
wins. The manifest's ``merged_from`` lists each source pack's file name, the SHA-256 of its
HDF5 bytes (its manifest's digest) and its counts.
"""

from __future__ import annotations

import contextlib
import json
import resource
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from kbpack.errors import UsageError
from kbpack.index.pieces import Piece
from kbpack.index.postings import PostingsBuilder
from kbpack.ops.restore import PackContents
from kbpack.ops.written import WrittenPack, written
from kbpack.pack import format as F
from kbpack.pack.read import PackReader
from kbpack.pack.write import PackWriter, temp_path_for
from kbpack.runtime.progress import Progress

Prefer = Literal["first", "last"]


@dataclass
class MergeReport(WrittenPack):
    sources: list[dict[str, Any]]
    dropped: list[dict[str, str]] = field(default_factory=list)  # duplicates --prefer dropped
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    peak_rss_mb: float = 0.0


def source_record(r: PackReader) -> dict[str, Any]:
    """What the merged manifest keeps of one source pack (``merged_from``)."""
    rec: dict[str, Any] = {
        "file": r.path.name,
        "hdf5_sha256": r.manifest.hdf5_sha256,
        "created": r.manifest.created,
        "kbpack_version": r.manifest.kbpack_version,
        "documents": int(r.counts.get("documents", 0)),
        "chunks": int(r.counts.get("chunks", 0)),
    }
    if isinstance(r.manifest.extra.get("shard"), dict):
        rec["shard"] = r.manifest.extra["shard"]
    earlier = r.manifest.extra.get("merged_from")
    if isinstance(earlier, list):
        rec["merged_from"] = earlier  # a merged pack merged again keeps its history
    return rec


def check_compatible(readers: Sequence[PackReader]) -> None:
    """UsageError naming the first pack whose chunks or vectors cannot join the first one's."""
    first = readers[0]
    for r in readers[1:]:
        a, b = first.model, r.model
        if (a is None) != (b is None):
            plain, dense = (first, r) if a is None else (r, first)
            raise UsageError(
                f"{plain.path} has no vectors but {dense.path} has; "
                f"kbpack migrate {plain.path} --model FILE.gguf first"
            )
        if a is not None and b is not None and a[F.M_SHA256] != b[F.M_SHA256]:
            raise UsageError(
                f"{r.path}: embedded with {b[F.M_NAME]} (sha256 {str(b[F.M_SHA256])[:12]}), "
                f"{first.path} with {a[F.M_NAME]} (sha256 {str(a[F.M_SHA256])[:12]}); vectors of "
                "two models cannot share a pack: kbpack migrate one with the other's --model"
            )
        if a is not None and b is not None and a != b:
            # same weights, other prefixes (or another stamp): the vectors are not comparable
            diff = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            raise UsageError(
                f"{r.path}: its model stamp differs from {first.path}'s in {', '.join(diff)}; "
                "vectors made with other prefixes cannot share a pack: rebuild one to match"
            )
        for what, get in (
            ("sentence pieces (build --pieces)", lambda x: x.has_pieces),
            ("pipeline version", lambda x: x.root_attrs.get(F.R_PIPELINE_VERSION)),
            ("chunking settings", lambda x: x.chunking),
            ("BM25 parameters", lambda x: x.bm25_params),
            ("BM25 analyzer (build --analyzer)", lambda x: x.bm25_analyzer or "plain"),
        ):
            if get(r) != get(first):
                raise UsageError(
                    f"{r.path}: its {what} ({get(r)}) differ from {first.path}'s ({get(first)}); "
                    "rebuild or migrate one of them so that they match"
                )


def merge_order(
    readers: Sequence[PackReader], prefer: Prefer | None
) -> tuple[list[tuple[int, int]], list[dict[str, str]]]:
    """``(pack, row)`` of every document to write, in build order, and the dropped duplicates."""
    chosen: dict[str, tuple[int, int]] = {}
    dropped: list[dict[str, str]] = []
    for i, r in enumerate(readers):
        for row, name in enumerate(r.strings(F.DOC_NAME)):
            if name in chosen:
                j = chosen[name][0]
                if prefer is None:
                    raise UsageError(
                        f"{name}: in both {readers[j].path} and {r.path}; "
                        "pass --prefer first or --prefer last to keep one copy"
                    )
                keep, drop = (j, i) if prefer == "first" else (i, j)
                dropped.append(
                    {
                        "name": name,
                        "kept": str(readers[keep].path),
                        "dropped": str(readers[drop].path),
                    }
                )
                if prefer == "first":
                    continue
            chosen[name] = (i, row)
    status = [r.strings(F.DOC_STATUS) for r in readers]
    # A build writes the skipped records first, then the files in name order (one folder).
    order = sorted(chosen.items(), key=lambda kv: (status[kv[1][0]][kv[1][1]] != "skipped", kv[0]))
    return [where for _, where in order], dropped


def merge_packs(
    sources: Sequence[Path],
    out: Path,
    prefer: Prefer | None = None,
    progress: Progress | None = None,
) -> MergeReport:
    """Merge ``sources`` into ``out`` (written atomically; ``out`` may not be a source)."""
    progress = progress or Progress(enabled=False)
    started = time.perf_counter()
    if not sources:
        raise UsageError("give the packs to merge: kbpack merge A.kbpack B.kbpack -o OUT")
    resolved = {Path(s).resolve() for s in sources}
    if len(resolved) != len(sources):
        raise UsageError("a pack is given twice; give each pack once")
    if Path(out).resolve() in resolved:
        raise UsageError(f"{out}: is one of the packs being merged; write to a new file")
    with contextlib.ExitStack() as stack:
        readers = [stack.enter_context(PackReader(s)) for s in sources]
        check_compatible(readers)
        order, dropped = merge_order(readers, prefer)
        contents = [PackContents(r) for r in readers]
        notes: list[str] = []
        gguf = _carried_model(readers, out, stack)
        first = readers[0]
        dims = int(first.model[F.M_DIMS]) if first.model is not None else None
        records = [source_record(r) for r in readers]
        postings = PostingsBuilder(first.bm25_analyzer, headers=True)
        with PackWriter(
            out,
            model=first.model,
            dims=dims,
            gguf=gguf,
            chunking=first.chunking,
            pieces=first.has_pieces,
            manifest_extra={"merged_from": records},
            # an IVF index (/ivf) is rebuilt over the merged vectors when any source had one,
            # and from ivf.MIN_CHUNKS chunks on as a build writes it
            ivf=True if any(r.has_ivf for r in readers) else None,
        ) as writer:
            _search_settings(readers, writer, notes)
            for n, (i, row) in enumerate(order, 1):
                copy_document(contents[i], row, writer, postings)
                progress.update("documents", n, len(order))
            progress.done()
            writer.set_postings(postings.finish(writer.n_chunks))
            committed = writer.commit()
            if "ivf_lists" in committed.counts:
                notes.append(
                    f"IVF index rebuilt over the merged vectors: {committed.counts['ivf_lists']} "
                    "lists"
                )
    return MergeReport(
        *written(committed),
        sources=records,
        dropped=dropped,
        notes=notes,
        seconds=round(time.perf_counter() - started, 3),
        peak_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    )


def copy_document(
    contents: PackContents, row: int, writer: PackWriter, postings: PostingsBuilder
) -> None:
    """Append document ``row`` of a pack -- text, structure, chunks, vectors as stored -- to
    ``writer``, and index its chunks; the document's text is not kept in memory afterwards."""
    doc = contents.document(row)
    chunks = contents.chunks(row)
    first = writer.n_chunks
    pieces, piece_vectors = stored_pieces(contents, row) if writer.pieces else ([], None)
    writer.add_document(doc, chunks, contents.vectors(row), pieces, piece_vectors)
    for k, ch in enumerate(chunks):
        postings.add_chunk(first + k, doc, ch)
    contents.r.forget_text(row)


def stored_pieces(contents: PackContents, row: int) -> tuple[list[Piece], np.ndarray]:
    """Document ``row``'s sentence pieces (chunk indices local to the document) and their
    vectors (float32, exact), as the pack stores them."""
    r = contents.r
    a, b = contents.chunk_range(row)
    owner = r.column(F.PIECE_CHUNK)
    lo, hi = (int(x) for x in np.searchsorted(owner, [a, b]))
    start, end = r.column(F.PIECE_FROM), r.column(F.PIECE_TO)
    pieces = [Piece(int(owner[k]) - a, int(start[k]), int(end[k])) for k in range(lo, hi)]
    vectors = np.asarray(r.dataset(F.PIECE_DATA)[lo:hi], dtype=np.float32)
    return pieces, vectors


def _search_settings(readers: Sequence[PackReader], writer: PackWriter, notes: list[str]) -> None:
    """One refusal threshold for the merged pack: the sources' when they agree, else the
    default (each was calibrated on other documents), said in a note."""
    settings = [r.search_defaults for r in readers]
    values = {s["max_distance"] for s in settings}
    if len(values) == 1:
        calibrations = {json.dumps(s.get("calibration"), sort_keys=True) for s in settings}
        cal = settings[0].get("calibration") if len(calibrations) == 1 else None
        writer.set_search_defaults(values.pop(), cal)
        return
    writer.set_search_defaults(F.DEFAULT_MAX_DISTANCE)
    notes.append(
        f"the packs' refusal thresholds differ ({', '.join(f'{v:g}' for v in sorted(values))}): "
        f"the merged pack uses the default {F.DEFAULT_MAX_DISTANCE:g}; run kbpack calibrate on it"
    )


def _carried_model(
    readers: Sequence[PackReader], out: Path, stack: contextlib.ExitStack
) -> Path | None:
    """The GGUF to carry in the merged pack when a source carries it (written beside ``out``
    and removed afterwards), else None."""
    carrier = next((r for r in readers if r.has_embedded_model), None)
    if carrier is None:
        return None
    tmp = temp_path_for(Path(out))
    tmp = tmp.with_name(tmp.name + ".gguf")  # (with_suffix would cut the name at its last dot)
    stack.callback(lambda: tmp.unlink(missing_ok=True))
    carrier.write_gguf(tmp)
    return tmp


__all__ = ["MergeReport", "copy_document", "merge_packs"]
