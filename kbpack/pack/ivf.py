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

The int8 codes (``/ivf/codes``, ``/ivf/code_scale``; ``encode_codes``): every chunk's vector
quantised to int8, one scale per dimension, stored in list order so that a probed list is one
contiguous run of 384 bytes a row (half the float16 row, and simsimd's int8 dot costs ~15 ns a
row here against ~50 for the float16 one). A query scores the probed lists' codes, then re-scores
exactly, from ``/vectors/data``, every chunk whose code score is within the codes' error bound of
the top (``kbpack/search/ivf.py``): the codes choose which rows to read, never a score shown.
Why not a faster index (faiss's IVF-PQ, HNSW): PQ codes are 8-16x smaller but their error has
no cheap bound, so the re-scored shortlist becomes a tuned constant; int8 with a per-dimension
scale has a bound (``CODE_TOLERANCE``) and needs no training beyond the lists.
"""

from __future__ import annotations

import contextlib
import math
import mmap
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from kbpack.pack import format as F
from kbpack.pack.mapped import map_chunks

MIN_CHUNKS = 1_000_000  # build (and merge, split, update) writes the index by default from here
ITERATIONS = 12
SAMPLE_PER_LIST = 64  # k-means trains on at most this many vectors per list (faiss: 39-256)
SEED = 0
ASSIGN_ROWS = 32768  # vectors assigned per matrix product (32k x lists float32 scores in memory)

# how far a stored code may be from its component, in steps of its dimension's scale: a rounding
# (0.5) and the float32 arithmetic of whoever quantised it (spec §3.13; verify checks it)
CODE_TOLERANCE = 0.51
CODE_MAX = 127  # codes lie in [-127, 127] (-128 is never written: the range stays symmetric)
# rows quantised (written, or checked) at a time: the block's float32 copy is 24 MiB at 384
# dims; the codes are never held whole by a writer (``CodeSource``) nor by verify
CODE_BLOCK = 16384

RULE = (
    f"spherical k-means (cosine) over /vectors/data: a sample of at most {SAMPLE_PER_LIST} "
    f"vectors per list (numpy seed {SEED}), {ITERATIONS} rounds, centroids re-normalised each "
    "round; every chunk in the list of its nearest centroid, ties to the lower list; chunk rows "
    "ascending within a list (spec/FORMAT.md 3.13)"
)
CODE_RULE = (
    "codes[r] = rint(v / code_scale) of the vector v of chunk list_chunks[r] (float32 "
    "arithmetic; 0 where code_scale is 0), code_scale[j] = max |v[j]| over the chunks / 127"
)


def default_lists(chunks: int) -> int:
    """Lists for a pack of ``chunks``: about 2 sqrt(chunks) (2,000 at 1M, ~500 chunks a list).
    Finer lists read fewer chunks for the same recall (bench/RESULTS.md "Approximate search
    (IVF)": at 100k, 6% of the chunks gave recall@10 0.77 with 316 lists, 0.86 with 1,264);
    building costs chunks x lists x dims multiply-adds, small beside embedding them."""
    return max(1, min(chunks, round(2 * math.sqrt(chunks))))


def default_probe(lists: int) -> int:
    """Lists a query probes by default: a tenth of them (200 of 2,000 at 1M chunks: ~11% of
    the chunks, recall@10 0.957 there in bench/ivf.py, rising with the pack's size at the same
    share), and at least ``ceil(2 sqrt(lists))`` so that an index of few lists (under 400) is
    not read too thinly. Why a share: the lists hold about the same number of chunks, so the
    share of lists read is the share of chunks scored; with the int8 codes a scored chunk
    costs ~0.3 of a scanned one, so a tenth costs a few percent of the exact scan's CPU plus
    the centroids and the re-scored shortlist (bench/RESULTS.md "Approximate search")."""
    return max(1, min(lists, max(math.ceil(lists / 10), math.ceil(2 * math.sqrt(lists)))))


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
    # int8 (chunks, dims) in list order (row r: chunk list_chunks[r]) and float32 (dims,), or
    # None in an index without codes (packs written before them; ``build_index(codes=False)``).
    # ``codes`` may be any object whose ``[a:b]`` gives those rows as an int8 array (a reader
    # maps them in place: ``kbpack.pack.read.PackReader.ivf_index``)
    codes: Any = None
    code_scale: np.ndarray | None = None

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
        "rule": RULE if index.codes is None else f"{RULE}; {CODE_RULE}",
    }


def ivf_datasets(index: IvfIndex) -> list[tuple[str, Any]]:
    """(path, data) of every dataset of ``/ivf`` the index has, in the order they are written:
    arrays, and the codes as built (an array, or a ``CodeSource`` a writer writes in blocks)."""
    out: list[tuple[str, Any]] = [
        (F.IVF_CENTROIDS, index.centroids),
        (F.IVF_LIST_OFFSETS, index.list_offsets),
        (F.IVF_LIST_CHUNKS, index.list_chunks),
    ]
    if index.codes is not None and index.code_scale is not None:
        scale = np.asarray(index.code_scale, dtype=np.float64)  # float32 values, stored f8
        codes = index.codes if isinstance(index.codes, CodeSource) else np.asarray(index.codes)
        out += [(F.IVF_CODES, codes), (F.IVF_CODE_SCALE, scale)]
    return out


def code_scale_of(vectors: np.ndarray) -> np.ndarray:
    """float32 (dims,): each dimension's largest magnitude over ``vectors`` / 127, in blocks."""
    top = np.zeros(vectors.shape[1], np.float32)
    for at in range(0, len(vectors), CODE_BLOCK):
        block = np.abs(np.asarray(vectors[at : at + CODE_BLOCK], dtype=np.float32))
        np.maximum(top, block.max(axis=0), out=top)
    return (top / np.float32(CODE_MAX)).astype(np.float32)


def quantise(rows: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """int8 codes of ``rows`` (any float dtype) under ``scale`` (spec §3.13's rule). One
    float32 temporary the size of ``rows`` (rounded and clipped in place)."""
    inv = np.divide(1.0, scale, out=np.zeros_like(scale), where=scale > 0).astype(np.float32)
    x = np.multiply(rows, inv, dtype=np.float32)
    with np.errstate(invalid="ignore"):  # a non-finite row (verify reports it) casts to junk
        np.rint(x, out=x)
        np.clip(x, -CODE_MAX, CODE_MAX, out=x)
        return x.astype(np.int8)


class CodeSource:
    """The int8 codes of ``vectors`` in list order (row ``r``: chunk ``list_chunks[r]``) under
    ``scale``, quantised a block of rows at a time when they are read: what a writer streams
    into ``/ivf/codes`` (``blocks``) without holding them whole (3.6 GB at 10M chunks of 384
    dims). ``vectors`` may be memory-mapped; ``[a:b]`` gives rows ``a:b`` as an int8 array (a
    query can score them, re-quantising each time: ``encode_codes`` keeps them instead)."""

    dtype = np.dtype(np.int8)

    def __init__(self, vectors: np.ndarray, list_chunks: np.ndarray, scale: np.ndarray) -> None:
        self.vectors, self.list_chunks, self.scale = vectors, list_chunks, scale
        self.shape: tuple[int, int] = (len(list_chunks), int(vectors.shape[1]))

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, rows: slice) -> np.ndarray:
        a, b, _ = rows.indices(self.shape[0])
        ids = np.asarray(self.list_chunks[a:b], dtype=np.int64)
        order = np.argsort(ids, kind="stable")  # the vectors read ascending
        out = np.empty((ids.size, self.shape[1]), np.int8)
        out[order] = quantise(np.asarray(self.vectors[ids[order]]), self.scale)
        return out

    def blocks(self, rows: int = CODE_BLOCK) -> Iterator[np.ndarray]:
        """Every row, in order, ``rows`` at a time."""
        for at in range(0, self.shape[0], rows):
            yield self[at : at + rows]


def encode_codes(vectors: np.ndarray, list_chunks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(codes, code_scale): the int8 code of every chunk's vector, row ``r`` for chunk
    ``list_chunks[r]`` (list order), and the per-dimension scale, in memory (a writer streams
    them instead: ``CodeSource``). ``vectors`` may be memory-mapped: they are read a block of
    list rows at a time (ascending within the block)."""
    source = CodeSource(vectors, list_chunks, code_scale_of(vectors))
    codes = np.empty(source.shape, np.int8)
    at = 0
    for block in source.blocks():
        codes[at : at + len(block)] = block
        at += len(block)
    return codes, source.scale


def with_codes(index: IvfIndex, vectors: np.ndarray, stream: bool = False) -> IvfIndex:
    """``index`` with the int8 codes of ``vectors`` (the vectors it was built over): in
    memory, or with ``stream`` a ``CodeSource`` that quantises them as they are written."""
    if stream:
        source = CodeSource(vectors, index.list_chunks, code_scale_of(vectors))
        return replace(index, codes=source, code_scale=source.scale)
    codes, scale = encode_codes(vectors, index.list_chunks)
    return replace(index, codes=codes, code_scale=scale)


def check_codes(
    codes_shape: tuple[int, ...], scale: np.ndarray, chunks: int, dims: int
) -> str | None:
    """What is wrong with the codes' shapes and scale, in one line, or None (a reader's and
    verify's check; verify also compares every code with its vector: ``code_faults``)."""
    if tuple(codes_shape) != (chunks, dims):
        return f"/ivf/codes: shape {tuple(codes_shape)}, need (chunks, dims) = ({chunks}, {dims})"
    if scale.shape != (dims,):
        return f"/ivf/code_scale: shape {scale.shape}, need one scale per dimension ({dims})"
    bad = ~np.isfinite(scale) | (scale < 0)
    if bad.any():
        return f"/ivf/code_scale: scale {int(np.flatnonzero(bad)[0])} is negative or not finite"
    return None


def code_faults(codes: np.ndarray, scale: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """Which rows of ``codes`` (int8, a block of list rows) are not ``vectors`` (the same
    chunks' vectors, float) quantised within ``CODE_TOLERANCE`` steps, or out of [-127, 127]."""
    x = np.asarray(vectors, dtype=np.float32)
    c = np.asarray(codes).astype(np.float32)
    step = scale.astype(np.float32)
    off = np.abs(c * step - x) > CODE_TOLERANCE * step + 1e-7
    return np.asarray(off.any(axis=1) | (np.abs(c) > CODE_MAX).any(axis=1))


KEY_ROWS = 4096  # rows keyed per matrix product (a float64 copy: 12 MiB at 384 dims)


def _keys(codes: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """float64 ``codes . weights`` of each row: exact (integers below 2^52, see
    ``faulty_code_rows``), so two rows' keys are equal when the rows are."""
    out = np.empty(len(codes), np.float64)
    for at in range(0, len(codes), KEY_ROWS):
        out[at : at + KEY_ROWS] = codes[at : at + KEY_ROWS].astype(np.float64) @ weights
    return out


def faulty_code_rows(
    codes: Any, vectors: Any, list_chunks: np.ndarray, scale: np.ndarray, shown: int = 3
) -> tuple[int, list[int]]:
    """(how many, the first ``shown``) rows of ``codes`` ((chunks, dims) int8 in list order)
    that ``code_faults`` finds off their chunks' ``vectors`` ((chunks, dims) in chunk order).
    Both may be h5py datasets: each is read in blocks of ``CODE_BLOCK`` rows, in its own order,
    never whole (verify's check: the codes are 384 MB at 1M chunks, the vectors twice that).

    How, when row ``r`` of one is row ``list_chunks[r]`` of the other: a pass over the codes
    keeps each row's key (its dot product with random integer weights, exact in float64: 8
    bytes a chunk) at its chunk; a pass over the vectors quantises each block by the rule
    (``quantise``) and compares keys. Only the rows whose key differs from their rule code's,
    or whose rule code may be off itself (clipped: a scale too small), are read again, by row
    index, and judged by ``code_faults``: a code that a writer's arithmetic rounded the other
    way at a near-tie passes, as in a whole comparison. (A pack whose codes are mostly off
    reads them again row by row: slower, never more memory.) The weights are drawn afresh on
    every call (no seed), so no codes can be crafted whose key matches their vector's."""
    n, dims = int(codes.shape[0]), int(codes.shape[1])
    top = max(1, 2**52 // ((CODE_MAX + 1) * max(1, dims)))  # |code| <= 128: sums below 2^52
    weights = np.random.default_rng().integers(0, top, size=dims).astype(np.float64)
    chunk_of = np.asarray(list_chunks, dtype=np.int64)
    keys = np.empty(n, np.float64)
    for at in range(0, n, CODE_BLOCK):
        block = np.asarray(codes[at : at + CODE_BLOCK])
        keys[chunk_of[at : at + len(block)]] = _keys(block, weights)
    step = np.asarray(scale).astype(np.float32)
    # the rule's own code is off only where it is clipped (a component beyond 127.5 steps) or
    # the scale is 0 under a non-zero component: such rows are looked at again too
    limit = np.float32(CODE_MAX + 0.5) * step
    row_of: np.ndarray | None = None
    count, first = 0, list[int]()
    for at in range(0, n, CODE_BLOCK):
        v = np.asarray(vectors[at : at + CODE_BLOCK])
        want = quantise(v, step)
        suspect = _keys(want, weights) != keys[at : at + len(v)]
        suspect |= (np.abs(v) > limit).any(axis=1)
        if not suspect.any():
            continue
        if row_of is None:
            row_of = np.empty(n, np.int64)
            row_of[chunk_of] = np.arange(n, dtype=np.int64)
        which = np.flatnonzero(suspect)
        rows = row_of[at + which]
        order = np.argsort(rows)  # (an h5py dataset reads ascending rows)
        rows, which = rows[order], which[order]
        found = rows[code_faults(np.asarray(codes[rows]), step, v[which])]
        count += int(found.size)
        first = sorted([*first, *found[:shown].tolist()])[:shown]
    return count, first


def _unit(a: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(a, axis=1, keepdims=True)
    return a / np.where(norms > 0, norms, 1.0)


class NotFiniteVector(ValueError):
    """A vector to index is not finite (a damaged pack whose digests were rewritten to match):
    its index would have a NaN centroid and scale, refused by every reader."""

    def __init__(self, chunk: int) -> None:
        super().__init__(f"the vector of chunk {chunk} is not finite (NaN or infinity)")
        self.chunk = chunk


def _finite_rows(block: np.ndarray, rows: np.ndarray) -> None:
    """Raise ``NotFiniteVector`` for the first row of ``block`` that is not finite
    (``rows``: the chunk of each)."""
    bad = ~np.isfinite(block).all(axis=1)
    if bad.any():
        raise NotFiniteVector(int(rows[np.flatnonzero(bad)[0]]))


def _nearest(vectors: np.ndarray, centroids: np.ndarray, check: bool = False) -> np.ndarray:
    """The list of each row of ``vectors`` (any float dtype): argmax of the dot products, the
    lowest list on ties, in blocks of ``ASSIGN_ROWS`` rows; with ``check``, a row that is not
    finite raises ``NotFiniteVector``."""
    out = np.empty(len(vectors), np.int32)
    c = np.ascontiguousarray(centroids.T, dtype=np.float32)
    for at in range(0, len(vectors), ASSIGN_ROWS):
        block = np.asarray(vectors[at : at + ASSIGN_ROWS], dtype=np.float32)
        if check:
            _finite_rows(block, np.arange(at, at + len(block)))
        out[at : at + len(block)] = np.argmax(block @ c, axis=1)
    return out


def build_index(
    vectors: np.ndarray, lists: int | None = None, codes: bool = True, stream: bool = False
) -> IvfIndex:
    """The index of ``vectors`` ((chunks, dims) float16 unit rows, in memory or memory-mapped)
    with ``lists`` lists (None: ``default_lists``), with its int8 codes unless ``codes`` is
    False: in memory, or with ``stream`` a ``CodeSource`` over ``vectors`` (a writer's: the
    codes are quantised as they are written, and ``vectors`` must stay readable until then).
    A vector that is not finite raises ``NotFiniteVector`` (a ``ValueError``)."""
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
    _finite_rows(sample, rows)  # (before training on it; the assignment checks every row)
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
    assign = _nearest(vectors, centroids16, check=True)
    order = np.argsort(assign, kind="stable")  # stable: chunk rows ascend within a list
    offsets = np.zeros(k + 1, np.int64)
    np.cumsum(np.bincount(assign, minlength=k), out=offsets[1:])
    index = IvfIndex(centroids16, offsets, order.astype(np.int32))
    return with_codes(index, vectors, stream) if codes else index


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


class CodeRows:
    """``/ivf/codes`` of an open pack, read where it lies: ``parts(a, b)`` gives rows ``a:b``
    as int8 arrays, views of the mapped file (one per HDF5 chunk the run crosses), or read
    through HDF5 (Fletcher-32 checked) where the layout does not allow mapping (a filter, a
    chunk not written, a file that cannot be mapped). Unchecked mapped bytes choose only which
    rows a query re-scores from the vectors, never a score (``kbpack/search/ivf.py``)."""

    def __init__(self, checked: Any, h5ds: Any, path: str) -> None:
        self.checked = checked
        self.shape: tuple[int, ...] = tuple(h5ds.shape)
        self._map: mmap.mmap | None = None
        self._firsts: np.ndarray | None = None
        self._views: list[np.ndarray] = []
        with contextlib.suppress(OSError, ValueError, RuntimeError, TypeError, KeyError):
            self._map_chunks(h5ds, path)

    def __len__(self) -> int:
        return self.shape[0]

    @property
    def mapped(self) -> bool:
        return self._firsts is not None

    def _map_chunks(self, ds: Any, path: str) -> None:
        found = map_chunks(ds, path, np.dtype(np.int8), self.shape)
        if found is not None:
            self._map, blocks = found
            self._views = [view for _, view in blocks]
            self._firsts = np.array([first for first, _ in blocks], dtype=np.int64)

    def parts(self, a: int, b: int) -> list[np.ndarray]:
        """Rows ``a:b`` as a few int8 arrays, in order."""
        if b <= a:
            return []
        if self._firsts is None:
            return [np.asarray(self.checked[a:b], dtype=np.int8)]
        out = []
        i = int(np.searchsorted(self._firsts, a, side="right")) - 1
        while a < b:
            first = int(self._firsts[i])
            view = self._views[i]
            stop = min(b, first + len(view))
            out.append(view[a - first : stop - first])
            a, i = stop, i + 1
        return out

    def __getitem__(self, rows: slice) -> np.ndarray:
        a, b, _ = rows.indices(self.shape[0])
        parts = self.parts(a, b)
        if len(parts) == 1:
            return parts[0]
        return np.concatenate(parts) if parts else np.zeros((0, self.shape[1]), np.int8)

    def close(self) -> None:
        self._views, self._firsts = [], None
        if self._map is not None:
            with contextlib.suppress(BufferError):
                self._map.close()
            self._map = None
