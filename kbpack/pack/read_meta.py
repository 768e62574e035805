"""A pack's stamped settings, each checked as it is read from the digest-checked attributes.

Versions, the model identity, search defaults, chunking, BM25's analyzer and parameters.
"""

from __future__ import annotations

import contextlib
import json
import math
from functools import cached_property
from typing import Any

import numpy as np

from kbpack.errors import PackError
from kbpack.pack import format as F
from kbpack.pack.read_checked import DamagedDataError, hdf5_errors
from kbpack.pack.read_columns import ColumnReader
from kbpack.pack.read_part import OpenFile, ReadPart


class PackSettings(ReadPart):
    """The pack's settings from its attributes; a damaged or unknown value is one line."""

    def __init__(self, file: OpenFile, columns: ColumnReader) -> None:
        super().__init__(file)
        self.columns = columns

    def attrs(self, path: str) -> dict[str, Any]:
        """An object's attributes, digest-checked (``ColumnReader.attrs``)."""
        return self.columns.attrs(path)

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
