"""The atomic pack writer.

Documents stream in one at a time; their canonical text and vectors go to spool files beside
the output, everything else (a few integers per section, page and chunk) stays in memory. At
``commit`` every dataset is written contiguous in its final size, the HDF5 file is closed, the
bytes are hashed, the manifest is written into the user block, and the temp file is fsynced and
``os.replace``d onto the output path. Until then the output path is untouched: a killed build
leaves at most a hidden ``.NAME.tmp-*`` file beside it, never a partial pack.

The writer is a small state machine (open -> adding -> committed | aborted) and refuses calls
out of order. ``PackWriter`` runs it and the commit's stamping and publishing; its collaborators
hold the spools (``write_spools.Spools``), the rows (``write_tables.DocumentTables``) and write
the HDF5 file in the HDF5 child (``write_hdf5.PackFile``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kbpack.errors import KbpackError
from kbpack.pack import format as F
from kbpack.pack.copies import CopyFinder, CopyGroups
from kbpack.pack.ivf import IvfIndex, NotFiniteVector
from kbpack.pack.ivf import build_index as build_ivf
from kbpack.pack.ivf import wanted as ivf_wanted
from kbpack.pack.manifest import Manifest, encode_header, hash_hdf5_bytes, write_header
from kbpack.pack.preflight import remember_parsed
from kbpack.pack.tempfiles import remove_stale_temp_files, temp_path_for
from kbpack.pack.verified import remember_written
from kbpack.pack.write_child import (
    FULL,
    TOO_LARGE,
    ChildFailed,
    error_number,
    free_bytes,
    no_space_error,
    run_in_child,
    write_failure,
)
from kbpack.pack.write_hdf5 import PackFile
from kbpack.pack.write_spools import Spools
from kbpack.pack.write_tables import (
    ChunkLike,
    DocumentTables,
    PieceLike,
    PostingsLike,
    check_links,
    check_pieces,
)
from kbpack.runtime import interrupt
from kbpack.text.document import Document
from kbpack.version import __version__


@dataclass(frozen=True)
class CommitResult:
    path: Path
    size: int
    counts: dict[str, int]


def created_now() -> str:
    """The ``created`` stamp: now, or ``$SOURCE_DATE_EPOCH`` (reproducible builds: the golden
    packs are rebuilt byte for byte by ``make golden``)."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "")
    when = (
        dt.datetime.fromtimestamp(int(epoch), dt.UTC)
        if epoch.isdigit()
        else dt.datetime.now(dt.UTC)
    )
    return when.replace(microsecond=0).isoformat()


class PackWriter:
    """Write one pack. Use as a context manager: an exception (Ctrl-C included) aborts cleanly."""

    def __init__(
        self,
        out: Path,
        *,
        model: Mapping[str, Any] | None = None,
        dims: int | None = None,
        gguf: Path | None = None,
        created: str | None = None,
        chunking: Mapping[str, Any] | None = None,
        manifest_extra: Mapping[str, Any] | None = None,
        pieces: bool = False,
        intermediate: bool = False,
        copies: bool = True,
        ivf: bool | None = None,
        ivf_lists: int | None = None,
    ) -> None:
        """``ivf``: write the approximate index ``/ivf`` (True), not (False), or from
        ``kbpack.pack.ivf.MIN_CHUNKS`` chunks on (None); ``ivf_lists``: its lists (None: about
        2 sqrt(chunks)). ``intermediate``: ``out`` is a hidden file its caller renames later
        (split's members), so its commit is not reported as a published file after a late signal. ``copies``: find
        copies of one passage among the chunks and store the groups (``/copies``); False writes
        a pack as kbpack 0.2.0 did, without the element."""
        if (model is None) != (dims is None):
            raise ValueError(
                "a model identity and dims come together (or neither: a BM25-only pack)"
            )
        self.out = Path(out)
        if self.out.is_dir():
            raise KbpackError(f"{self.out}: is a directory; give a file name such as docs.kbpack")
        if not self.out.parent.exists():
            raise KbpackError(f"{self.out.parent}: output folder does not exist; create it first")
        self.model = dict(model) if model else None
        self.dims = dims
        self.gguf = gguf
        self.chunking = dict(chunking) if chunking else None
        self.manifest_extra = dict(manifest_extra) if manifest_extra else {}  # e.g. merged_from
        if pieces and not dims:
            raise ValueError("pieces are a vector level: a BM25-only pack has none")
        self.pieces = pieces
        self.intermediate = intermediate
        # every chunk's fingerprint, grouped at commit (kbpack/pack/copies.py); None: no /copies
        self._copy_finder = CopyFinder() if copies else None
        self._copy_groups: CopyGroups | None = None
        self.ivf, self.ivf_lists = ivf, ivf_lists
        self._ivf_index: IvfIndex | None = None  # built at commit from the vector spool
        self.created = created or created_now()
        self.stale_removed = remove_stale_temp_files(self.out)  # left by killed writers
        self.tmp = temp_path_for(self.out)
        self._state = "adding"
        # the text and vector spools beside the temp file (removed with it when this writer is
        # collected: a Ctrl-C before the caller's ``with`` reaches __enter__ skips abort())
        self._spools = Spools(self, self.tmp, vectors=bool(dims), pieces=pieces)
        self._tables = DocumentTables()  # every row but the text and vectors, in memory
        self._postings: PostingsLike | None = None
        self._search: dict[str, Any] = {F.SEARCH_MAX_DISTANCE: F.DEFAULT_MAX_DISTANCE}

    # -- state -----------------------------------------------------------------------------
    def _require(self, state: str, action: str) -> None:
        if self._state != state:
            raise RuntimeError(f"PackWriter: cannot {action} when {self._state}")

    def __enter__(self) -> PackWriter:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._state == "adding":
            self.abort()

    # -- adding ------------------------------------------------------------------------------
    def add_document(
        self,
        doc: Document,
        chunks: Sequence[ChunkLike] = (),
        vectors: np.ndarray | None = None,
        pieces: Sequence[PieceLike] = (),
        piece_vectors: np.ndarray | None = None,
    ) -> int:
        """Append one document with its sections, pages, chunks, (dense packs) vectors and
        (packs with pieces) the chunks' pieces and their vectors."""
        self._require("adding", "add a document")
        if doc.name in self._tables.names:
            raise KbpackError(f"{doc.name}: two inputs have the same document name")
        if doc.status not in F.STATUSES:
            raise ValueError(f"{doc.name}: status {doc.status!r}")
        if doc.status != "ok" and chunks:
            raise ValueError(f"{doc.name}: a {doc.status} document has no chunks")
        if self.dims:
            n = len(chunks)
            if vectors is None or vectors.shape != (n, self.dims):
                shape = None if vectors is None else vectors.shape
                raise ValueError(
                    f"{doc.name}: expected vectors of shape {(n, self.dims)}, got {shape}"
                )
        if pieces and not self.pieces:
            raise ValueError(f"{doc.name}: pieces given to a writer opened without pieces")
        if self.pieces and self.dims:
            n = len(pieces)
            if piece_vectors is None or piece_vectors.shape != (n, self.dims):
                shape = None if piece_vectors is None else piece_vectors.shape
                raise ValueError(
                    f"{doc.name}: expected piece vectors of shape {(n, self.dims)}, got {shape}"
                )
            check_pieces(doc, chunks, pieces)
        check_links(doc)
        text = doc.text.encode("utf-8")
        try:
            self._spools.write(text, vectors, len(chunks), piece_vectors, len(pieces))
        except OSError as e:
            self.abort()
            if error_number(e) in FULL + TOO_LARGE:
                raise no_space_error(self.out, self.estimated_bytes(), error_number(e)) from e
            raise
        spooled = self._spools.has_vectors and vectors is not None
        spooled_pieces = self._spools.has_pieces and piece_vectors is not None
        row = self._tables.add(doc, text, chunks, spooled, pieces, spooled_pieces)
        if self._copy_finder is not None:
            self._copy_finder.add(row, [doc.text[c.start : c.end] for c in chunks])
        return row

    def set_postings(self, postings: PostingsLike) -> None:
        self._require("adding", "set postings")
        if len(postings.doc_len) != self._tables.n_chunks:
            raise ValueError(
                f"postings cover {len(postings.doc_len)} chunks, the pack has {self._tables.n_chunks}"
            )
        self._postings = postings

    def set_search_defaults(
        self, max_distance: float, calibration: Mapping[str, Any] | None = None
    ) -> None:
        self._require("adding", "set search defaults")
        self._search = {F.SEARCH_MAX_DISTANCE: float(max_distance)}
        if calibration is not None:
            self._search[F.SEARCH_CALIBRATION] = json.dumps(dict(calibration), sort_keys=True)

    @property
    def n_chunks(self) -> int:
        return self._tables.n_chunks

    def _model_bytes(self) -> int:
        return self.gguf.stat().st_size if (self.gguf and self.model) else 0

    def _incompressible_bytes(self) -> int:
        """What the pack surely takes: text, vectors and model are stored uncompressed."""
        return self._tables.incompressible_bytes(self.dims, self._model_bytes())

    def estimated_bytes(self) -> int:
        """About how many bytes the pack will take (``DocumentTables.estimated_bytes``)."""
        return self._tables.estimated_bytes(self._postings, self.dims, self._model_bytes())

    # -- finishing ---------------------------------------------------------------------------
    def commit(self) -> CommitResult:
        """Write everything, hash it, stamp the manifest, fsync and atomically replace the output."""
        self._require("adding", "commit")
        if self._postings is None:
            raise RuntimeError("PackWriter: set_postings() before commit()")
        needed = self.estimated_bytes()
        try:
            self._spools.close()
            if self._copy_finder is not None:  # here, not in the HDF5 child: errors surface
                self._copy_groups = self._copy_finder.groups()
            if self.dims and ivf_wanted(self._tables.n_vectors, self.ivf):
                self._ivf_index = self._build_ivf()
            free = free_bytes(self.out.parent)
            if free is not None and self._incompressible_bytes() > free:
                spools = self._incompressible_bytes()  # the spools hold the same bytes
                raise no_space_error(self.out, needed, spools=spools)  # before HDF5 starts
            # HDF5 in a child: a write that fails inside HDF5 can crash the process (SIGSEGV
            # on a full disk); then only the child dies and this process cleans up
            elements, counts = run_in_child(self._write_hdf5)
            self._ivf_index = None  # (its codes map the spool, removed below)
            size, sha = hash_hdf5_bytes(self.tmp)
            manifest = Manifest(
                format_version=F.FORMAT_VERSION,
                file_size=size,
                hdf5_sha256=sha,
                counts=counts,
                elements=elements,
                kbpack_version=__version__,
                created=self.created,
                extra=self.manifest_extra,
            )
            write_header(self.tmp, encode_header(manifest.to_json_bytes()))
            _fsync_file(self.tmp)
            interrupt.check()  # a Ctrl-C swallowed by a finalizer must not publish the pack
            # a signal from here on is raised after the rename is durable and recorded, so the
            # CLI can say the new pack is complete (a signal here ended with rc -15 in 0.1)
            with interrupt.uninterruptible():
                os.replace(self.tmp, self.out)
                if not self.intermediate:
                    interrupt.published(self.out)
                self._state = "committed"
                _fsync_dir(self.out.parent)
                self._cleanup_spools()
        except ChildFailed as e:
            free = free_bytes(self.out.parent)
            written = self.tmp.stat().st_size if self.tmp.exists() else 0
            self.abort()
            spools = self._incompressible_bytes()
            raise write_failure(self.out, e, needed, free, spools, written) from None
        except OSError as e:
            self.abort()
            if error_number(e) in FULL + TOO_LARGE:
                spools = self._incompressible_bytes()
                raise no_space_error(self.out, needed, error_number(e), spools) from e
            raise
        except BaseException:
            self.abort()  # (nothing to undo once committed: a late signal is raised here)
            raise
        if not self.intermediate:
            # its own bytes: its first open needs no pre-flight, and query no verify hint
            remember_parsed(self.out)
            remember_written(self.out)
        return CommitResult(self.out, size, counts)

    def _build_ivf(self) -> IvfIndex:
        """The IVF index of the spooled vectors (``kbpack/pack/ivf.py``), read memory-mapped;
        its codes a ``CodeSource`` over the spool (read again while the file is written)."""
        assert self.dims
        vectors = np.memmap(
            self._spools.vectors, dtype="<f2", mode="r", shape=(self._tables.n_vectors, self.dims)
        )
        try:  # the codes are quantised from the spool as the HDF5 child writes them
            return build_ivf(vectors, self.ivf_lists, stream=True)
        except NotFiniteVector as e:  # (from a damaged source pack: embedders check theirs)
            raise KbpackError(
                f"{self.out}: {e} among the vectors to write; run kbpack verify on the source packs"
            ) from None
        except ValueError as e:
            raise KbpackError(f"{self.out}: {e}") from None
        finally:
            del vectors

    def abort(self) -> None:
        """Remove the temp files; the output path is left as it was."""
        if self._state in ("aborted", "committed"):
            return
        self._state = "aborted"
        self._spools.close_quietly()
        with contextlib.suppress(OSError):
            self.tmp.unlink(missing_ok=True)
        self._cleanup_spools()

    def _cleanup_spools(self) -> None:
        self._spools.remove()

    def _write_hdf5(self) -> tuple[dict[str, str], dict[str, int]]:
        """The HDF5 file (run in the child: ``commit``); the manifest's digests and counts."""
        assert self._postings is not None
        return PackFile(
            self.tmp,
            model=self.model,
            dims=self.dims,
            gguf=self.gguf,
            chunking=self.chunking,
            pieces=self.pieces,
            created=self.created,
            tables=self._tables,
            spools=self._spools,
            postings=self._postings,
            search=self._search,
            copies=self._copy_groups,
            ivf=self._ivf_index,
        ).write()


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):  # not every filesystem lets a directory be fsynced
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


__all__ = ["CommitResult", "PackWriter"]
