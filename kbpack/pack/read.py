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
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
from collections.abc import Iterator
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from kbpack.errors import KbpackError, NotAPackError, PackError, describe
from kbpack.pack import format as F
from kbpack.pack.checks import Checks, FileState, held_path
from kbpack.pack.digest import attrs_digest, numeric_digest, plain, row_digest, strings_digest
from kbpack.pack.global_heap import HeapReferences, string_column
from kbpack.pack.ivf import CodeRows, IvfIndex, check_codes, check_index
from kbpack.pack.manifest import Header, count_key_problems, read_header, refuse_non_regular
from kbpack.pack.preflight import Outcome, first_open
from kbpack.pack.structure import check_structure
from kbpack.pack.vector_scan import StoredRows


@contextlib.contextmanager
def hdf5_errors(where: str, element: str | None = None) -> Iterator[None]:
    """Turn whatever HDF5/h5py raises on a damaged or hostile file into one PackError line.

    With ``element`` (a data read), the line names it: a Fletcher-32 mismatch or a deflate
    error means those bytes were damaged after writing, never that the data is what it says.
    """
    try:
        yield
    except KbpackError:
        raise
    except (
        OSError,
        RuntimeError,
        KeyError,
        TypeError,
        ValueError,
        IndexError,
        AttributeError,
        SystemError,  # h5py's lock can surface a crafted file's error this way (CVE-2024-32618)
    ) as e:
        if element is not None:
            raise DamagedDataError(where, element, describe(e)) from e
        if "checksum" in str(e):  # HDF5's own metadata (object headers, indexes, heaps)
            raise PackError(
                f"{where}: damaged: HDF5 metadata fails its checksum ({describe(e)}); "
                f"run kbpack verify {where}, then copy the pack again"
            ) from e
        raise PackError(f"{where}: HDF5 data cannot be read ({describe(e)})") from e


class DamagedDataError(PackError):
    """Data of one element failed its checksum, its decompression or its digest."""

    def __init__(self, where: str, element: str, why: str) -> None:
        super().__init__(
            f"{where}: {element} is damaged ({why}); run kbpack verify {where}, "
            "then copy the pack again"
        )
        self.element = element


class CheckedDataset:
    """An h5py dataset whose every read turns a damaged chunk into ``DamagedDataError``.

    Search slices postings and vectors lazily, long after the pack was opened; this keeps the
    pack and the element in the message wherever the read happens.
    """

    def __init__(
        self,
        ds: Any,
        where: str,
        element: str,
        digest: str | None = None,
        rows_check: Any = None,
    ) -> None:
        self._ds = ds
        # string rows: called with (first, last) before HDF5 follows their heap references
        self._rows_check = rows_check
        self._where = where
        self.element = element
        self.digest = digest if ds.dtype.kind != "O" else None  # numeric digests only
        self.shape: tuple[int, ...] = ds.shape
        self.dtype: np.dtype = ds.dtype
        # rows per HDF5 chunk of a filtered dataset (None: nothing to check, see _check_masks)
        self._rows: int | None = ds.chunks[0] if ds.chunks and self.shape[0] else None
        self._masks_ok: set[int] = set()  # chunks whose filter mask was checked

    def __len__(self) -> int:
        return int(self.shape[0])

    def __getitem__(self, key: Any) -> Any:
        # (isinstance first: a key may be a numpy index array, whose == is elementwise)
        whole = (isinstance(key, tuple) and key == ()) or key is Ellipsis
        whole = whole or (isinstance(key, slice) and key == slice(None))
        if not (whole and self.digest is not None):
            self._check_masks(key)
        if self._rows_check is not None:
            self._rows_check(*_rows_of(key, int(self.shape[0])))
        with hdf5_errors(self._where, self.element):
            out = self._ds[key]
        if whole and self.digest is not None and numeric_digest(np.asarray(out)) != self.digest:
            # a whole read (BM25's baked index) is checked like PackReader.column
            raise DamagedDataError(self._where, self.element, "differs from the manifest's digest")
        return out

    def _check_masks(self, key: Any) -> None:
        """Refuse a part read from a chunk whose filter mask says a filter was skipped.

        HDF5 keeps, per chunk, a mask of the filters *not* applied, in the chunk index where no
        checksum reaches. A writer of packs never skips one, so a set bit is damage: one flipped
        bit there makes HDF5 skip the unshuffle or the inflate (and the Fletcher-32 check with
        it) and return stored bytes as values -- a query's postings slice answered wrong
        citations silently (found by tests/search/test_filter_mask.py). Whole reads are checked by
        the digest instead. A few microseconds per chunk, once per chunk.

        The mask comes from ``read_direct_chunk`` (a B-tree lookup: 2.5-5 us wherever the chunk
        is), not ``get_chunk_info_by_coord``, which HDF5 answers by walking the chunk index
        from its start: 2 us for the first chunk, 37 us for the last of 2,052 (100k chunks'
        postings), 102 us for the last of 5,126 (1M) -- up to ~40 of them per query.
        """
        rows = self._rows
        if rows is None:
            return
        first, last = _rows_of(key, int(self.shape[0]))
        if first >= last:
            return
        tail = (0,) * (len(self.shape) - 1)
        for c in range(first // rows, (last - 1) // rows + 1):
            if c in self._masks_ok:
                continue
            with hdf5_errors(self._where, self.element):
                mask, _ = self._ds.id.read_direct_chunk((c * rows, *tail))
            if mask:
                raise DamagedDataError(
                    self._where,
                    self.element,
                    f"chunk at row {c * rows}: its filter mask {mask:#x} skips a filter",
                )
            self._masks_ok.add(c)

    def read_spans(self, spans: list[tuple[int, int]]) -> list[np.ndarray]:
        """Rows ``lo:hi`` of a 1-D dataset for each ``(lo, hi)`` of ``spans`` (disjoint), in one
        HDF5 read: a query's postings are ~20 slices, and each h5py read costs ~50-200 us of
        selection and call overhead before any chunk is decompressed."""
        import h5py

        order = sorted(range(len(spans)), key=lambda i: spans[i][0])
        sizes = [max(0, hi - lo) for lo, hi in spans]
        for lo, hi in spans:  # a part read: no digest covers it (see _check_masks)
            self._check_masks(slice(lo, hi))
            if self._rows_check is not None:
                self._rows_check(lo, hi)
        out = np.empty(sum(sizes), dtype=self.dtype)
        if len(out):
            with hdf5_errors(self._where, self.element):
                space = self._ds.id.get_space()
                space.select_none()
                for i in order:
                    if sizes[i]:
                        lo = spans[i][0]
                        space.select_hyperslab((lo,), (sizes[i],), op=h5py.h5s.SELECT_OR)
                self._ds.id.read(h5py.h5s.create_simple((len(out),)), space, out)
        # HDF5 fills a selection in file order: the spans come back sorted by start
        parts: list[np.ndarray] = [out[:0]] * len(spans)
        at = 0
        for i in order:
            parts[i] = out[at : at + sizes[i]]
            at += sizes[i]
        return parts

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        arr = np.asarray(self[()])
        return arr if dtype is None else arr.astype(dtype)


def _rows_of(key: Any, n: int) -> tuple[int, int]:
    """``[first, last)`` rows of axis 0 that ``key`` reads (all rows when it cannot tell)."""
    k = key[0] if isinstance(key, tuple) and key else key
    if isinstance(k, slice):
        start, stop, step = k.indices(n)
        return (start, stop) if step > 0 else (0, n)
    if isinstance(k, (int, np.integer)):
        i = int(k) + (n if int(k) < 0 else 0)
        return i, i + 1
    if isinstance(k, np.ndarray) and k.dtype.kind in "iu" and k.size:
        return int(k.min()), int(k.max()) + 1
    return 0, n


def _read_whole(h5: Any, path: str) -> np.ndarray:
    """A whole numeric dataset through h5py's low-level API: opening it as an ``h5py.Dataset``
    (a File and a Dataset object, weak references, property lists) costs ~75 us, the low-level
    open ~14 us; a BM25 query of a process reads five such columns."""
    from h5py import h5d, h5s

    ds = h5d.open(h5.id, path.encode("utf-8"))
    if ds.dtype.kind not in "biuf":  # strings and the like: h5py's conversions
        out: np.ndarray = h5[path][()]
        return out
    arr = np.empty(ds.shape, dtype=ds.dtype)
    if arr.size:
        ds.read(h5s.ALL, h5s.ALL, arr)
    return arr


# Columns of row numbers: the count whose rows they point at, and the lowest value allowed
# (-1: a section's parent, for a document's root section).
ROW_REFERENCES: dict[str, tuple[str, int]] = {
    F.SEC_DOCUMENT: ("documents", 0),
    F.SEC_PARENT: ("sections", -1),
    F.PAGE_DOCUMENT: ("documents", 0),
    F.CHUNK_DOCUMENT: ("documents", 0),
    F.CHUNK_SECTION: ("sections", 0),
    F.PIECE_CHUNK: ("chunks", 0),
    F.BM25_CHUNK: ("chunks", 0),
    F.BM25_DENSE_TERMS: ("terms", 0),
    F.LINK_DOCUMENT: ("documents", 0),
    F.LINK_TARGET: ("documents", 0),
}


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
        self._heap: HeapReferences | None = None
        self._own_fd: int | None = None
        with hdf5_errors(self.where):
            self.h5 = h5py.File(src, "r", locking=False)
        self._cache: dict[str, Any] = {}
        self._stored: dict[str, StoredRows] = {}
        self.fd, state = self._hold(actual)
        self.checks = Checks(state, structure=check_structure_)
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

    # -- lifecycle ---------------------------------------------------------------------------
    def close(self) -> None:
        stored = getattr(self, "_stored", {})
        for rows in stored.values():
            rows.close()
        stored.clear()
        ivf = getattr(self, "_cache", {}).get("ivf")
        if ivf is not None and isinstance(ivf.codes, CodeRows):
            ivf.codes.close()  # its map of the file
        with contextlib.suppress(Exception):
            self.h5.close()
        own = getattr(self, "_own_fd", None)
        if own is not None:
            with contextlib.suppress(OSError):
                os.close(own)
            self._own_fd = None

    def __enter__(self) -> PackReader:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- metadata ----------------------------------------------------------------------------
    @property
    def counts(self) -> dict[str, int]:
        return self.manifest.counts

    @property
    def format_version(self) -> int:
        return self.manifest.format_version

    def attrs(self, path: str) -> dict[str, Any]:
        """An object's attributes, checked against the manifest's digest (a flipped bit in
        ``/search@max_distance`` would otherwise move the refusal threshold silently)."""
        key = f"attrs:{path}"
        if key not in self._cache:
            with hdf5_errors(self.where):
                if path not in self.h5:
                    return {}
                raw = dict(self.h5[path].attrs.items())
            want = self.manifest.elements.get("/@attrs" if path == "/" else path + "@attrs")
            try:
                actual = attrs_digest(raw)
            # a damaged UTF-8 string attribute decodes to surrogates; a damaged name comes
            # back as bytes, which cannot be sorted beside the str names
            except (UnicodeError, TypeError):
                actual = ""
            if want is not None and actual != want:
                raise DamagedDataError(
                    self.where, path, "its attributes differ from the manifest's digest"
                )
            self._cache[key] = {k: plain(v) for k, v in raw.items()}
        return dict(self._cache[key])

    @cached_property
    def root_attrs(self) -> dict[str, Any]:
        return self.attrs("/")

    @cached_property
    def pipeline_version(self) -> int:
        """The root's ``kbpack:pipeline_version`` (0 when absent). A value that is not a whole
        number is damage in one line, not a ValueError where inspect's staleness report or
        migrate compares it (found by enumerating the golden pack's attributes, bench/fuzz.py
        lane)."""
        value = self.root_attrs.get(F.R_PIPELINE_VERSION, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise DamagedDataError(
                self.where, "/", f"{F.R_PIPELINE_VERSION} is {value!r}, not a whole number"
            )
        return value

    @property
    def has_vectors(self) -> bool:
        return self.root_attrs.get(F.R_VECTORS) == "dense"

    @cached_property
    def model(self) -> dict[str, Any] | None:
        """The model identity stamp, or None for a BM25-only pack."""
        if not self.has_vectors:
            return None
        a = self.attrs(F.MODEL)
        missing = [k for k in F.MODEL_ATTRS if k not in a]
        if missing:
            raise PackError(
                f"{self.path}: /model lacks attribute {missing[0]!r}; run kbpack verify"
            )
        stamp = {k: a[k] for k in F.MODEL_ATTRS}
        if not F.is_sha256_hex(stamp[F.M_SHA256]):
            # a pack's value must never become part of a path (the model cache is keyed by
            # it): anything but 64 lowercase hex digits is refused here, at the one read
            raise PackError(
                f"{self.path}: /model attribute 'sha256' is not 64 lowercase hex digits; "
                "run kbpack verify"
            )
        for k in F.MODEL_PREFIX_ATTRS:  # absent in packs written before prefixes: none
            value = a.get(k, "")
            if not isinstance(value, str):
                raise PackError(
                    f"{self.path}: /model attribute {k!r} is not a string; run kbpack verify"
                )
            stamp[k] = value
        return stamp

    @property
    def has_embedded_model(self) -> bool:
        return F.MODEL_GGUF in self.h5

    @cached_property
    def metadata_checksummed(self) -> bool:
        """Whether HDF5's own structures carry checksums (spec §1): a superblock of version 2
        or later comes with version-2 object headers and checksummed indexes; kbpack writes
        version 3 (libver 'v110'), packs of kbpack 0.2.0 version 0."""
        with hdf5_errors(self.where):
            return int(self.h5.id.get_create_plist().get_version()[0]) >= 2

    @cached_property
    def search_defaults(self) -> dict[str, Any]:
        a = self.attrs(F.SEARCH)
        raw = a.get(F.SEARCH_MAX_DISTANCE, F.DEFAULT_MAX_DISTANCE)
        # digests rewritten to match, an array or a string is as consistent as a float
        # (bench/fuzz.py packs 41:6029: [0] was a TypeError in inspect and query)
        if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw):
            raise DamagedDataError(
                self.where, F.SEARCH, f"its {F.SEARCH_MAX_DISTANCE} is not a finite number"
            )
        out: dict[str, Any] = {"max_distance": float(raw)}
        if F.SEARCH_CALIBRATION in a:
            with contextlib.suppress(ValueError):
                out["calibration"] = json.loads(a[F.SEARCH_CALIBRATION])
        return out

    @cached_property
    def chunking(self) -> dict[str, Any]:
        """The chunking settings the pack was built with (window, max_chars, overlap); packs
        written before they were recorded read as the defaults of that time."""
        raw = self.attrs(F.CHUNKS).get(F.CHUNKING)
        out: dict[str, Any] = {"window": None, "max_chars": None, "overlap": 0}
        if isinstance(raw, str):
            with contextlib.suppress(ValueError, TypeError):
                got = json.loads(raw)
                for key in out:
                    if isinstance(got.get(key), int) and not isinstance(got.get(key), bool):
                        out[key] = got[key]
        return out

    @cached_property
    def bm25_analyzer(self) -> str | None:
        """The ``/bm25`` analyzer attribute; None (absent) means the plain tokenizer."""
        from kbpack.text.analyze import ANALYZERS

        name = self.attrs(F.BM25).get(F.BM25_ANALYZER)
        if name is None:
            return None
        if str(name) not in ANALYZERS:
            raise PackError(
                f"{self.path}: /bm25 analyzer {str(name)!r} is unknown to this kbpack "
                f"(it knows {', '.join(ANALYZERS)}); upgrade kbpack or rebuild the pack"
            )
        return str(name)

    @cached_property
    def bm25_params(self) -> tuple[float, float]:
        a = self.attrs(F.BM25)
        out = []
        for name, default in ((F.BM25_K1, 1.2), (F.BM25_B, 0.75)):
            value = a.get(name, default)
            # a damaged attribute (a list, a string, NaN) is one line, not a TypeError later
            if isinstance(value, bool) or not isinstance(value, int | float | np.number):
                raise DamagedDataError(self.where, F.BM25, f"attribute {name} is not a number")
            if not np.isfinite(value):
                raise DamagedDataError(self.where, F.BM25, f"attribute {name} is not finite")
            out.append(float(value))
        # verify's rule (bm25-params): outside it length norms go negative and so do scores
        # (bench/fuzz.py packs 71:17303, b = 256: an internal error in hybrid fusion)
        if not (out[0] > 0 and 0 <= out[1] <= 1):
            raise DamagedDataError(
                self.where, F.BM25, f"k1={out[0]!r}, b={out[1]!r}: need k1 > 0, 0 <= b <= 1"
            )
        return out[0], out[1]

    # -- data --------------------------------------------------------------------------------
    def column(self, path: str) -> np.ndarray:
        """A whole numeric dataset, read once, checked against the manifest's digest, cached.

        Fletcher-32 catches damaged data; the digest also catches damage to HDF5's own
        bookkeeping, such as a flipped bit in a chunk's filter mask that makes HDF5 skip
        decompression and return the compressed bytes as values.
        """
        if path not in self._cache:
            el = F.ELEMENT_BY_PATH.get(path)
            if el is not None and el.dtype == "str":  # h5py follows its rows' heap references
                self.check_string_rows(path)
            with hdf5_errors(self.where, path):
                read = _read_whole(self.h5, path)
            want = self.manifest.elements.get(path)
            if want is not None and numeric_digest(read) != want:
                raise DamagedDataError(self.where, path, "differs from the manifest's digest")
            self._check_references(path, read)
            self._cache[path] = read
        arr: np.ndarray = self._cache[path]
        return arr

    def value(self, path: str, row: int) -> int:
        """One row of an integer column: from the column when it was read whole (digest-checked),
        else by a part read (filter mask + Fletcher-32, spec §1.2). A citation at 1M chunks so
        reads the HDF5 chunks of its own rows, not 8 MB of offsets inflated and hashed."""
        whole = self._cache.get(path)
        if whole is not None:
            return int(whole[row])
        key = f"{path}#{row}"
        if key not in self._cache:
            ds = self.dataset(path)
            if not 0 <= row < len(ds):
                raise DamagedDataError(self.where, path, f"row {row} is outside the column")
            value = np.asarray(ds[row : row + 1])
            self._check_references(path, value, first_row=row)
            self._cache[key] = int(value[0])
        out: int = self._cache[key]
        return out

    def _check_references(self, path: str, arr: np.ndarray, first_row: int = 0) -> None:
        """A column of row numbers must point at rows that exist: a pack whose digests were
        rewritten to match its damage (only verify's invariants would say so) must stop a
        command in one line, not in an IndexError where the row is used."""
        ref = ROW_REFERENCES.get(path)
        if ref is None or arr.size == 0 or arr.dtype.kind not in "iu":
            return
        count, lowest = ref
        n = int(self.counts.get(count, 0))
        bad = np.flatnonzero((arr < lowest) | (arr >= n))
        if bad.size:
            row = int(bad[0])
            raise DamagedDataError(
                self.where,
                path,
                f"row {first_row + row} points at {count} row {int(arr[row])}, "
                f"outside {lowest}..{n - 1}",
            )

    def strings(self, path: str) -> list[str]:
        """A whole string dataset, read once, checked against the manifest's digest, cached.

        String bytes sit in HDF5's global heap, where no checksum filter reaches: the digest is
        what keeps a flipped bit in a title or a name from being shown as if it were written.
        """
        if path not in self._cache:
            self.check_string_rows(path)
            with hdf5_errors(self.where, path):
                raw = self.h5[path][()]
            items = [x if isinstance(x, bytes) else str(x).encode("utf-8") for x in raw]
            want = self.manifest.elements.get(path)
            if want is not None and strings_digest(items) != want:
                raise DamagedDataError(self.where, path, "differs from the manifest's digest")
            try:
                self._cache[path] = [b.decode("utf-8") for b in items]
            except UnicodeDecodeError as e:  # only reachable without a digest to compare
                raise DamagedDataError(self.where, path, "holds invalid UTF-8") from e
        out: list[str] = self._cache[path]
        return out

    def string_at(self, path: str, row: int) -> str:
        """One row of a string dataset, checked: against its stored row digest where the pack
        has ``/row_digests`` for ``path`` (spec §3.11; a citation then reads one title and one
        HDF5 chunk of digests, not the 673k titles of a 1M-chunk pack), else through the whole
        column's digest."""
        if path in self._cache:
            cached: list[str] = self._cache[path]
            return cached[row]
        digest_path = self._row_digest_path(path)
        if digest_path is None:
            return self.strings(path)[row]
        key = f"{path}:{row}"
        if key not in self._cache:
            want = self.value(digest_path, row)  # also refuses a row outside the column
            self.check_string_rows(path, row, row + 1)
            with hdf5_errors(self.where, path):
                raw = self.h5[path][row]
            data = raw if isinstance(raw, bytes) else str(raw).encode("utf-8")
            if row_digest(data) != want:
                raise DamagedDataError(self.where, path, f"row {row} differs from its row digest")
            try:
                self._cache[key] = data.decode("utf-8")
            except UnicodeDecodeError as e:  # a row digest written over invalid bytes
                raise DamagedDataError(self.where, path, f"row {row} is not UTF-8") from e
        out: str = self._cache[key]
        return out

    def strings_unless_row_digests(self, path: str) -> None:
        """Read (and cache) the whole column where ``string_at(path, row)`` will need it: a
        pack without row digests for ``path`` (a query reads this ahead while the model loads)."""
        if self._row_digest_path(path) is None:
            self.strings(path)

    def _row_digest_path(self, path: str) -> str | None:
        """The element holding ``path``'s row digests, or None: none for it, or a pack written
        before them."""
        digest_path = F.ROW_DIGEST_OF.get(path)
        if digest_path is None:
            return None
        key = f"rows-present:{digest_path}"
        if key not in self._cache:
            with hdf5_errors(self.where, digest_path):
                self._cache[key] = digest_path in self.h5
        return digest_path if self._cache[key] else None

    def warnings(self, doc: int) -> list[str]:
        """One document's warnings: its ``/documents/warnings`` row, a JSON array of strings.

        A row that is not one (verify's ``warnings-invalid``) is damage in one line naming the
        element and row, not a JSONDecodeError: bench/fuzz.py found export stopping on a row
        poked in a pack whose digests were rewritten to match.
        """
        raw = self.strings(F.DOC_WARNINGS)[doc]
        try:
            value = json.loads(raw)
        except ValueError:
            value = None
        if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
            raise DamagedDataError(
                self.where, F.DOC_WARNINGS, f"row {doc} is not a JSON array of strings"
            )
        return value

    def bm25_dense(self) -> tuple[np.ndarray, CheckedDataset] | None:
        """``/bm25/dense_terms`` (read whole, digest-checked) and ``/bm25/dense_tf`` (sliced per
        query term), spec §3.7.1; None when the pack lacks them (packs written before them)."""
        with hdf5_errors(self.where):
            present = F.BM25_DENSE_TERMS in self.h5 and F.BM25_DENSE_TF in self.h5
        if not present:
            return None
        rows = self.column(F.BM25_DENSE_TERMS).astype(np.int64)
        tf = self.dataset(F.BM25_DENSE_TF)
        n = int(self.counts.get("chunks", 0))
        if len(rows) > 1 and bool((np.diff(rows) <= 0).any()):
            raise DamagedDataError(self.where, F.BM25_DENSE_TERMS, "rows are not ascending")
        if len(tf) != len(rows) * n:
            raise DamagedDataError(
                self.where, F.BM25_DENSE_TF, f"{len(tf)} rows, not {len(rows)} terms x {n} chunks"
            )
        return rows, tf

    def dataset(self, path: str) -> Any:
        """The dataset (a ``CheckedDataset``: sliced like h5py's, and a damaged read names the
        element), for reading parts without reading it all."""
        # one per path: a citation's part reads (``value``) and a restore's row reads come back
        # to the same dataset, and each HDF5 chunk's filter mask is then checked once
        key = f"dataset:{path}"
        if key not in self._cache:
            with hdf5_errors(self.where):
                ds = self.h5[path]
                check = None
                if ds.dtype.kind == "O" and self.rows_checked_as_read:
                    check = lambda first, last: self.check_string_rows(path, first, last)  # noqa: E731
                self._cache[key] = CheckedDataset(
                    ds, self.where, path, self.manifest.elements.get(path), rows_check=check
                )
        return self._cache[key]

    # -- string rows' global heap references ---------------------------------------------------
    def check_string_rows(self, path: str, first: int = 0, last: int | None = None) -> None:
        """Refuse, in one line naming the element and the row, a string row of ``path`` in
        ``first:last`` (default: all) whose global heap reference HDF5 must not follow: a
        malformed collection (HDF5 would stall or overrun walking it), an object the collection
        lacks, or a length that is not the object's (HDF5 would copy more than it allocated).

        Only for a state whose rows nothing proved yet (``rows_checked_as_read``: the first
        open's child reads the attributes, not the rows); a pack written here, verified here, or
        once read whole by the child needs none. Every in-process read of string rows calls
        this first (``strings``, ``string_at``, ``text``, ``dataset``; migrations that read
        ``h5`` directly too). Rows are read from the file as HDF5 will read them (16 bytes
        each, contiguous), each collection walked once per reader: a citation checks its own
        rows, ~the HDF5 read's own cost."""
        if not self.rows_checked_as_read or self._cache.get(f"rows-checked:{path}"):
            return
        offset, rows = self._string_column(path)
        stop = rows if last is None else min(rows, last)
        start = max(0, first)
        if start >= stop:
            return
        heap = self._heap_references()
        try:
            found = heap.problem(heap.rows(offset, start, stop))
        except (OSError, ValueError) as e:
            raise DamagedDataError(self.where, path, describe(e)) from e
        if found is not None:
            at, why = found
            raise DamagedDataError(self.where, path, f"row {start + at}: {why}")
        if start == 0 and stop == rows:
            self._cache[f"rows-checked:{path}"] = True

    def _string_column(self, path: str) -> tuple[int, int]:
        key = f"string-column:{path}"
        if key not in self._cache:
            with hdf5_errors(self.where, path):
                sizes = self.h5.id.get_create_plist().get_sizes()
                got = string_column(self.h5[path].id, sizes, self.manifest.file_size)
            if isinstance(got, str):  # the child read such a column whole: not this state
                raise DamagedDataError(
                    self.where, path, f"its rows are not stored as kbpack writes them ({got})"
                )
            self._cache[key] = got
        out: tuple[int, int] = self._cache[key]
        return out

    def _heap_references(self) -> HeapReferences:
        if self._heap is None:
            fd = self.fd
            if fd is None:  # another HDF5 driver: read the file through a descriptor of ours
                fd = self._own_fd = os.open(self.held_path or self.path, os.O_RDONLY)
            with hdf5_errors(self.where):
                base = int(self.h5.id.get_create_plist().get_userblock())
            self._heap = HeapReferences(fd, self.manifest.file_size, base)
        return self._heap

    def text(self, doc: int) -> str:
        """Canonical text of one document (one element read), checked against its SHA-256.

        The text's bytes live in HDF5's global heap, outside any filter's reach, so the stored
        ``text_sha256`` is what catches a damaged text before it is quoted.
        """
        key = f"text:{doc}"
        if key not in self._cache:
            self.check_string_rows(F.DOC_TEXT, doc, doc + 1)
            with hdf5_errors(self.where, F.DOC_TEXT):
                raw = self.h5[F.DOC_TEXT][doc]
            data = raw if isinstance(raw, bytes) else str(raw).encode("utf-8")
            want = self.string_at(F.DOC_TEXT_SHA256, doc)
            if hashlib.sha256(data).hexdigest() != want:
                raise DamagedDataError(
                    self.where, F.DOC_TEXT, f"row {doc} differs from its text_sha256"
                )
            self._cache[key] = data.decode("utf-8")
        out: str = self._cache[key]
        return out

    def forget_text(self, doc: int) -> None:
        """Drop one document's cached text (a streaming reader such as merge keeps none)."""
        self._cache.pop(f"text:{doc}", None)

    def vectors(self) -> np.ndarray:
        """All vectors as float32 (searched in memory; float16 matmul is slow in numpy)."""
        return self._float32(F.VEC_DATA)

    def _float32(self, path: str) -> np.ndarray:
        """A float16 matrix read in blocks into float32, once, and cached."""
        key = f"{path}:f32"
        if key not in self._cache:
            with hdf5_errors(self.where, path):
                ds = self.h5[path]
                out = np.empty(ds.shape, dtype=np.float32)
                step = 65536
                for at in range(0, ds.shape[0], step):
                    out[at : at + step] = ds[at : at + step]
            self._cache[key] = out
        arr: np.ndarray = self._cache[key]
        return arr

    def stored_rows(self, path: str) -> StoredRows:
        """``/vectors/data`` or ``/pieces/data`` as stored (float16), for the dense scan: rows
        are scanned where they lie, never converted as a whole (``kbpack/pack/vector_scan.py``)."""
        if path not in self._stored:
            checked = self.dataset(path)
            with hdf5_errors(self.where, path):
                self._stored[path] = StoredRows(checked, self.h5[path], str(self.path))
        return self._stored[path]

    @property
    def has_pieces(self) -> bool:
        """Whether the pack holds the sentence-piece vector level (``build --pieces``)."""
        with hdf5_errors(self.where):
            return self.has_vectors and F.PIECE_DATA in self.h5

    def piece_vectors(self) -> np.ndarray:
        """All piece vectors as float32 (searched in memory beside the chunk vectors)."""
        return self._float32(F.PIECE_DATA)

    @property
    def has_copies(self) -> bool:
        """Whether the pack stores groups of copies (``/copies``; packs of kbpack 0.2.0 do not)."""
        with hdf5_errors(self.where):
            return F.COPY_CHUNK in self.h5

    def copy_groups(self) -> np.ndarray | None:
        """The copy group of every chunk row (int64, -1 for a chunk with no copy), or None in a
        pack without ``/copies``."""
        key = "copy_groups"  # None cached too: a result asks per chunk, HDF5's lookup costs
        if key not in self._cache and not self.has_copies:
            self._cache[key] = None
        if key not in self._cache:
            n = len(self.dataset(F.CHUNK_DOCUMENT))  # its length: no need to read it
            out = np.full(n, -1, dtype=np.int64)
            chunk = self.column(F.COPY_CHUNK).astype(np.int64)
            ok = (chunk >= 0) & (chunk < n)  # verify reports the rest; search must not crash
            out[chunk[ok]] = self.column(F.COPY_GROUP)[ok]
            self._cache[key] = out
        arr: np.ndarray | None = self._cache[key]
        return arr

    @property
    def has_links(self) -> bool:
        """Whether the pack stores links between its documents (``/links``, spec §3.12)."""
        with hdf5_errors(self.where):
            return F.LINK_DOCUMENT in self.h5

    def links_of(self, doc: int) -> list[tuple[int, int, int, int, str]]:
        """The links of document ``doc``, in text order: (from, to, target document row,
        offset in the target's text, the href's fragment); none in a pack without ``/links``.
        Every column is read whole and checked against its digest."""
        if not self.has_links:
            return []
        document = self.column(F.LINK_DOCUMENT)
        lo, hi = (int(x) for x in np.searchsorted(document, [doc, doc + 1]))
        start, end = self.column(F.LINK_FROM), self.column(F.LINK_TO)
        target, offset = self.column(F.LINK_TARGET), self.column(F.LINK_TARGET_OFFSET)
        anchor = self.strings(F.LINK_ANCHOR)
        return [
            (int(start[i]), int(end[i]), int(target[i]), int(offset[i]), anchor[i])
            for i in range(lo, hi)
        ]

    # -- the approximate index (spec §3.13; kbpack/pack/ivf.py, kbpack/search/ivf.py) ---------
    @property
    def has_ivf(self) -> bool:
        """Whether the pack holds an IVF index (``/ivf``: ``build --ivf``, ``kbpack index``)."""
        with hdf5_errors(self.where):
            return self.has_vectors and F.IVF in self.h5

    def ivf_index(self) -> IvfIndex | None:
        """The IVF index, its datasets read whole (digest-checked) and checked as verify checks
        them (``check_index``: every chunk in exactly one list); None in a pack without."""
        if "ivf" not in self._cache:
            index = None
            if self.has_ivf:
                centroids, offsets, chunks = (self.column(p) for p in F.IVF_DATASETS)
                dims = self.dataset(F.VEC_DATA).shape[1:]
                n = int(self.counts.get("chunks", 0))
                why = check_index(centroids, offsets, chunks, n, int(dims[0]) if dims else -1)
                if why is not None:
                    raise DamagedDataError(self.where, F.IVF, why)
                index = IvfIndex(centroids, offsets, chunks, *self._ivf_codes(n, int(dims[0])))
            self._cache["ivf"] = index
        out: IvfIndex | None = self._cache["ivf"]
        return out

    def _ivf_codes(self, n: int, dims: int) -> tuple[CodeRows | None, np.ndarray | None]:
        """``/ivf/codes`` mapped in place and its scale (read whole), checked as verify checks
        their shapes; (None, None) in an index without codes (spec §3.13: they are optional)."""
        with hdf5_errors(self.where):
            if not all(p in self.h5 for p in F.IVF_CODE_DATASETS):
                return None, None
        scale = self.column(F.IVF_CODE_SCALE)
        codes_ds = self.dataset(F.IVF_CODES)
        why = check_codes(tuple(codes_ds.shape), scale, n, dims)
        if why is not None:
            raise DamagedDataError(self.where, F.IVF, why)
        with hdf5_errors(self.where, F.IVF_CODES):
            codes = CodeRows(codes_ds, self.h5[F.IVF_CODES], str(self.path))
        return codes, scale.astype(np.float32)

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

    def write_gguf(self, out: Path) -> None:
        """Copy the embedded GGUF model out of the pack (llama.cpp needs a file path)."""
        with hdf5_errors(self.where, F.MODEL_GGUF):
            ds = self.h5[F.MODEL_GGUF]
            tmp = out.with_name(out.name + f".tmp-{os.getpid()}")
            with open(tmp, "wb") as f:
                step = 16 * 2**20
                for at in range(0, ds.shape[0], step):
                    f.write(ds[at : at + step].tobytes())
            os.replace(tmp, out)
