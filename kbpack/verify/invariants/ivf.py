"""Verify step 5, **ivf** (spec/FORMAT.md §3.13): the approximate index, when the pack has one.
The manifest counts ``ivf_lists`` exactly when ``/ivf`` is there, with its three datasets, in a
pack with vectors; then ``kbpack.pack.ivf.check_index`` (the reader's own check): centroids
finite and as wide as the vectors, offsets from 0 to the chunks without decreasing, every chunk
in exactly one list, ascending within it; and the default ``probe`` at most the lists. Which
list a chunk is in is the builder's judgement (k-means): a chunk in a farther list costs recall,
not correctness, and is not re-judged. The optional int8 codes (``/ivf/codes``,
``/ivf/code_scale``, together): shapes, a finite non-negative scale, and every code row is its
chunk's vector quantised by the stated rule within ``CODE_TOLERANCE`` steps (the bound a query
relies on to re-score every chunk that could be in its top k): the codes and the vectors are
read again, each in blocks and neither whole (``kbpack.pack.ivf.faulty_code_rows``), and one
finding names the first rows off. A vector that is not finite has no code to compare: the
vectors' own check names its chunk (``vector-not-finite``)."""

from __future__ import annotations

import numpy as np

from kbpack.pack import format as F
from kbpack.pack.ivf import check_codes, check_index, faulty_code_rows
from kbpack.verify.exam_state import ExamState


class IvfInvariants(ExamState):
    """Step 5 on ``/ivf``."""

    def _check_ivf(self) -> None:
        if not self._optional_group(F.IVF, "ivf_lists", "IVF lists", unreadable_is_absent=False):
            return
        if F.VEC_DATA not in self.readable:
            self.add("ivf", F.IVF, "an IVF index in a pack without /vectors/data")
            return
        missing = [p for p in F.IVF_DATASETS if p not in self.in_file]
        if missing:
            self.add("missing-element", missing[0], "/ivf holds its three datasets together")
            return
        cols = [self._col(p) for p in F.IVF_DATASETS]
        centroids, offsets, chunks = cols
        if centroids is None or offsets is None or chunks is None:
            return  # unreadable or refused: already a finding
        n = int(self.counts.get("chunks", -1))
        why = check_index(centroids, offsets, chunks, n, int(self.stats.get("vector_dims", -1)))
        if why is not None:
            path, _, detail = why.partition(": ")
            self.add("ivf", path, detail)
            return
        self.stats["ivf_lists"] = int(centroids.shape[0])
        self._check_ivf_codes(chunks, n, int(self.stats.get("vector_dims", -1)))
        probe = (self.attrs.get(F.IVF) or {}).get(F.IVF_PROBE_ATTR)
        if isinstance(probe, int) and probe > centroids.shape[0]:
            self.add(
                "attribute-invalid",
                F.IVF,
                f"probe {probe}: more than the index's {centroids.shape[0]} lists",
            )

    def _check_ivf_codes(self, list_chunks: np.ndarray, n: int, dims: int) -> None:
        present = [p for p in F.IVF_CODE_DATASETS if p in self.in_file]
        if not present:
            return
        if len(present) < len(F.IVF_CODE_DATASETS):
            missing = next(p for p in F.IVF_CODE_DATASETS if p not in present)
            self.add("missing-element", missing, "/ivf/codes and /ivf/code_scale come together")
            return
        scale = self._col(F.IVF_CODE_SCALE)
        if F.IVF_CODES not in self.streamed or scale is None or self.file is None:
            return  # unreadable or refused: already a finding
        codes = self.file[F.IVF_CODES]  # (digested, not kept: read again here, in blocks)
        why = check_codes(codes.shape, scale, n, dims)
        if why is not None:
            path, _, detail = why.partition(": ")
            self.add("ivf", path, detail)
            return
        if F.VEC_DATA not in self.readable:
            return
        count, bad = faulty_code_rows(codes, self.file[F.VEC_DATA], list_chunks, scale)
        if count:
            more = f" (and {count - len(bad)} more)" if count > len(bad) else ""
            self.add(
                "ivf",
                F.IVF_CODES,
                f"rows {', '.join(map(str, bad))}{more}: not their chunks' vectors quantised by "
                "the stated rule (spec/FORMAT.md 3.13)",
            )
