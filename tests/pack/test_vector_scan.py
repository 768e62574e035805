"""The dense scan over stored float16 rows (kbpack/pack/vector_scan.py) against the exact reference:
every stored vector converted to float32 and multiplied by the float32 query in numpy."""

from __future__ import annotations

import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from scale_corpus import PART_A, build_pack, write_folder

import kbpack
from kbpack.pack import format as F
from kbpack.pack.read import DamagedDataError, PackReader
from kbpack.pack.storage import create_dataset
from kbpack.pack.vector_scan import StoredRows, scan_matrix, simsimd_module
from kbpack.search.dense import PieceIndex, checked_scores, chunk_scores

DIMS = 384
N_CHUNKS = 3000  # 9 HDF5 chunks of 341 rows: several blocks and a short last one
TOP = 100  # the search's candidate depth


def unit(rng: np.random.Generator, n: int, dims: int = DIMS) -> np.ndarray:
    v = rng.standard_normal((n, dims)).astype(np.float32)
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float16)


def reference(vectors16: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The float32 scores a search's exact re-score gives (``row_dots``: each row's dot
    product the same bits whatever rows come with it; BLAS's ``@`` is not, so near ties
    ordered by it would depend on the rows read together)."""
    from kbpack.search.dense import row_dots

    return row_dots(vectors16.astype(np.float32), np.asarray(q, np.float32))


def top(scores: np.ndarray, k: int = TOP) -> list[int]:
    return np.lexsort((np.arange(scores.size), -scores))[:k].tolist()


Stored = tuple[Path, np.ndarray, np.ndarray, np.ndarray]


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Stored:
    """An HDF5 file holding chunk and piece vectors with a pack's storage (chunked, Fletcher-32),
    the same vectors in memory, and each piece's chunk row (0, 2, 3, ... pieces per chunk,
    ordered by chunk as spec §3.9 says)."""
    rng = np.random.default_rng(3)
    chunks = unit(rng, N_CHUNKS)
    owner = np.repeat(np.arange(N_CHUNKS), rng.choice([0, 2, 3, 4, 6], size=N_CHUNKS))
    pieces = unit(rng, owner.size)
    path = tmp_path_factory.mktemp("scan") / "vectors.h5"
    with h5py.File(path, "w", userblock_size=65536) as h:  # packs have a user block too
        create_dataset(h, F.VEC_DATA, data=chunks)
        create_dataset(h, F.PIECE_DATA, data=pieces)
    return path, chunks, pieces, owner


def open_rows(path: Path, element: str) -> tuple[h5py.File, StoredRows]:
    h = h5py.File(path, "r")
    return h, StoredRows(h[element], h[element], str(path))


def queries(n: int = 5) -> np.ndarray:
    rng = np.random.default_rng(11)
    q = rng.standard_normal((n, DIMS)).astype(np.float32)
    return q / np.linalg.norm(q, axis=1, keepdims=True)


@pytest.mark.parametrize("use_simsimd", [True, False])
def test_mapped_scan_equals_the_float32_reference(stored: Stored, use_simsimd: bool) -> None:
    path, chunks, _, _ = stored
    if use_simsimd and simsimd_module() is None:
        pytest.skip("simsimd is not installed here")
    h, rows = open_rows(path, F.VEC_DATA)
    try:
        assert rows.mapped  # the fast path is the one under test
        for q in queries():
            got = rows.scan(q, use_simsimd=use_simsimd)
            want = reference(chunks, q)
            assert got.dtype == np.float32
            np.testing.assert_allclose(got, want, atol=1e-6)
            assert top(got) == top(want)
    finally:
        rows.close()
        h.close()


def test_hdf5_block_scan_equals_the_mapped_scan(tmp_path: Path, stored: Stored) -> None:
    """A dataset whose stored bytes are not its values (deflate) is read through HDF5."""
    _, chunks, _, _ = stored
    path = tmp_path / "deflated.h5"
    with h5py.File(path, "w") as h:
        h.create_dataset(F.VEC_DATA, data=chunks, chunks=(341, DIMS), compression="gzip")
    h, rows = open_rows(path, F.VEC_DATA)
    try:
        assert not rows.mapped
        for q in queries(2):
            np.testing.assert_allclose(rows.scan(q), reference(chunks, q), atol=1e-6)
    finally:
        h.close()


def test_float16_matrix_in_memory_scans_like_the_reference(stored: Stored) -> None:
    _, chunks, _, _ = stored
    q = queries(1)[0]
    for use_simsimd in (True, False):
        np.testing.assert_allclose(
            scan_matrix(chunks, q, use_simsimd=use_simsimd), reference(chunks, q), atol=1e-6
        )


def test_piece_scores_equal_the_float32_reference(stored: Stored) -> None:
    """The blended chunk score over stored rows equals the one over float32 matrices, and the
    checked re-score of any chunk equals both."""
    path, chunks, pieces, owner = stored
    hc, crow = open_rows(path, F.VEC_DATA)
    hp, prow = open_rows(path, F.PIECE_DATA)
    try:
        stored_index = PieceIndex.from_columns(prow, owner)
        memory_index = PieceIndex.from_columns(pieces.astype(np.float32), owner)
        for q in queries(3):
            score, cos = chunk_scores(crow, q, stored_index)
            want_score, want_cos = chunk_scores(chunks.astype(np.float32), q, memory_index)
            np.testing.assert_allclose(score, want_score, atol=1e-6)
            np.testing.assert_allclose(cos, want_cos, atol=1e-6)
            assert top(score) == top(want_score)
            ids = np.array(top(score, 20))
            again, again_cos = checked_scores(crow, q, stored_index, ids)
            np.testing.assert_allclose(again, score[ids], atol=1e-6)
            np.testing.assert_allclose(again_cos, cos[ids], atol=1e-6)
    finally:
        hc.close()
        hp.close()


@pytest.fixture(scope="module")
def tiny_pack(tmp_path_factory: pytest.TempPathFactory, wide_model: Path) -> tuple[Path, Path]:
    """(pack, model): a small pack built by the tiny test model."""
    root = tmp_path_factory.mktemp("dense")
    pack = build_pack(write_folder(root / "a", PART_A), root / "a.kbpack", wide_model)
    return pack, wide_model


def test_a_pack_is_scanned_in_place(tiny_pack: tuple[Path, Path]) -> None:
    with PackReader(tiny_pack[0]) as r:
        rows = r.stored_rows(F.VEC_DATA)
        assert rows.mapped
        vectors = r.vectors()
        q = vectors[0]
        np.testing.assert_allclose(rows.scan(q), vectors @ q, atol=1e-6)


def test_a_damaged_vector_of_a_result_is_refused(
    tiny_pack: tuple[Path, Path], tmp_path: Path
) -> None:
    """The scan reads mapped bytes without the checksum; the results' re-read catches it."""
    pack, model = tiny_pack
    query = "log handler rotation"
    with kbpack.open(pack, model=model) as p:
        response = p.search(query, k=3, mode="dense", refuse=False)
        assert response.mode == "dense"
        first = response.results[0]
    damaged = tmp_path / "damaged.kbpack"
    damaged.write_bytes(pack.read_bytes())
    with h5py.File(damaged, "r") as h:
        ds = h[F.VEC_DATA]
        rows_per = ds.chunks[0]
        info = ds.id.get_chunk_info_by_coord((first.chunk // rows_per * rows_per, 0))
        at = info.byte_offset + (first.chunk % rows_per) * ds.shape[1] * 2 + 1
    data = bytearray(damaged.read_bytes())
    data[at] ^= 0x01  # the high byte of the first component: its top mantissa bit
    damaged.write_bytes(bytes(data))
    with kbpack.open(damaged, model=model) as p, pytest.raises(DamagedDataError, match=F.VEC_DATA):
        p.search(query, k=3, mode="dense", refuse=False)


def test_scans_leave_none_s_reference_count_alone(stored: Stored) -> None:
    """simsimd 6.5's cdist(out=...) returns None without a reference: thousands of calls (one
    per HDF5 chunk) used to drive None's count to zero and abort the interpreter."""
    path, _, _, _ = stored
    h, rows = open_rows(path, F.VEC_DATA)
    try:
        q = queries(1)[0]
        rows.scan(q)
        before = sys.getrefcount(None)
        for _ in range(20):  # 9 blocks each: 180 kernel calls
            rows.scan(q)
        assert sys.getrefcount(None) >= before - 5  # a few may move with the interpreter's state
    finally:
        rows.close()
        h.close()


def test_chunks_at_odd_offsets_are_scanned_in_place(tmp_path: Path, stored: Stored) -> None:
    """HDF5 may place a chunk at an odd byte offset (the 1M-chunk pack did): its float16 rows
    are then unaligned, which simsimd refuses; they are still scanned in place, not read
    through HDF5."""
    _, chunks, _, _ = stored
    for pad in range(4097, 4104):  # past HDF5's 2 KiB small-data block: at the end of file
        path = tmp_path / f"odd-{pad}.h5"
        with h5py.File(path, "w") as h:
            h.create_dataset("pad", data=np.zeros(pad, np.uint8))  # contiguous: shifts the data
            create_dataset(h, F.VEC_DATA, data=chunks)
            offset = h[F.VEC_DATA].id.get_chunk_info(0).byte_offset
        if offset % 2:
            break
    else:
        pytest.skip("HDF5 placed every chunk at an even offset")
    h, rows = open_rows(path, F.VEC_DATA)
    try:
        assert rows.mapped
        q = queries(1)[0]
        np.testing.assert_allclose(rows.scan(q), reference(chunks, q), atol=1e-6)
        got, error = rows.scan_bounded(q, rounded=True)
        assert np.abs(got - reference(chunks, q)).max() <= error
        ids = np.array([0, 341, 2999, 5])  # the rows a re-score reads, unaligned too
        np.testing.assert_array_equal(rows.rows(ids), chunks[ids].astype(np.float32))
    finally:
        rows.close()
        h.close()


def test_the_norm_bound_is_verify_s() -> None:
    """The one-pass scan's error bound assumes verify's norm tolerance (kept apart so that a
    query does not import verify)."""
    from kbpack.pack.vector_scan import NORM_TOLERANCE as SCAN_NORM_TOLERANCE
    from kbpack.verify.digests import NORM_TOLERANCE

    assert SCAN_NORM_TOLERANCE == NORM_TOLERANCE


def exact_top(scores: np.ndarray, k: int, mask: np.ndarray | None = None) -> list[int]:
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
        k = min(k, int(mask.sum()))
    return top(scores, k)


@pytest.mark.parametrize("use_simsimd", [True, False])
def test_one_pass_scan_stays_within_its_bound(stored: Stored, use_simsimd: bool) -> None:
    path, chunks, _, _ = stored
    if use_simsimd and simsimd_module() is None:
        pytest.skip("simsimd is not installed here")
    h, rows = open_rows(path, F.VEC_DATA)
    try:
        for q in queries():
            got, error = rows.scan_bounded(q, use_simsimd=use_simsimd, rounded=True)
            want = reference(chunks, q)
            assert got.dtype == np.float32
            # (0 means "the float32 scan": it and the reference round apart by ~1e-8)
            assert np.abs(got - want).max() <= error + 1e-6
            if use_simsimd:  # the query rounded to float16: a bound of a few 1e-4, not 0
                assert 0 < error < 1e-3
                assert np.abs(got - want).max() > 1e-6  # it is not the exact scan
            else:  # numpy converts each block: it is the exact scan
                assert error == 0.0
    finally:
        rows.close()
        h.close()


def test_rows_as_scanned_equal_the_checked_rows(stored: Stored) -> None:
    path, chunks, _, _ = stored
    h, rows = open_rows(path, F.VEC_DATA)
    try:
        ids = np.array([2999, 0, 341, 340, 1234, 1234, 682])  # chunk edges, a repeat, unsorted
        np.testing.assert_array_equal(rows.rows(ids), rows.checked_rows(ids))
        np.testing.assert_array_equal(rows.rows(ids), chunks[ids].astype(np.float32))
        assert rows.rows(np.zeros(0, np.int64)).shape == (0, DIMS)
        np.testing.assert_array_equal(rows.rows16(ids), chunks[ids])
    finally:
        rows.close()
        h.close()


def test_gathering_rows_reads_those_rows_only(stored: Stored) -> None:
    """``rows``/``rows16`` through the strided view of the mapped file allocate the rows asked
    for, not a copy of the whole view (np.take made one: file size x dims bytes, 147 GiB for
    the 100k-chunk synthetic pack, a MemoryError in every IVF search of it)."""
    import tracemalloc

    path, chunks, _, _ = stored
    h, rows = open_rows(path, F.VEC_DATA)
    try:
        assert rows._rows_view() is not None  # this file's chunks allow the strided view
        ids = np.array([2999, 0, 341, 1234])
        tracemalloc.start()
        try:
            got16, got32 = rows.rows16(ids), rows.rows(ids)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        np.testing.assert_array_equal(got16, chunks[ids])
        np.testing.assert_array_equal(got32, chunks[ids].astype(np.float32))
        assert peak < 1 << 20, peak  # the file is ~3 MB: a copy of the view is ~1 GB
    finally:
        rows.close()
        h.close()


@pytest.mark.parametrize("with_pieces", [False, True])
def test_one_pass_top_equals_the_exact_top(stored: Stored, with_pieces: bool) -> None:
    """The top 100 (ids, order, scores) from the one-pass scan and its re-score equal the exact
    scan's, with and without pieces and a filter; so do the scores of any chunk made exact."""
    from kbpack.search.dense import rounded_chunk_scores

    path, chunks, pieces, owner = stored
    hc, crow = open_rows(path, F.VEC_DATA)
    hp, prow = open_rows(path, F.PIECE_DATA)
    mask = np.random.default_rng(5).random(N_CHUNKS) < 0.3
    try:
        index = PieceIndex.from_columns(prow, owner) if with_pieces else None
        memory = PieceIndex.from_columns(pieces.astype(np.float32), owner) if with_pieces else None
        for q in queries():
            want_score, want_cos = chunk_scores(chunks.astype(np.float32), q, memory)
            for m in (None, mask):
                d = rounded_chunk_scores(crow, q, index)
                assert d.error > 0 and not d.exact.all()
                got = d.top(TOP, m)
                assert got.tolist() == exact_top(want_score, TOP, m)
                np.testing.assert_allclose(d.score[got], want_score[got], atol=1e-6)
                np.testing.assert_allclose(d.cos[got], want_cos[got], atol=1e-6)
                assert d.exact.sum() < N_CHUNKS // 2  # only the rows near the top re-scored
            ids = np.array([7, 3, 2999, 7])
            d.make_exact(ids)
            np.testing.assert_allclose(d.score[ids], want_score[ids], atol=1e-6)
            np.testing.assert_allclose(d.cos[ids], want_cos[ids], atol=1e-6)
            # asked again (a search does), after other rows were made exact: the same top
            assert d.top(TOP).tolist() == exact_top(want_score, TOP)
            assert d.top(TOP, mask).tolist() == exact_top(want_score, TOP, mask)
    finally:
        hc.close()
        hp.close()


def test_one_pass_top_is_exact_among_near_ties(tmp_path: Path) -> None:
    """Rows whose scores differ by less than the query's float16 rounding: the one-pass order
    alone is wrong here (checked, so this test can fail), the re-scored top is exact."""
    from kbpack.search.dense import rounded_chunk_scores

    rng = np.random.default_rng(17)
    base = rng.standard_normal(DIMS).astype(np.float32)
    base /= np.linalg.norm(base)
    near = base + 0.02 * rng.standard_normal((2000, DIMS)).astype(np.float32) / np.sqrt(DIMS)
    far = rng.standard_normal((1000, DIMS)).astype(np.float32)
    rows16 = np.concatenate([near, far])
    rows16 = (rows16 / np.linalg.norm(rows16, axis=1, keepdims=True)).astype(np.float16)
    path = tmp_path / "ties.h5"
    with h5py.File(path, "w", userblock_size=65536) as h:
        create_dataset(h, F.VEC_DATA, data=rows16)
    h, rows = open_rows(path, F.VEC_DATA)
    try:
        wrong = 0
        for q in (base, *queries(3)):
            want = reference(rows16, q)
            d = rounded_chunk_scores(rows, q, None)
            wrong += top(d.score.copy(), 10) != top(want, 10)
            got = d.top(TOP)
            assert got.tolist() == top(want, TOP)
            np.testing.assert_allclose(d.score[got], want[got], atol=1e-6)
        assert wrong  # the rounded scores alone misorder the near ties
    finally:
        rows.close()
        h.close()


def test_bf16_batch_scores_are_the_same_bits_alone_or_in_any_batch(stored: Stored) -> None:
    """``Bf16Rows`` (a server's batches): a query's estimates are the same bits alone, among 7
    others, among 19 and in another order; and within ``Bf16Rows.bound`` of the exact
    re-score's, the bound itself far under a cosine's scale."""
    from kbpack.pack.vector_scan import Bf16Rows, from_bf16, to_bf16

    path, chunks, _, _ = stored
    h, rows = open_rows(path, F.VEC_DATA)
    try:
        copy = Bf16Rows.of(rows)
        assert copy is not None and copy.bits.dtype == np.uint16
        assert copy.nbytes(rows) == copy.bits.nbytes == N_CHUNKS * DIMS * 2
        # each number the stored one rounded to nearest bfloat16 (8 significant bits)
        x = chunks.astype(np.float32)
        back = from_bf16(copy.bits)
        assert np.all(np.abs(back - x) <= np.abs(x) * 2.0**-8)
        assert 0 < copy.residual <= 2.0**-8 * 1.01 and copy.norm <= 1.01 * 1.004
        qs = queries(20)
        alone = [copy.scan_many(q[None])[0][:, 0] for q in qs]
        for batch in ([3, 0, 7, 1, 2, 5, 4, 6], list(range(19)), [19, 4]):
            got, errors = copy.scan_many(qs[batch])
            assert got.shape == (N_CHUNKS, len(batch))
            for col, j in enumerate(batch):
                assert np.array_equal(got[:, col], alone[j]), (batch, j)
                assert errors[col] == copy.bound(qs[j], to_bf16(qs[j]))
        for j, q in enumerate(qs[:5]):
            off = np.abs(alone[j].astype(np.float64) - reference(chunks, q)).max()
            assert 0 < off <= copy.bound(q, to_bf16(q)) < 0.01
    finally:
        h.close()


def test_no_bf16_copy_of_rows_that_are_not_finite() -> None:
    """A NaN among the rows: no copy (the stored-row scan meets the NaN and says which)."""
    from kbpack.pack.vector_scan import Bf16Rows

    rows = np.ones((50, 4), np.float16) / 2
    assert Bf16Rows.of(rows) is not None
    rows[37, 2] = np.nan
    assert Bf16Rows.of(rows) is None


def test_a_bf16_batch_gives_the_one_query_scan_s_top_bit_for_bit(stored: Stored) -> None:
    """The top 100 of each query of a batch scanned with bfloat16 copies (ids, order, exact
    scores, cosines) is the one-query float16 scan's, bit for bit, with pieces and a filter:
    the scans differ in their rounded scores only, and the re-score reads each row the same
    way whatever rows come with it."""
    from kbpack.pack.vector_scan import Bf16Rows
    from kbpack.search.dense import rounded_chunk_scores, rounded_chunk_scores_many

    path, _, _, owner = stored
    hc, crow = open_rows(path, F.VEC_DATA)
    hp, prow = open_rows(path, F.PIECE_DATA)
    mask = np.random.default_rng(5).random(N_CHUNKS) < 0.3
    try:
        index = PieceIndex.from_columns(prow, owner)
        copies = (Bf16Rows.of(crow), Bf16Rows.of(prow))
        qs = queries(9)
        batch = rounded_chunk_scores_many(crow, qs, index, copies)
        f16_batch = rounded_chunk_scores_many(crow, qs, index)
        differ = 0
        for q, d, d16 in zip(qs, batch, f16_batch, strict=True):
            one = rounded_chunk_scores(crow, q, index)
            assert np.array_equal(d16.score, one.score)  # the float16 batch: the same bits
            differ += not np.array_equal(d.score, one.score)
            assert one.error < d.error < 0.01  # a wider bound: more rows re-scored
            for m in (None, mask):
                ids = d.top(TOP, m)
                assert ids.tolist() == one.top(TOP, m).tolist()
                assert d.score[ids].tobytes() == one.score[ids].tobytes()
                assert d.cos[ids].tobytes() == one.cos[ids].tobytes()
        assert differ  # the rounded scores are other bits: this test compares two scans
    finally:
        hc.close()
        hp.close()
