"""Checked reads of string rows: whole columns, single rows and documents' texts.

Whole columns against the manifest's digest, single rows against their row digests (spec
§3.11), document texts against their SHA-256.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from typing import Any

from kbpack.pack import format as F
from kbpack.pack.digest import row_digest, strings_digest
from kbpack.pack.read_checked import DamagedDataError, hdf5_errors
from kbpack.pack.read_columns import ColumnReader
from kbpack.pack.read_heap import HeapRowCheck
from kbpack.pack.read_part import OpenFile, ReadPart

# Documents' texts kept once read (per open pack), in characters: a server reading citations
# for days would otherwise come to hold the whole canonical text, once per worker process
# (63 M characters at 100k chunks of bench's synthetic pack, ~10x that at 1M). A text read
# again costs its heap read and SHA-256 (~10 us for a 9 KB document).
TEXT_CACHE_CHARS = 64 << 20


class StringReader(ReadPart):
    """Reads string columns, single string rows, documents' texts and warnings; every row's
    heap reference is checked (``HeapRowCheck``) before HDF5 follows it."""

    def __init__(self, file: OpenFile, columns: ColumnReader, heap_check: HeapRowCheck) -> None:
        super().__init__(file)
        self.columns = columns
        self.heap_check = heap_check
        self._texts: OrderedDict[int, str] = OrderedDict()  # documents' texts, oldest first
        self._text_chars = 0
        self._texts_lock = threading.Lock()

    def strings(self, path: str) -> list[str]:
        """A whole string dataset, read once, checked against the manifest's digest, cached.

        String bytes sit in HDF5's global heap, where no checksum filter reaches: the digest is
        what keeps a flipped bit in a title or a name from being shown as if it were written.
        """
        if path not in self._cache:
            self.heap_check.check(path)
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
            want = self.columns.value(digest_path, row)  # also refuses a row outside the column
            self.heap_check.check(path, row, row + 1)
            with hdf5_errors(self.where, path):
                raw = self._dataset(path)[row]
            data = raw if isinstance(raw, bytes) else str(raw).encode("utf-8")
            if row_digest(data) != want:
                raise DamagedDataError(self.where, path, f"row {row} differs from its row digest")
            try:
                self._cache[key] = data.decode("utf-8")
            except UnicodeDecodeError as e:  # a row digest written over invalid bytes
                raise DamagedDataError(self.where, path, f"row {row} is not UTF-8") from e
        out: str = self._cache[key]
        return out

    def _dataset(self, path: str) -> Any:
        """The h5py dataset at ``path``, looked up once: a lookup by path costs ~0.1 ms under
        h5py's lock and the GIL, and a search's citations read a row of a few each."""
        key = f"h5:{path}"
        if key not in self._cache:
            self._cache[key] = self.h5[path]
        return self._cache[key]

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

    def text(self, doc: int) -> str:
        """Canonical text of one document (one element read), checked against its SHA-256.

        The text's bytes live in HDF5's global heap, outside any filter's reach, so the stored
        ``text_sha256`` is what catches a damaged text before it is quoted. Texts read are kept,
        up to ``TEXT_CACHE_CHARS`` in all (least recently used out first).
        """
        with self._texts_lock:
            kept = self._texts.get(doc)
            if kept is not None:
                self._texts.move_to_end(doc)
                return kept
        self.heap_check.check(F.DOC_TEXT, doc, doc + 1)
        with hdf5_errors(self.where, F.DOC_TEXT):
            raw = self._dataset(F.DOC_TEXT)[doc]
        data = raw if isinstance(raw, bytes) else str(raw).encode("utf-8")
        want = self.string_at(F.DOC_TEXT_SHA256, doc)
        if hashlib.sha256(data).hexdigest() != want:
            raise DamagedDataError(
                self.where, F.DOC_TEXT, f"row {doc} differs from its text_sha256"
            )
        out = data.decode("utf-8")
        with self._texts_lock:
            if doc not in self._texts:
                self._texts[doc] = out
                self._text_chars += len(out)
                while self._text_chars > TEXT_CACHE_CHARS and len(self._texts) > 1:
                    _, old = self._texts.popitem(last=False)
                    self._text_chars -= len(old)
        return out

    def forget_text(self, doc: int) -> None:
        """Drop one document's cached text (a streaming reader such as merge keeps none)."""
        with self._texts_lock:
            old = self._texts.pop(doc, None)
            if old is not None:
                self._text_chars -= len(old)
