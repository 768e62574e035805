"""What the verify child learns about a pack while it checks it, shared by steps 4 and 5.

The digest step reads each element once and keeps its values (``num``, ``raw``, ``attrs``);
the invariant checks then work on those, never reading HDF5 again. Findings collect here as
plain dicts, because they travel back to the parent as JSON.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from kbpack.pack import format as F
from kbpack.pack.structure import Finding
from kbpack.verify.report import HEADER

MAX_ROWS_SHOWN = 3  # row numbers quoted in one finding's detail


class ExamState:
    """The examined pack's manifest, the values read so far, and the findings."""

    def __init__(
        self, manifest: dict[str, Any] | None, file_size: int, bm25_sample: int | None
    ) -> None:
        self.manifest = manifest
        self.counts: dict[str, int] = dict(manifest["counts"]) if manifest else {}
        self.elements: dict[str, str] = dict(manifest["elements"]) if manifest else {}
        self.file_size = file_size
        self.bm25_sample = bm25_sample  # chunks re-tokenised; None: every chunk
        self.findings: list[dict[str, str]] = []
        self.stats: dict[str, int] = {}
        self.compared = 0
        self.mismatched_keys: list[str] = []
        self.stamp_differs = False  # manifest "created" differs from the root attribute
        self.readable: set[str] = set()  # elements safe to read
        self.in_file: set[str] = set()  # every object the file holds, safe or not
        self.num: dict[str, np.ndarray] = {}
        # numeric elements digested block by block and not kept (the IVF codes: 384 MB at 1M
        # chunks), each read through; its invariant reads it again, in blocks
        self.streamed: set[str] = set()
        self.raw: dict[str, list[bytes]] = {}
        self.attrs: dict[str, dict[str, Any]] = {}
        self.vec_bad: dict[str, list[int]] = {"nonfinite": [], "norm": []}
        self.vec_counts = {"nonfinite": 0, "norm": 0}
        self.piece_bad: dict[str, list[int]] = {"nonfinite": [], "norm": []}
        self.piece_counts = {"nonfinite": 0, "norm": 0}
        self.gguf_sha: str | None = None
        self.gguf_head = b""  # the stored GGUF's first bytes: its header (digests.py)
        self._texts: dict[int, str | None] = {}
        self.file: Any = None  # the open h5py.File, for the late checks that read it again

    def add(self, code: str, path: str, detail: str) -> None:
        self.findings.append(Finding(code, path, detail).as_dict())

    def _optional_group(
        self, group: str, count: str, counted: str, *, unreadable_is_absent: bool = True
    ) -> bool:
        """An optional group (``/pieces``, ``/copies``, ``/links``, ``/ivf``): the manifest
        counts ``count`` exactly when the group is there. Reports a count without the group
        (not for a group present but unreadable, unless ``unreadable_is_absent``) or the group
        uncounted; True when the group is readable and its own checks go on."""
        if group not in self.readable:
            if count in self.counts and (unreadable_is_absent or group not in self.in_file):
                self.add(
                    "count-mismatch",
                    f"{HEADER}/counts/{count}",
                    f"the manifest counts {counted}, the pack has no {group}",
                )
            return False
        if count not in self.counts:
            self.add("count-mismatch", f"{HEADER}/counts/{count}", f"{group} is present, uncounted")
        return True

    def _take(self) -> list[dict[str, str]]:
        taken, self.findings = self.findings, []
        return taken

    def _col(self, path: str) -> np.ndarray | None:
        return self.num.get(path)

    def _strs(self, path: str) -> list[str] | None:
        raw = self.raw.get(path)
        if raw is None:
            return None
        return [b.decode("utf-8", "replace") for b in raw]

    def _rows(self, code: str, path: str, mask: np.ndarray, what: Callable[[int], str]) -> bool:
        """One finding for all rows in ``mask``: how many, and the first few explained."""
        idx = np.flatnonzero(mask)
        if len(idx) == 0:
            return False
        shown = "; ".join(f"row {int(i)}: {what(int(i))}" for i in idx[:MAX_ROWS_SHOWN])
        more = f" (and {len(idx) - MAX_ROWS_SHOWN} more rows)" if len(idx) > MAX_ROWS_SHOWN else ""
        self.add(code, path, shown + more)
        return True

    def _same_length(self, group: str, paths: list[str]) -> list[np.ndarray] | None:
        cols = [self._col(p) for p in paths]
        if any(c is None for c in cols):
            return None  # missing or refused: already a finding
        arrays = [c for c in cols if c is not None]
        lengths = {len(c) for c in arrays}
        if len(lengths) > 1:
            self.add("column-lengths", group, f"columns have different lengths {sorted(lengths)}")
            return None
        return arrays

    def _text(self, doc: int) -> str | None:
        if doc not in self._texts:
            raw = self.raw.get(F.DOC_TEXT)
            try:
                self._texts[doc] = raw[doc].decode("utf-8") if raw is not None else None
            except UnicodeDecodeError:
                self._texts[doc] = None
        return self._texts[doc]
