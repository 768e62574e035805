"""The safe pack reader.

Opening a pack: (1) read the kbpack header from the user block and check the magic, the format
version (a newer one is refused with "upgrade kbpack") and the exact file size -- before HDF5
parses a byte; (1b) on the first open on this machine, let HDF5 parse it in a sandboxed child
(``preflight.py``: a crash or a stall there refuses the pack in one line); (2) open HDF5
read-only with file locking off (read-only media work); (3) check the structure against the
spec's allowlist (links, objects, dtypes, filters, storage, sizes) reading metadata only. Data
is read lazily, column by column, when asked for; string rows nothing proved yet (the child
reads none) have their global heap references checked before HDF5 follows them
(``check_string_rows``). Every HDF5 error becomes a one-line ``PackError`` naming the file.

Hashing every byte is ``verify``'s job: the reader checks sizes, not digests, so that opening a
large pack for a query stays fast.

``PackReader`` opens and holds the file; the reads are its collaborators', over the one open
file and one memo: ``read_heap.HeapRowCheck`` (string rows' heap references),
``read_columns.ColumnReader`` (columns, rows, datasets, attributes), ``read_strings.StringReader``
(string rows, texts), ``read_meta.PackSettings`` (the stamped settings) and
``read_elements.ElementReader`` (vectors and the optional elements).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import numpy as np

from kbpack.errors import NotAPackError, PackError
from kbpack.pack import format as F
from kbpack.pack.checks import Checks, FileState, held_path
from kbpack.pack.ivf import IvfIndex
from kbpack.pack.manifest import Header, count_key_problems, read_header, refuse_non_regular
from kbpack.pack.preflight import Outcome, first_open
from kbpack.pack.read_checked import CheckedDataset, DamagedDataError, hdf5_errors
from kbpack.pack.read_columns import ColumnReader
from kbpack.pack.read_elements import ElementReader
from kbpack.pack.read_heap import HeapRowCheck
from kbpack.pack.read_meta import PackSettings
from kbpack.pack.read_part import OpenFile
from kbpack.pack.read_strings import StringReader
from kbpack.pack.structure import check_structure
from kbpack.pack.vector_scan import StoredRows


class PackReader:
    """A pack opened read-only. Use as a context manager or call ``close()``."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        check_structure_: bool = True,
        via: str | os.PathLike[str] | None = None,
    ) -> None:
        """``via``: a path naming a file already open and checked (``checks.held_path`` of
        its descriptor), so that the file read is the file checked; messages name ``path``."""
        self.path = Path(path)
        self.where = str(self.path)
        src = Path(via) if via is not None else self.path
        if not src.exists():
            raise NotAPackError(f"{self.path}: no such file; check the path")
        refuse_non_regular(self.path, src.stat().st_mode)  # a FIFO would block
        self.header: Header = read_header(src, where=self.path if via is not None else None)
        self.manifest = self.header.manifest
        problem = count_key_problems(self.manifest.counts)
        if problem:
            raise PackError(
                f"{self.path}: the manifest is damaged ({problem}); run kbpack verify "
                f"{self.path}, then copy the pack again"
            )
        actual = src.stat().st_size
        if actual != self.manifest.file_size:
            what = "truncated" if actual < self.manifest.file_size else "has bytes appended"
            raise PackError(
                f"{self.path}: {what}: {actual} bytes, the manifest says {self.manifest.file_size}; "
                "copy the pack again"
            )
        import h5py

        # HDF5 parses it in a sandboxed child first (preflight.py), which checks the structure
        # too: a state it found clean (now or before) is not checked twice. String rows the
        # child did not read are checked here as they are read (``check_string_rows``).
        proven = (
            first_open(src, self.header, actual, self.where)
            if check_structure_
            else Outcome(structure=False, rows=False)
        )
        checked = check_structure_ and proven.structure
        self.rows_checked_as_read = not proven.rows
        with hdf5_errors(self.where):
            self.h5 = h5py.File(src, "r", locking=False)
        self._cache: dict[str, Any] = {}  # every collaborator's memo, keys by kind and path
        self.fd, state = self._hold(actual)
        self.checks = Checks(state, structure=check_structure_)
        self._assemble()
        if check_structure_ and not checked:
            with hdf5_errors(self.where):
                findings = check_structure(
                    self.h5, self.manifest.counts, actual, self.manifest.format_version
                )
            if findings:
                self.close()
                more = (
                    f" (and {len(findings) - 1} more; run kbpack verify)"
                    if len(findings) > 1
                    else ""
                )
                raise PackError(f"{self.path}: refused: {findings[0]}{more}")

    def _hold(self, size: int) -> tuple[int | None, FileState]:
        """The descriptor HDF5 reads through and the state of the file behind it. The header
        was read by path before HDF5 opened the file: read again through HDF5's descriptor, it
        must be the same, or another file was swapped in while this one was being opened."""
        try:
            fd = int(self.h5.id.get_vfd_handle())
            st = os.fstat(fd)
        except Exception:  # another HDF5 driver: no descriptor to hold, the path's state
            return None, FileState.of(os.stat(self.path))
        again = os.pread(fd, F.USERBLOCK_SIZE, 0)
        same = again[16 : 16 + len(self.header.manifest_bytes)] == self.header.manifest_bytes
        if st.st_size != size or not same or again[:8] != F.MAGIC:
            self.close()
            raise PackError(
                f"{self.path}: the file changed while it was being opened; open it again"
            )
        return fd, FileState.of(st)

    @property
    def held_path(self) -> str | None:
        """A path naming the very file this reader holds open (for a check through it)."""
        return held_path(self.fd) if self.fd is not None else None

    def changed(self) -> FileState | None:
        """The state of the file now at the reader's path when it is not the held one (a swap,
        a write, a touch); None while the path still names the held file unchanged."""
        try:
            now = FileState.of(os.stat(self.path))
        except OSError:
            return None  # gone for now: keep serving the held file
        return None if now == self.checks.state else now

    def _assemble(self) -> None:
        """The collaborators that read and check the pack's parts, over the one open file."""
        file = OpenFile(self.h5, self.where, self.path, self.manifest, self._cache)
        self.heap_check = HeapRowCheck(file, self.fd, self.rows_checked_as_read)
        self.columns = ColumnReader(file, self.heap_check)
        self.string_rows = StringReader(file, self.columns, self.heap_check)
        self.settings = PackSettings(file, self.columns)
        self.elements = ElementReader(file, self.columns, self.string_rows, self.settings)

    # -- lifecycle ---------------------------------------------------------------------------
    def close(self) -> None:
        elements = getattr(self, "elements", None)
        if elements is not None:
            elements.close()
        with contextlib.suppress(Exception):
            self.h5.close()
        heap_check = getattr(self, "heap_check", None)
        if heap_check is not None:
            heap_check.close()

    def __enter__(self) -> PackReader:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- metadata (``read_meta.PackSettings``) ---------------------------------------------------
    @property
    def counts(self) -> dict[str, int]:
        return self.manifest.counts

    @property
    def format_version(self) -> int:
        return self.manifest.format_version

    def attrs(self, path: str) -> dict[str, Any]:
        return self.columns.attrs(path)

    @property
    def root_attrs(self) -> dict[str, Any]:
        return self.settings.root_attrs

    @property
    def pipeline_version(self) -> int:
        return self.settings.pipeline_version

    @property
    def has_vectors(self) -> bool:
        return self.settings.has_vectors

    @property
    def model(self) -> dict[str, Any] | None:
        return self.settings.model

    @property
    def has_embedded_model(self) -> bool:
        return self.settings.has_embedded_model

    @property
    def metadata_checksummed(self) -> bool:
        return self.settings.metadata_checksummed

    @property
    def search_defaults(self) -> dict[str, Any]:
        return self.settings.search_defaults

    @property
    def chunking(self) -> dict[str, Any]:
        return self.settings.chunking

    @property
    def bm25_analyzer(self) -> str | None:
        return self.settings.bm25_analyzer

    @property
    def bm25_params(self) -> tuple[float, float]:
        return self.settings.bm25_params

    # -- data (``read_columns``, ``read_strings``, ``read_heap``) ------------------------------
    def column(self, path: str) -> np.ndarray:
        return self.columns.column(path)

    def value(self, path: str, row: int) -> int:
        return self.columns.value(path, row)

    def dataset(self, path: str) -> Any:
        return self.columns.dataset(path)

    def strings(self, path: str) -> list[str]:
        return self.string_rows.strings(path)

    def string_at(self, path: str, row: int) -> str:
        return self.string_rows.string_at(path, row)

    def strings_unless_row_digests(self, path: str) -> None:
        self.string_rows.strings_unless_row_digests(path)

    def warnings(self, doc: int) -> list[str]:
        return self.string_rows.warnings(doc)

    def text(self, doc: int) -> str:
        return self.string_rows.text(doc)

    def forget_text(self, doc: int) -> None:
        self.string_rows.forget_text(doc)

    def check_string_rows(self, path: str, first: int = 0, last: int | None = None) -> None:
        self.heap_check.check(path, first, last)

    # -- vectors and optional elements (``read_elements``) -------------------------------------
    def bm25_dense(self) -> tuple[np.ndarray, CheckedDataset] | None:
        return self.elements.bm25_dense()

    def vectors(self) -> np.ndarray:
        return self.elements.vectors()

    def stored_rows(self, path: str) -> StoredRows:
        return self.elements.stored_rows(path)

    @property
    def has_pieces(self) -> bool:
        return self.elements.has_pieces

    def piece_vectors(self) -> np.ndarray:
        return self.elements.piece_vectors()

    @property
    def has_copies(self) -> bool:
        return self.elements.has_copies

    def copy_groups(self) -> np.ndarray | None:
        return self.elements.copy_groups()

    @property
    def has_links(self) -> bool:
        return self.elements.has_links

    def links_of(self, doc: int) -> list[tuple[int, int, int, int, str]]:
        return self.elements.links_of(doc)

    @property
    def has_ivf(self) -> bool:
        return self.elements.has_ivf

    def ivf_index(self) -> IvfIndex | None:
        return self.elements.ivf_index()

    def write_gguf(self, out: Path) -> None:
        self.elements.write_gguf(out)

    # -- a chunk's text and a section's headings -------------------------------------------------
    def chunk_content(self, chunk: int) -> str:
        doc = self.value(F.CHUNK_DOCUMENT, chunk)
        start = self.value(F.CHUNK_FROM, chunk)
        end = self.value(F.CHUNK_TO, chunk)
        return self.text(doc)[start:end]

    def section_path(self, section: int) -> list[str]:
        """Heading titles from level 1 down to ``section`` (the root is the document title)."""
        path: list[str] = []
        seen = 0
        s = section
        while s >= 0 and seen < 64:
            parent = self.value(F.SEC_PARENT, s)
            if parent < 0:
                break
            path.append(self.string_at(F.SEC_TITLE, s))
            s = parent
            seen += 1
        return path[::-1]


__all__ = ["CheckedDataset", "DamagedDataError", "PackReader", "hdf5_errors"]
