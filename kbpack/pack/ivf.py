"""The approximate (inverted-file, IVF) index over a pack's chunk vectors (spec/FORMAT.md §3.13).

Why: an exact dense query reads every stored vector. At 1M chunks that is ~45 ms of CPU, at 30M
(README's Wikipedia plan) ~2 s. An IVF index groups the chunks into ``lists`` clusters; a query
scores the ``lists`` centroids, reads only the chunks of the ``probe`` nearest lists and scores
those exactly from the stored float16 vectors. Recall is below 1 (a chunk in an unprobed list
is never seen), which is why exact search stays the default below ``MIN_CHUNKS`` and is always
available.

How the index is built (``build_index``): spherical k-means (cosine, the unit vectors' own
metric) in numpy, on a sample of at most ``SAMPLE_PER_LIST`` vectors per list, from a fixed
seed, for ``ITERATIONS`` rounds; then every chunk goes to the list of its nearest centroid
(highest dot product, ties to the lower list). Deterministic: the same vectors give the same
index, byte for byte (so a migrate that keeps the vectors keeps the index). No new dependency:
faiss-cpu is not installed here, and the cost that dominates (assigning every vector to a
centroid, ``chunks x lists x dims`` multiply-adds) is one BLAS matrix product either way.

``check_index`` is the structural check that a reader and ``kbpack verify`` share: every chunk
in exactly one list, offsets from 0 to ``chunks`` and non-decreasing, centroids finite and as
wide as the vectors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MIN_CHUNKS = 1_000_000  # build (and merge, split, update) writes the index by default from here
ITERATIONS = 12
SAMPLE_PER_LIST = 64  # k-means trains on at most this many vectors per list (faiss: 39-256)
SEED = 0
ASSIGN_ROWS = 32768  # vectors assigned per matrix product (32k x lists float32 scores in memory)

RULE = (
    f"spherical k-means (cosine) over /vectors/data: a sample of at most {SAMPLE_PER_LIST} "
    f"vectors per list (numpy seed {SEED}), {ITERATIONS} rounds, centroids re-normalised each "
    "round; every chunk in the list of its nearest centroid, ties to the lower list; chunk rows "
    "ascending within a list (spec/FORMAT.md 3.13)"
)


def default_lists(chunks: int) -> int:
    """Lists for a pack of ``chunks``: about 2 sqrt(chunks) (2,000 at 1M, ~500 chunks a list).
    Finer lists read fewer chunks for the same recall (bench/RESULTS.md "Approximate search
    (IVF)": at 100k, 6% of the chunks gave recall@10 0.77 with 316 lists, 0.86 with 1,264);
    building costs chunks x lists x dims multiply-adds, small beside embedding them."""
    return max(1, min(chunks, round(2 * math.sqrt(chunks))))


def default_probe(lists: int) -> int:
    """Lists a query probes by default: about 2 sqrt(lists) (90 of 2,000: ~5% of the chunks,
    recall@10 0.9 at 1M in bench/ivf.py)."""
    return max(1, min(lists, math.ceil(2 * math.sqrt(lists))))


def wanted(chunks: int, request: bool | None) -> bool:
    """Whether a writer of a pack of ``chunks`` vectors writes the index: ``request`` True or
    False decides; None (the default) writes it from ``MIN_CHUNKS`` chunks."""
    if chunks == 0:
        return False
    return chunks >= MIN_CHUNKS if request is None else request


@dataclass(frozen=True)
class IvfIndex:
    """The three datasets of ``/ivf``: list ``l`` holds chunk rows
    ``list_chunks[list_offsets[l]:list_offsets[l + 1]]``."""

    centroids: np.ndarray  # float16 (lists, dims), unit rows
    list_offsets: np.ndarray  # int64 (lists + 1,)
    list_chunks: np.ndarray  # int32 (chunks,)

    @property
    def lists(self) -> int:
        return int(self.centroids.shape[0])

    def probe_chunks(self, lists: np.ndarray) -> np.ndarray:
        """The chunk rows of ``lists`` (int64), list after list."""
        starts = self.list_offsets[lists]
        ends = self.list_offsets[np.asarray(lists) + 1]
        sizes = ends - starts
        if not sizes.sum():
            return np.zeros(0, np.int64)
        runs = np.repeat(starts - np.r_[0, np.cumsum(sizes)[:-1]], sizes)
        return self.list_chunks[np.arange(runs.size) + runs].astype(np.int64)


def ivf_attrs(index: IvfIndex) -> dict[str, object]:
    """The attributes of ``/ivf`` beyond kind, version and description (spec §3.13)."""
    return {
        "dims": int(index.centroids.shape[1]),
        "metric": "cosine",
        "probe": default_probe(index.lists),
        "rule": RULE,
    }


def _unit(a: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(a, axis=1, keepdims=True)
    return a / np.where(norms > 0, norms, 1.0)


def _nearest(vectors: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """The list of each row of ``vectors`` (any float dtype): argmax of the dot products, the
    lowest list on ties, in blocks of ``ASSIGN_ROWS`` rows."""
    out = np.empty(len(vectors), np.int32)
    c = np.ascontiguousarray(centroids.T, dtype=np.float32)
    for at in range(0, len(vectors), ASSIGN_ROWS):
        block = np.asarray(vectors[at : at + ASSIGN_ROWS], dtype=np.float32)
        out[at : at + len(block)] = np.argmax(block @ c, axis=1)
    return out


def build_index(vectors: np.ndarray, lists: int | None = None) -> IvfIndex:
    """The index of ``vectors`` ((chunks, dims) float16 unit rows, in memory or memory-mapped)
    with ``lists`` lists (None: ``default_lists``)."""
    n = len(vectors)
    if n == 0:
        raise ValueError("an IVF index needs at least one vector")
    k = default_lists(n) if lists is None else int(lists)
    if not 1 <= k <= n:
        raise ValueError(f"--ivf-lists {k}: must be between 1 and the chunks ({n})")
    rng = np.random.default_rng(SEED)
    take = min(n, SAMPLE_PER_LIST * k)
    rows = np.sort(rng.choice(n, size=take, replace=False)) if take < n else np.arange(n)
    sample = np.asarray(vectors[rows], dtype=np.float32)
    centroids = sample[np.sort(rng.choice(take, size=k, replace=False))].copy()
    for _ in range(ITERATIONS):
        assign = _nearest(sample, centroids)
        sums = np.zeros_like(centroids)
        _add_rows(sums, assign, sample)
        counts = np.bincount(assign, minlength=k)
        empty = np.flatnonzero(counts == 0)
        if empty.size:  # an empty list takes a sample vector far from its own centroid
            scores = np.einsum("ij,ij->i", sample, centroids[assign])
            far = np.argsort(scores, kind="stable")[: empty.size]
            sums[empty] = sample[far]
        centroids = _unit(sums)
    centroids16 = _unit(centroids).astype(np.float16)
    assign = _nearest(vectors, centroids16)
    order = np.argsort(assign, kind="stable")  # stable: chunk rows ascend within a list
    offsets = np.zeros(k + 1, np.int64)
    np.cumsum(np.bincount(assign, minlength=k), out=offsets[1:])
    return IvfIndex(centroids16, offsets, order.astype(np.int32))


def _add_rows(sums: np.ndarray, assign: np.ndarray, rows: np.ndarray) -> None:
    """``np.add.at(sums, assign, rows)``, as one sort and one ``reduceat`` (add.at is slow)."""
    order = np.argsort(assign, kind="stable")
    keys = assign[order]
    first = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    sums[keys[first]] += np.add.reduceat(rows[order], first, axis=0)


def check_index(
    centroids: np.ndarray, offsets: np.ndarray, chunks_col: np.ndarray, chunks: int, dims: int
) -> str | None:
    """What is wrong with an index's three datasets, in one line, or None. Shared by the reader
    (before a query trusts the lists) and ``kbpack verify`` (finding ``ivf``)."""
    if centroids.ndim != 2 or centroids.shape[1] != dims:
        return f"/ivf/centroids: rows of {centroids.shape[1:]} numbers, the vectors have {dims}"
    lists = centroids.shape[0]
    if not 1 <= lists <= max(1, chunks):
        return f"/ivf/centroids: {lists} lists for {chunks} chunks (need 1 to {chunks})"
    if not np.isfinite(centroids.astype(np.float32)).all():
        bad = int(np.flatnonzero(~np.isfinite(centroids.astype(np.float32)).all(axis=1))[0])
        return f"/ivf/centroids: centroid {bad} is not finite (NaN or infinity)"
    if offsets.shape != (lists + 1,):
        return f"/ivf/list_offsets: {offsets.size} offsets, need lists + 1 = {lists + 1}"
    if offsets[0] != 0 or offsets[-1] != chunks:
        return (
            f"/ivf/list_offsets: runs from {int(offsets[0])} to {int(offsets[-1])}, "
            f"need 0 to the chunks ({chunks})"
        )
    steps = np.diff(offsets)
    if (steps < 0).any():
        at = int(np.flatnonzero(steps < 0)[0])
        return f"/ivf/list_offsets: offset {at + 1} is below offset {at} (must not decrease)"
    if chunks_col.shape != (chunks,):
        return f"/ivf/list_chunks: {chunks_col.size} rows, need one per chunk ({chunks})"
    col = chunks_col.astype(np.int64)
    out = (col < 0) | (col >= chunks)
    if out.any():
        row = int(np.flatnonzero(out)[0])
        return f"/ivf/list_chunks: row {row} names chunk {int(col[row])}, not a chunk row"
    seen = np.bincount(col, minlength=chunks)
    if (seen != 1).any():
        twice, missing = np.flatnonzero(seen > 1), np.flatnonzero(seen == 0)
        if twice.size:
            return f"/ivf/list_chunks: chunk {int(twice[0])} is in more than one list"
        return f"/ivf/list_chunks: chunk {int(missing[0])} is in no list"
    # ascending within each list: a step down is allowed only where a list starts
    down = np.flatnonzero(col[1:] <= col[:-1]) + 1
    starts = np.zeros(chunks + 1, bool)
    starts[offsets] = True
    if down.size and not starts[down].all():
        row = int(down[~starts[down]][0])
        return f"/ivf/list_chunks: rows of one list must ascend (row {row})"
    return None
