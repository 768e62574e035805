"""Verify step 4, **digests**: every element's data and attributes against the manifest's
digests (``digest.py`` defines them). Each element is read once, here, and its values kept for
the invariant checks; the vectors are read in blocks, for their digest and norms together.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from kbpack.errors import describe
from kbpack.pack import format as F
from kbpack.pack.digest import StreamDigest, attrs_digest, plain
from kbpack.verify.exam_state import MAX_ROWS_SHOWN, ExamState

NORM_TOLERANCE = 1e-2  # float16 storage keeps unit norms within ~1e-3
READ_BLOCK_BYTES = 16 * 2**20


GGUF_HEAD_BYTES = 32 << 20  # a GGUF's metadata and tensor infos (the default model's: ~0.7 MB)


class ElementDigests(ExamState):
    """Step 4: digests compared, values kept in ``num``, ``raw`` and ``attrs``."""

    def _vector_pass(self, h: Any) -> str:
        d = StreamDigest()
        self._vector_digest(h[F.VEC_DATA], d)
        return d.hexdigest()

    def digests(self, h: Any) -> None:
        self._compare("/@attrs", self._attrs_digest(h, "/"))
        for el in F.ELEMENTS:
            if el.path not in self.readable:
                continue
            try:
                self._compare(el.path + "@attrs", self._attrs_digest(h, el.path))
                if el.dtype and el.path != F.VEC_DATA:  # the vectors: see Examiner.run
                    self._compare(el.path, self._data_digest(h[el.path], el))
            except MemoryError:
                raise
            except Exception as e:
                self.add("element-unreadable", el.path, describe(e))
        present = self.readable | {"/"}
        reported: set[str] = set()
        for key in sorted(self.elements):
            base = key.removesuffix("@attrs")
            if base not in present and base in F.ELEMENT_BY_PATH:
                optional = F.ELEMENT_BY_PATH[base].optional
                if optional and base not in self.in_file and base not in reported:
                    # an optional element the pack was written with, gone since (a required
                    # one is the structure step's "missing-element" already)
                    reported.add(base)
                    self.add(
                        "missing-element",
                        base,
                        "the manifest lists this element's digest but the file lacks it",
                    )
                continue  # refused: the structure step said so already
            if base not in present:
                self.add("digest-orphan", key, "the manifest lists a digest for no element")

    def _compare(self, key: str, actual: str) -> None:
        want = self.elements.get(key)
        if want is None:
            if self.manifest is not None:
                self.add("digest-missing", key, "the manifest has no digest for this element")
            return
        self.compared += 1
        if want != actual:
            self.mismatched_keys.append(key)
            what = "attributes" if key.endswith("@attrs") else "data"
            self.add(
                "digest-mismatch",
                key.removesuffix("@attrs"),
                f"{what} digest {actual[:16]}… differs from the manifest's {want[:16]}…: "
                "this element is damaged",
            )

    def _attrs_digest(self, h: Any, path: str) -> str:
        obj = h[path] if path != "/" else h
        values = {k: obj.attrs[k] for k in obj.attrs}
        self.attrs[path] = {k: plain(v) for k, v in values.items()}
        return attrs_digest(values)

    def _data_digest(self, ds: Any, el: F.Element) -> str:
        d = StreamDigest()
        if el.dtype == "str":
            items: list[bytes] = []
            for block in _blocks(ds, rows=256 if el.path == F.DOC_TEXT else 65536):
                raw = [x if isinstance(x, bytes) else str(x).encode() for x in block.tolist()]
                d.strings(raw)
                items.extend(raw)
            self.raw[el.path] = items
            return d.hexdigest()
        parts = []
        row_bytes = max(1, ds.dtype.itemsize * int(np.prod(ds.shape[1:], dtype=np.int64)))
        for block in _blocks(ds, rows=max(1, READ_BLOCK_BYTES // row_bytes)):
            d.numeric(block)
            if el.path == F.PIECE_DATA:  # not kept: norms measured here, block by block
                at = self.stats.get("piece_rows", 0)
                self._unit_rows(block, at, self.piece_counts, self.piece_bad)
                self.stats["piece_rows"] = at + len(block)
            elif el.path == F.IVF_CODES:  # not kept: invariants/ivf.py reads them in blocks
                continue
            elif el.path != F.MODEL_GGUF:
                parts.append(block)
            elif len(self.gguf_head) < GGUF_HEAD_BYTES:  # its header, for invariants/vectors
                self.gguf_head += block.tobytes()[: GGUF_HEAD_BYTES - len(self.gguf_head)]
        digest = d.hexdigest()
        if el.path == F.MODEL_GGUF:
            self.gguf_sha = digest  # u1 values: the digest is the SHA-256 of the GGUF file
        elif el.path == F.PIECE_DATA:
            self.stats.setdefault("piece_rows", 0)
            self.stats["piece_dims"] = int(ds.shape[1]) if ds.ndim == 2 else -1
        elif el.path == F.IVF_CODES:
            self.streamed.add(el.path)  # read through: its invariant reads it again
        else:
            self.num[el.path] = np.concatenate(parts) if parts else np.zeros(0, ds.dtype)
        return digest

    def _vector_digest(self, ds: Any, d: StreamDigest) -> None:
        """One pass over the vectors: digest, finiteness and unit norm, block by block."""
        self.stats["vector_rows"], self.stats["vector_dims"] = int(ds.shape[0]), int(ds.shape[1])
        rows = max(1, READ_BLOCK_BYTES // max(1, ds.dtype.itemsize * ds.shape[1]))
        at = 0
        for block in _blocks(ds, rows=rows):
            d.numeric(block)
            self._unit_rows(block, at, self.vec_counts, self.vec_bad)
            at += len(block)

    def _unit_rows(
        self, block: np.ndarray, at: int, counts: dict[str, int], bad: dict[str, list[int]]
    ) -> None:
        """Count (and note the first few) non-finite and non-unit rows of a vector block."""
        if block.ndim != 2:
            return  # the structure step reported the rank
        v = block.astype(np.float32)
        # a NaN or inf component makes the sum of squares non-finite; finite float16
        # values cannot overflow it in float32
        norms = np.sqrt(np.einsum("ij,ij->i", v, v))
        finite = np.isfinite(norms)
        bad_norm = finite & (np.abs(norms - 1.0) > NORM_TOLERANCE)
        for kind, mask in (("nonfinite", ~finite), ("norm", bad_norm)):
            idx = np.flatnonzero(mask)
            counts[kind] += len(idx)
            room = MAX_ROWS_SHOWN - len(bad[kind])
            if room > 0:
                bad[kind].extend(int(i) + at for i in idx[:room])
            if kind == "norm" and len(idx):
                self.stats.setdefault("first_bad_norm_x1000", int(norms[idx[0]] * 1000))


def _blocks(ds: Any, rows: int) -> Iterator[np.ndarray]:
    n = ds.shape[0] if ds.shape else 0
    for at in range(0, n, rows):
        yield ds[at : at + rows]
