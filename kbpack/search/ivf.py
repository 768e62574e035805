"""Approximate dense search through a pack's IVF index (``/ivf``, spec/FORMAT.md §3.13).

A query scores the index's centroids and takes the ``probe`` lists of highest cosine (ties to
the lower list). Then, in an index with int8 codes (``/ivf/codes``, written since they exist):

* the probed lists' codes are scored where they lie, list after list (each list one contiguous
  run of rows: simsimd's int8 dot, ~15 ns a row here against ~50 for a float16 row gathered
  from wherever its chunk lies in ``/vectors/data``);
* every code score is within ``code_bound(q)`` of the chunk's exact (float32) cosine: a bound
  from the stored rule alone (each code within ``CODE_TOLERANCE`` steps of its component, the
  query's own rounding to int8, unit vectors), not a tuned constant;
* ``DenseScores.top(k)`` then re-scores exactly, from the stored float16 vectors, every probed
  chunk whose code score is within twice that bound of the k-th best, and returns the exact top
  k of the probed chunks, scores included. The shortlist is therefore not a size chosen in
  advance: it is every chunk that could still be in the top k (a few dozen to a few hundred
  at 1M chunks, bench/RESULTS.md).

In an index without codes (packs written before them) the probed chunks' float16 rows are
gathered and scanned as the exact path scans every row (the previous method, same results).
Either way chunks outside the probed lists get no score (-inf): they are not candidates, and
probing every list gives the exact scan's top k (tests/search/test_ivf.py). With pieces, the
probed chunks' scores blend in their pieces' (float16, gathered) as on the exact path; the
lists are chosen by the chunk vectors alone.

The functions here are pure (arrays in, arrays out); ``kbpack.search.vectors`` calls
``ivf_dense_scores`` from one marked hook where the dense stage picks its candidates.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kbpack.pack.format import PIECE_DATA, PIECE_WEIGHT, VEC_DATA
from kbpack.pack.ivf import CODE_MAX, CODE_TOLERANCE, IvfIndex, default_probe
from kbpack.pack.read_checked import DamagedDataError
from kbpack.pack.vector_scan import (
    NORM_TOLERANCE,
    StoredRows,
    rows_of,
    scan_matrix,
    scan_matrix_bounded,
    simsimd_module,
)
from kbpack.search.dense import DenseScores, PieceIndex, exact_scores

SCORE_ROWS = 16384  # candidates scored per block: 16k float32 rows (24 MiB at 384 dims)
# dimensions whose largest stored magnitude is below this are bounded by |code| <= 127 rather
# than through the vector's norm (either bound holds; this picks the tighter one, roughly)
SMALL_DIMENSION = 0.05


@dataclass(frozen=True)
class Probed:
    """One query's candidates: the probed lists and their chunk rows (ascending)."""

    lists: np.ndarray
    chunks: np.ndarray


def nearest_lists(centroids: np.ndarray, q: np.ndarray, probe: int) -> np.ndarray:
    """The ``probe`` lists whose centroids have the highest ``centroid . q``, best first, ties
    to the lower list. ``centroids`` (lists, dims) as stored, float16: scanned by the exact
    scan's kernel (a numpy matrix-vector product here woke OpenBLAS's threads, whose spinning
    cost more CPU than the whole probe at 1,000+ lists)."""
    scores = scan_matrix(centroids, q)
    m = max(1, min(int(probe), scores.size))
    if m < scores.size:
        part = np.argpartition(-scores, m - 1)[:m]
        nth = scores[part].min()
        part = np.flatnonzero(scores >= nth)  # every list tied with the last one, then cut
    else:
        part = np.arange(scores.size)
    order = np.lexsort((part, -scores[part]))[:m]
    return part[order]


def probe(index: IvfIndex, centroids: np.ndarray, q: np.ndarray, probe: int | None) -> Probed:
    """The candidates of the unit query ``q``: the chunks of the ``probe`` nearest lists
    (None: ``default_probe``). ``centroids``: ``index.centroids`` (in memory)."""
    lists = nearest_lists(centroids, q, default_probe(index.lists) if probe is None else probe)
    return Probed(lists, np.sort(index.probe_chunks(lists)))


def probe_runs(index: IvfIndex, lists: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends): the probed lists' rows in list order (rows of ``list_chunks`` and of
    the codes) as ascending runs, adjacent lists merged into one run."""
    lists = np.sort(np.asarray(lists, dtype=np.int64))
    starts, ends = index.list_offsets[lists], index.list_offsets[lists + 1]
    keep = ends > starts
    starts, ends = starts[keep], ends[keep]
    if starts.size < 2:
        return starts, ends
    new = np.r_[True, starts[1:] != ends[:-1]]
    return starts[new], ends[np.r_[new[1:], True]]


def run_rows(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Every row of the runs, in order (int64)."""
    sizes = ends - starts
    if not sizes.sum():
        return np.zeros(0, np.int64)
    shift = np.repeat(starts - np.r_[0, np.cumsum(sizes)[:-1]], sizes)
    return np.arange(shift.size, dtype=np.int64) + shift


def query_code(q: np.ndarray, scale: np.ndarray) -> tuple[np.ndarray, float, float]:
    """(q8, step, bound): the query folded with the codes' scale and rounded to int8, so that
    ``step * (code . q8)`` estimates ``vector . q``; and ``bound``, how far that estimate may
    be from the exact (float32) cosine of any stored unit vector whose code follows the rule.

    With ``x`` a stored vector, ``c`` its code, ``s`` the scale and ``f = s q - step q8`` the
    query's rounding (|f| <= step / 2 each):
    ``x . q - step c . q8 = (x - c s) . q + c . f``. The first term is at most
    ``CODE_TOLERANCE * sum |q| s`` (each code within that many steps, verify checks it). The
    second is at most ``sum |c| |f|``, where ``|c_j| <= 127`` and ``|c_j| <= |x_j| / s_j +
    CODE_TOLERANCE``: summed, ``127 |f_A|_1`` over the dimensions ``A`` of small scale and
    ``|x| |f_B / s_B|_2 + CODE_TOLERANCE |f_B|_1`` over the others (Cauchy-Schwarz, ``|x| <=
    1 + NORM_TOLERANCE``). Plus the float32 rounding of the reference itself."""
    q64 = np.asarray(q, dtype=np.float64)
    s = np.asarray(scale, dtype=np.float64)
    qs = q64 * s
    top = float(np.abs(qs).max()) if qs.size else 0.0
    step = top / CODE_MAX if top > 0 else 1.0
    q8 = np.clip(np.rint(qs / step), -CODE_MAX, CODE_MAX)
    f = np.abs(qs - step * q8)
    small = s * CODE_MAX < SMALL_DIMENSION
    big = ~small
    norm = 1.0 + NORM_TOLERANCE
    term1 = CODE_TOLERANCE * float(np.sum(np.abs(q64) * s))
    term2 = CODE_MAX * float(f[small].sum()) + CODE_TOLERANCE * float(f[big].sum())
    term2 += norm * float(np.linalg.norm(f[big] / s[big]))
    nu = q64.size * 2.0**-24
    term3 = 2.0 * nu / (1.0 - nu) * norm * float(np.linalg.norm(q64))
    bound = (term1 + term2 + term3) * (1.0 + 1e-6) + 1e-6  # (the estimate's own float32 sum)
    return q8.astype(np.int8)[None], step, bound


def _code_parts(codes: object, a: int, b: int) -> list[np.ndarray]:
    parts = getattr(codes, "parts", None)
    if parts is not None:
        out: list[np.ndarray] = parts(a, b)
        return out
    return [np.asarray(codes[a:b])]  # type: ignore[index]


def code_scores(
    codes: object, scale: np.ndarray, q: np.ndarray, starts: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, float]:
    """(estimates, bound): ``q``'s estimated cosine with every row of the runs, in order, from
    the int8 codes (``query_code``), and the bound on their distance from the exact ones."""
    q8, step, bound = query_code(q, scale)
    simsimd = simsimd_module()
    q32 = q8[0].astype(np.int32)
    parts = []
    for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
        for part in _code_parts(codes, a, b):
            if simsimd is not None:  # (integer sums below 2^24: exact in float32)
                parts.append(np.asarray(simsimd.cdist(part, q8, metric="dot", out_dtype="float32")))
            else:
                parts.append((part.astype(np.int32) @ q32).astype(np.float32))
    if not parts:
        return np.zeros(0, np.float32), bound
    out = np.concatenate(parts).reshape(-1)
    out *= np.float32(step)
    return out, bound


def _rows16(vectors: np.ndarray | StoredRows, ids: np.ndarray) -> np.ndarray:
    """The stored rows of ``ids`` (float16 where stored so), as the scan reads them."""
    if isinstance(vectors, StoredRows):
        return vectors.rows16(ids)
    return np.take(vectors, ids, axis=0)  # (take: ~20% less than fancy indexing)


def _with_pieces(
    cos: np.ndarray, error: float, q: np.ndarray, pieces: PieceIndex | None, ids: np.ndarray
) -> tuple[np.ndarray, float]:
    """(score, error): the chunks' estimated cosines ``cos`` blended with their pieces' (the
    exact path's one float16 pass over the gathered piece rows), and the bound on the blend."""
    if pieces is None or pieces.owners.size == 0 or ids.size == 0:
        return cos.copy(), error
    where = np.searchsorted(pieces.owners, ids)
    has = where < pieces.owners.size
    has[has] = pieces.owners[where[has]] == ids[has]
    best = cos.copy()
    if has.any():
        which = where[has]
        starts = pieces.starts[which]
        ends = np.append(pieces.starts, len(pieces.vectors))[which + 1]
        firsts = np.r_[0, np.cumsum(ends - starts)[:-1]]
        runs = np.repeat(starts - firsts, ends - starts)
        rows = np.arange(runs.size) + runs
        piece_cos = np.empty(rows.size, np.float32)
        for lo in range(0, rows.size, SCORE_ROWS):
            part = rows[lo : lo + SCORE_ROWS]
            piece_cos[lo : lo + part.size], err = scan_matrix_bounded(
                _rows16(pieces.vectors, part), q, rounded=True
            )
            error = max(error, err)
        best[has] = np.maximum.reduceat(piece_cos, firsts)
    # |blend - exact| <= (e + w e) / (1 + w) = e, as on the exact path
    return (cos + PIECE_WEIGHT * best) / (1.0 + PIECE_WEIGHT), error


def rounded_scores(
    vectors: np.ndarray | StoredRows,
    q: np.ndarray,
    pieces: PieceIndex | None,
    ids: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, float]:
    """(score, cos, error) of chunks ``ids`` (ascending): the exact path's one float16 pass
    (``rounded_chunk_scores``) over the gathered rows alone, each within ``error`` of the
    float32 reference; in blocks of ``SCORE_ROWS`` rows. (An index without codes.)"""
    cos = np.empty(ids.size, np.float32)
    error = 0.0
    for at in range(0, ids.size, SCORE_ROWS):
        part = ids[at : at + SCORE_ROWS]
        cos[at : at + part.size], err = scan_matrix_bounded(_rows16(vectors, part), q, rounded=True)
        error = max(error, err)
    score, error = _with_pieces(cos, error, q, pieces, ids)
    return score, cos, error


SAMPLE = 4096  # estimates sampled to find a floor under the k-th best (``mth_largest``)


def mth_largest(values: np.ndarray, m: int) -> float:
    """The ``m``-th largest of ``values`` (1 <= m < size). A partition of 100k+ estimates cost
    ~0.8 ms here, as much as a tenth of the codes' scan; so first the m-th largest of an
    evenly spaced sample of ``SAMPLE`` (at least m values are at or above it, so it is at
    most the answer), then the partition of the values at or above that floor only."""
    if values.size > 8 * SAMPLE:
        sample = values[:: values.size // SAMPLE]
        floor = np.partition(sample, sample.size - m)[sample.size - m]
        values = values[values >= floor]
    return float(np.partition(values, values.size - m)[values.size - m])


class ProbedScores(DenseScores):
    """``DenseScores`` of an approximate pass: only ``probed`` (the probed lists' chunks, in
    the order they were scored) and the chunks made exact since (a hybrid query's BM25
    candidates) have a score; ``top`` looks at those alone, from the estimates as scored
    (``estimates``, aligned with ``probed``), instead of partitioning every chunk's -inf.
    ``scored`` (every chunk's flag) is made when first asked for: a query does not need it."""

    probed: np.ndarray
    estimates: np.ndarray
    _extra: np.ndarray
    _scored: np.ndarray | None = None

    def __post_init__(self) -> None:
        # zeros: pages the kernel hands out on first touch (a query touches a few hundred)
        self.exact = (
            np.zeros(self.score.size, bool) if self.error else np.ones(self.score.size, bool)
        )

    @property  # type: ignore[override]
    def scored(self) -> np.ndarray | None:
        if self._scored is None and getattr(self, "probed", None) is not None:
            flags = np.zeros(self.score.size, bool)
            flags[self.probed] = True
            self._scored = flags
        return self._scored

    @scored.setter
    def scored(self, value: np.ndarray | None) -> None:
        self._scored = value

    def make_exact(self, ids: np.ndarray) -> None:
        ids = np.asarray(ids, dtype=np.int64)
        if ids.size:
            # a chunk outside the probed lists has no score until it is made exact here
            outside = ids[np.isneginf(self.score[ids])]
            if outside.size:
                self._extra = np.union1d(self._extra, outside)
        super().make_exact(ids)

    def top(self, n: int, mask: np.ndarray | None = None) -> np.ndarray:
        """``DenseScores.top`` over the rows that have a score. The m-th best is taken among
        the estimates as scored (every one within ``error`` of its exact score, and the BM25
        candidates' exact scores): the same proof of exactness holds for any mix of exact and
        estimated scores, each within ``error``."""
        if mask is None and n in self._unfiltered:
            return self._unfiltered[n]
        cand, sims = self.probed, self.estimates
        if self._extra.size:
            cand = np.concatenate([cand, self._extra])
            sims = np.concatenate([sims, self.score[self._extra]])
        if mask is not None:
            sims = np.where(mask[cand], sims, -np.inf)
            m = min(n, int(np.isfinite(sims).sum()))
        else:
            m = min(n, sims.size)  # (estimates and exact scores: all finite)
        if m == 0:
            return np.zeros(0, np.int64)
        if m < sims.size:
            rows = cand[sims >= mth_largest(sims, m) - 2.0 * self.error]
        else:
            rows = cand[np.isfinite(sims)]
        self.make_exact(rows)
        rows = rows.astype(np.int64)
        order = np.lexsort((rows, -self.score[rows]))[:m]
        if mask is None:
            self._unfiltered[n] = rows[order]
        return rows[order]


def finite_or_damaged(
    vectors: np.ndarray | StoredRows, rows: np.ndarray, score: np.ndarray, cos: np.ndarray
) -> None:
    """Raise ``DamagedDataError`` (one line: the pack, the element, the chunk) where a
    re-scored chunk's score is not finite. The probed chunks' estimates come from their int8
    codes, which stay finite when a vector is NaN (a pack whose digests were rewritten to
    match): the NaN shows only here, when the vector itself is read (the shortlist, or a
    hybrid query's BM25 candidate), and it must not be a fusion ValueError nor a chunk dropped
    from the top without a word (``PackVectors._finite`` says the same of the exact scan)."""
    if np.isfinite(score).all() and np.isfinite(cos).all():
        return
    bad_cos = ~np.isfinite(cos)
    at = int(np.flatnonzero(bad_cos if bad_cos.any() else ~np.isfinite(score))[0])
    element = VEC_DATA if bad_cos.any() else PIECE_DATA
    why = f"the vectors of chunk {int(rows[at])} are not finite (NaN or infinity)"
    # (a pack's rows name it; arrays or datasets of a caller's own, a bench's, do not)
    where = getattr(vectors.checked, "where", None) if isinstance(vectors, StoredRows) else None
    if not isinstance(where, str):
        raise ValueError(f"{element}: {why}")
    raise DamagedDataError(where, element, why)


def ivf_dense_scores(
    vectors: np.ndarray | StoredRows,
    index: IvfIndex,
    centroids: np.ndarray,
    q: np.ndarray,
    pieces: PieceIndex | None,
    probe_lists: int | None = None,
) -> ProbedScores:
    """``DenseScores`` for the searcher: the probed chunks estimated (from the int8 codes, or
    from a float16 pass over their gathered rows in an index without codes) within ``error``
    (``top`` re-scores the near ones exactly), -inf (not a candidate) elsewhere; ``rescore``
    still scores any chunk exactly (a BM25 candidate of a hybrid query outside the probed
    lists gets its true dense score)."""
    n = len(vectors)
    lists = nearest_lists(
        centroids, q, default_probe(index.lists) if probe_lists is None else probe_lists
    )
    if index.codes is not None and index.code_scale is not None:
        starts, ends = probe_runs(index, lists)
        ids = index.list_chunks[run_rows(starts, ends)].astype(np.int64)
        chunk_cos, error = code_scores(index.codes, index.code_scale, q, starts, ends)
        chunk_score, error = _with_pieces(chunk_cos, error, q, pieces, ids)
    else:
        ids = np.sort(index.probe_chunks(lists))
        chunk_score, chunk_cos, error = rounded_scores(vectors, q, pieces, ids)
    score = np.full(n, -np.inf, np.float32)
    score[ids] = chunk_score
    if pieces is None or pieces.owners.size == 0:
        cos = score  # the same numbers: one array (make_exact writes both alike)
    else:
        cos = np.full(n, -np.inf, np.float32)
        cos[ids] = chunk_cos

    def rescore(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        score, cos = exact_scores(vectors, q, pieces, rows, rows_of)
        finite_or_damaged(vectors, rows, score, cos)
        return score, cos

    out = ProbedScores(score, cos, error, rescore)
    out.probed, out.estimates = ids, chunk_score
    out._extra = np.zeros(0, np.int64)
    return out


def top_k(
    vectors: np.ndarray | StoredRows,
    index: IvfIndex,
    centroids: np.ndarray,
    q: np.ndarray,
    k: int,
    probe_lists: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(chunk ids, cosines) of the ``k`` best probed chunks, best first, ties by id, scores
    exact (float32): the searcher's dense stage without pieces (bench/ivf.py measures this)."""
    d = ivf_dense_scores(vectors, index, centroids, q, None, probe_lists)
    ids = d.top(k)
    return ids, d.cos[ids]
