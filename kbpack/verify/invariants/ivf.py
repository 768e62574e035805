"""Verify step 5, **ivf** (spec/FORMAT.md §3.13): the approximate index, when the pack has one.
The manifest counts ``ivf_lists`` exactly when ``/ivf`` is there, with its three datasets, in a
pack with vectors; then ``kbpack.pack.ivf.check_index`` (the reader's own check): centroids
finite and as wide as the vectors, offsets from 0 to the chunks without decreasing, every chunk
in exactly one list, ascending within it; and the default ``probe`` at most the lists. Which
list a chunk is in is the builder's judgement (k-means): a chunk in a farther list costs recall,
not correctness, and is not re-judged."""

from __future__ import annotations

from kbpack.pack import format as F
from kbpack.pack.ivf import check_index
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
        probe = (self.attrs.get(F.IVF) or {}).get(F.IVF_PROBE_ATTR)
        if isinstance(probe, int) and probe > centroids.shape[0]:
            self.add(
                "attribute-invalid",
                F.IVF,
                f"probe {probe}: more than the index's {centroids.shape[0]} lists",
            )
