"""Pack sets: one pack split at document boundaries into members under a size
(``kbpack build ... --split-size 3.9G``, for FAT32 sticks that refuse files over 4 GiB).

``NAME.kbpack`` becomes ``NAME-001.kbpack``, ``NAME-002.kbpack``, ... Each member is a complete
pack (its own BM25 postings, the model stamp, the search settings; the model itself when the
source carries it) that ``verify`` checks alone; documents keep the source's order, so
``kbpack query NAME-*.kbpack`` (a federated query) returns what the unsplit pack returns. Each
manifest's ``set`` says ``{"id", "index", "count"}``; the id is derived from the source pack's
digest, so members of two different builds never pass for one set.

Sizes are planned from an upper-bound estimate per document (text bytes, chunk rows, vectors,
one posting per token, a share of the vocabulary) and checked after each member is written: a
member over the size is written again with fewer documents. Members are written under hidden
names and renamed only when the whole set is complete.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kbpack.errors import UsageError
from kbpack.index.postings import PostingsBuilder
from kbpack.ops.merge import copy_document
from kbpack.ops.restore import PackContents
from kbpack.pack import format as F
from kbpack.pack.manifest import encode_header, read_header, write_header
from kbpack.pack.read import PackReader
from kbpack.pack.set_publish import member_path, publish_set
from kbpack.pack.set_publish import set_findings as set_findings
from kbpack.pack.tempfiles import remove_stale_temp_files, temp_path_for
from kbpack.pack.write import PackWriter
from kbpack.runtime.progress import Progress

FAT32_MAX = 2**32 - 1  # bytes: the largest file FAT32 holds
_FIXED = 192 * 1024  # user block, HDF5 metadata and attributes of a pack: ~100 KiB measured
_PER_ROW_STRING = 48  # an HDF5 variable-length string: descriptor plus global-heap overhead
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)


def parse_size(text: str, option: str = "--split-size") -> int:
    """``"3.9G"``, ``"700M"``, ``"4000000000"`` -> bytes (K, M, G, T are powers of 1024);
    errors name ``option``, as the user spelled the size."""
    m = _SIZE.match(text)
    if not m:
        raise UsageError(f"{option} {text}: write a size such as 3.9G, 700M or 4000000000")
    value = float(m.group(1)) * 1024 ** " kmgt".index(m.group(2).lower() or " ")
    if value < 2**20:
        raise UsageError(f"{option} {text}: members need at least 1M")
    return int(value)


@dataclass
class SplitReport:
    members: list[dict[str, Any]]
    set_id: str
    max_bytes: int
    rewritten: int = 0  # members written again because the estimate was short
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def name_the_set(report: Any, out: Path, members: SplitReport) -> None:
    """Make a set's build report name the set (``OUT-NNN.kbpack``, the members' bytes summed):
    the whole pack it was split from was a step on the way."""
    report.path = Path(f"{out.parent / out.stem}-NNN{out.suffix or '.kbpack'}")
    report.size = sum(m["bytes"] for m in members.members)


class _Estimator:
    """An upper bound of the bytes each document adds to a member."""

    def __init__(self, r: PackReader, contents: PackContents) -> None:
        self.r = r
        self.contents = contents
        self.dims = int(r.model[F.M_DIMS]) if r.model is not None else 0
        self.doc_len = r.column(F.BM25_DOC_LEN)
        c = r.counts
        # vocabulary bytes per token, doubled: a small member has a larger share (Heaps' law)
        tokens = max(1, int(self.doc_len.sum()))
        self.vocab_per_token = 2.0 * (c.get("terms_bytes", 0) + 16 * c.get("terms", 0)) / tokens
        self.model_bytes = int(c.get("model_bytes", 0))

    def fixed(self) -> int:
        return _FIXED + self.model_bytes

    def document(self, row: int) -> int:
        a, b = self.contents.chunk_range(row)
        sections = int(self.contents.section_rows[row + 1] - self.contents.section_rows[row])
        pages = int(self.contents.page_rows[row + 1] - self.contents.page_rows[row])
        text = len(self.r.text(row).encode("utf-8"))
        self.r.forget_text(row)
        tokens = int(self.doc_len[a:b].sum())
        pieces = 0
        if self.r.has_pieces:
            owner = self.r.column(F.PIECE_CHUNK)
            pieces = int(np.searchsorted(owner, b) - np.searchsorted(owner, a))
        return int(
            pieces * (20 + 2 * self.dims)  # piece rows and their float16 vectors
            + text
            + 16 * _PER_ROW_STRING  # the document's string columns
            + 512  # their content (names, hashes, extractor, warnings)
            + sections * (25 + _PER_ROW_STRING + 64)
            + pages * 24
            + (b - a) * (36 + 4 + 2 * self.dims)  # chunk rows, doc_len, float16 vectors
            + tokens * (8 + self.vocab_per_token)  # at most one posting (chunk, tf) per token
        )


def split_pack(
    src: Path, out: Path, max_bytes: int, progress: Progress | None = None
) -> SplitReport:
    """Write the members of ``src`` split under ``max_bytes`` each, named after ``out``."""
    progress = progress or Progress(enabled=False)
    with PackReader(src) as r:
        contents = PackContents(r)
        est = _Estimator(r, contents)
        set_id = hashlib.sha256(f"{r.manifest.hdf5_sha256}:{max_bytes}".encode()).hexdigest()[:16]
        queue = deque(range(contents.n))
        sizes = {row: 0 for row in queue}
        parts: list[tuple[Path, list[int], int]] = []
        rewritten = 0
        # every temp file is named after one temp path, so the next writer of ``out`` removes
        # what a killed split left (kbpack/pack/tempfiles.py)
        remove_stale_temp_files(out)
        tmp_base = temp_path_for(out)
        gguf = _model_file(r, tmp_base)

        def part(index: int) -> Path:
            return tmp_base.with_name(f"{tmp_base.name}.{index:03d}.part")

        try:
            while queue:
                budget = max_bytes - est.fixed()
                rows: list[int] = []
                used = 0
                while queue:
                    row = queue[0]
                    if not sizes[row]:
                        sizes[row] = est.document(row)
                    if rows and used + sizes[row] > budget:
                        break
                    rows.append(queue.popleft())
                    used += sizes[row]
                tmp = part(len(parts) + 1)
                size = _write_member(r, contents, rows, tmp, gguf, set_id, len(parts) + 1)
                while size > max_bytes:
                    if len(rows) == 1:
                        name = r.strings(F.DOC_NAME)[rows[0]]
                        raise UsageError(
                            f"{name}: alone makes a {size}-byte pack, over --split-size "
                            f"({max_bytes} bytes); give a larger --split-size"
                        )
                    keep = max(1, int(len(rows) * max_bytes / size * 0.95))
                    queue.extendleft(reversed(rows[keep:]))
                    rows = rows[:keep]
                    rewritten += 1
                    size = _write_member(r, contents, rows, tmp, gguf, set_id, len(parts) + 1)
                parts.append((tmp, rows, size))
                progress.update(
                    "members",
                    len(parts),
                    unit=f"members ({contents.n - len(queue)}/{contents.n} documents)",
                )
            progress.done()
        except BaseException:
            # the member being written (over the size, or interrupted) and those before it
            current = part(len(parts) + 1)
            for tmp in [current, *(p for p, _, _ in parts)]:
                tmp.unlink(missing_ok=True)
            raise
        finally:
            if gguf is not None:
                gguf.unlink(missing_ok=True)
    members = _publish(parts, out)
    report = SplitReport(members=members, set_id=set_id, max_bytes=max_bytes, rewritten=rewritten)
    stale = member_path(out, len(members) + 1)
    if stale.exists():
        report.notes.append(
            f"{stale} is left from an earlier set (not this one): remove it before copying NAME-*"
        )
    return report


def _model_file(r: PackReader, tmp: Path) -> Path | None:
    if not r.has_embedded_model:
        return None
    path = tmp.with_name(tmp.name + ".gguf")
    r.write_gguf(path)
    return path


def _write_member(
    r: PackReader,
    contents: PackContents,
    rows: list[int],
    path: Path,
    gguf: Path | None,
    set_id: str,
    index: int,
) -> int:
    model = r.model
    postings = PostingsBuilder(r.bm25_analyzer, headers=True)
    with PackWriter(
        path,
        model=model,
        dims=int(model[F.M_DIMS]) if model is not None else None,
        gguf=gguf,
        created=r.manifest.created,
        chunking=r.chunking,
        pieces=r.has_pieces,
        manifest_extra={"set": {"id": set_id, "index": index, "count": 0}},
        intermediate=True,  # renamed into place by _publish with the whole set
        ivf=True if r.has_ivf else None,  # each member indexes its own vectors (rebuilt)
    ) as w:
        s = r.search_defaults
        w.set_search_defaults(s["max_distance"], s.get("calibration"))
        for row in rows:
            copy_document(contents, row, w, postings)
        w.set_postings(postings.finish(w.n_chunks))
        return w.commit().size


def _publish(parts: list[tuple[Path, list[int], int]], out: Path) -> list[dict[str, Any]]:
    """Stamp the member count into each manifest, then publish the set all or nothing
    (kbpack/pack/set_publish.py: member 001 is renamed last and commits). On any failure the
    members not yet renamed are removed."""
    try:
        for tmp, _, _ in parts:
            header = read_header(tmp)
            manifest = header.manifest
            manifest.extra["set"]["count"] = len(parts)
            write_header(tmp, encode_header(manifest.to_json_bytes()))
        finals = publish_set([tmp for tmp, _, _ in parts], out)
    except BaseException:
        for tmp, _, _ in parts:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
        raise
    return [
        {"path": str(final), "bytes": size, "documents": len(rows)}
        for final, (_, rows, size) in zip(finals, parts, strict=True)
    ]


__all__ = ["FAT32_MAX", "SplitReport", "member_path", "parse_size", "set_findings", "split_pack"]


def build_set(
    opts: Any, max_bytes: int, progress: Progress | None = None, builder: Any = None
) -> tuple[Any, SplitReport]:
    """``kbpack build ... --split-size``: build one pack under a hidden name beside the output
    (with ``builder(opts, progress)``, default ``build.build``), split it into members, remove
    it. Returns (the build's report, the split's report)."""
    from dataclasses import replace

    from kbpack.ops.build import build

    builder = builder or build
    out = Path(opts.out)
    remove_stale_temp_files(out)
    tmp = temp_path_for(out)
    whole = tmp.with_name(tmp.name + ".unsplit")
    try:
        report = builder(replace(opts, out=whole), progress)
        split = split_pack(whole, out, max_bytes, progress)
    finally:
        whole.unlink(missing_ok=True)
    return report, split
