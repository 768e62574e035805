"""The approximate (IVF) index, spec/FORMAT.md §3.13: exact when every list is probed, written
by build/merge/split/migrate/index, checked by verify (a tampered index fails in one line)."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import replace
from pathlib import Path

import h5py
import numpy as np
import pytest
from click.testing import CliRunner
from independent_reader import ivf_check
from scale_corpus import PART_A, PART_B, build_pack, write_folder

import kbpack
from kbpack.cli.main import cli
from kbpack.errors import KbpackError
from kbpack.ops.merge import merge_packs
from kbpack.ops.migrate import migrate_pack
from kbpack.ops.split import split_pack
from kbpack.pack import format as F
from kbpack.pack.ivf import (
    CODE_TOLERANCE,
    build_index,
    check_index,
    code_faults,
    default_lists,
    encode_codes,
)
from kbpack.pack.read import DamagedDataError, PackReader
from kbpack.search.dense import rounded_chunk_scores
from kbpack.search.ivf import code_scores, ivf_dense_scores, top_k
from kbpack.testing.fuzz.pack_mutations import element_digests, restamp
from kbpack.verify.pipeline import verify_pack

QUESTIONS = ["how do I rotate the logs?", "access denied error", "backup count", "installazione"]


def clustered(n: int, dims: int, seed: int = 0) -> np.ndarray:
    """Unit float16 vectors around 12 centres: what an index can work with."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(12, dims))
    v = centres[rng.integers(0, 12, n)] + 0.6 * rng.normal(size=(n, dims))
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float16)


def test_probing_every_list_returns_the_exact_top_k() -> None:
    vectors = clustered(3000, 32)
    index = build_index(vectors, 16)
    centroids = index.centroids
    queries = clustered(20, 32, seed=1).astype(np.float32)
    recalls = []
    for q in queries:
        exact = rounded_chunk_scores(vectors, q, None)
        want = exact.top(10)
        ids, cos = top_k(vectors, index, centroids, q, 10, probe_lists=16)
        assert ids.tolist() == want.tolist()
        # the exact path's scores: both re-score their shortlists from the float16 rows in
        # float32; the shortlists differ (int8 codes here), and BLAS may round a row's dot
        # product differently in another batch, by an ulp or so
        assert np.allclose(cos, exact.cos[want], rtol=0, atol=1e-6)
        few, _ = top_k(vectors, index, centroids, q, 10, probe_lists=2)
        recalls.append(len(set(few.tolist()) & set(want.tolist())) / 10)
    assert np.mean(recalls) < 1.0  # two lists of 16 really read less (and miss some)


def test_the_index_partitions_the_chunks_by_nearest_centroid_deterministically() -> None:
    vectors = clustered(2000, 16)
    a, b = build_index(vectors, 20), build_index(vectors, 20)
    for x, y in ((a.centroids, b.centroids), (a.list_offsets, b.list_offsets)):
        assert np.array_equal(x, y)
    assert np.array_equal(a.list_chunks, b.list_chunks)
    assert check_index(a.centroids, a.list_offsets, a.list_chunks, 2000, 16) is None
    lists = np.repeat(np.arange(20), np.diff(a.list_offsets))
    nearest = np.argmax(vectors.astype(np.float32) @ a.centroids.astype(np.float32).T, axis=1)
    assert np.array_equal(lists, nearest[a.list_chunks])
    assert default_lists(1_000_000) == 2000


def test_check_index_names_each_fault_in_one_line() -> None:
    index = build_index(clustered(500, 8), 5)
    c, o, ch = index.centroids, index.list_offsets, index.list_chunks.copy()
    twice = ch.copy()
    twice[1] = twice[0]
    assert "is in more than one list" in str(check_index(c, o, twice, 500, 8))
    assert "rows of (8,) numbers" in str(check_index(c, o, ch, 500, 9))
    bad = o.copy()
    bad[2], bad[3] = bad[3], bad[2]
    if bad[2] != bad[3]:
        assert "must not decrease" in str(check_index(c, bad, ch, 500, 8))
    nan = c.copy()
    nan[3, 0] = np.nan
    assert "centroid 3 is not finite" in str(check_index(nan, o, ch, 500, 8))


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tiny_gguf import build_tiny_gguf

    return build_tiny_gguf(tmp_path_factory.mktemp("ivf") / "ivf.gguf", name="ivf", window=256)


@pytest.fixture(scope="module")
def packs(tmp_path_factory: pytest.TempPathFactory, model: Path) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("ivf-packs")
    return {
        "a": build_pack(
            write_folder(root / "a", PART_A), root / "a.kbpack", model, ivf=True, ivf_lists=4
        ),
        "b": build_pack(write_folder(root / "b", PART_B), root / "b.kbpack", model),
        "a_src": root / "a",
    }


def _ids(p: kbpack.Pack, q: str, **kw: object) -> list[tuple[int, float]]:
    return [(r.chunk, r.score) for r in p.search(q, k=5, **kw).results]  # type: ignore[arg-type]


def test_a_pack_with_the_index_verifies_and_searches_exactly_when_every_list_is_probed(
    packs: dict[str, Path], model: Path
) -> None:
    pack = packs["a"]
    assert verify_pack(pack).intact
    with PackReader(pack) as r:
        assert r.counts["ivf_lists"] == 4
        assert r.attrs(F.IVF)["probe"] == 4
    assert not PackReader(packs["b"]).has_ivf  # small packs: no index unless asked for
    assert ivf_check(str(pack)) == 4  # the spec's rules, read with h5py and numpy alone
    with kbpack.open(pack, model=model) as p:
        for q in QUESTIONS:
            for mode in ("dense", "hybrid"):
                assert _ids(p, q, mode=mode, probe=4) == _ids(p, q, mode=mode, exact=True), q
        one = p.searcher
        one.use_ivf(False, 1)
        scored = one.corpus.dense_scores(one.query_vector(QUESTIONS[0])).scored
        assert scored is not None and 0 < scored.sum() < scored.size  # one list of four
        q = one.query_vector(QUESTIONS[0])
        assert np.flatnonzero(scored).tolist() == ivf_check(str(pack), 1, q)  # as the spec says
        for mode in ("dense", "hybrid"):  # chunks of other lists are no dense candidates
            for r in p.search(QUESTIONS[0], k=5, mode=mode, probe=1).results:
                assert r.distance is not None and np.isfinite(r.distance)


def test_query_cli_takes_exact_and_probe(packs: dict[str, Path], model: Path) -> None:
    runner = CliRunner()
    base = ["query", str(packs["a"]), "rotate logs", "--model", str(model), "--json"]
    exact = runner.invoke(cli, [*base, "--exact"])
    probed = runner.invoke(cli, [*base, "--probe", "4"])
    assert exact.exit_code in (0, 3) and probed.exit_code == exact.exit_code, exact.output
    assert json.loads(probed.stdout)["results"] == json.loads(exact.stdout)["results"]
    bad = runner.invoke(cli, [*base, "--probe", "0"])
    assert bad.exit_code == 2


def _tampered(src: Path, out: Path, edit: str) -> Path:
    shutil.copyfile(src, out)
    with h5py.File(out, "r+") as h:
        ds = h[F.IVF_LIST_CHUNKS]
        col = ds[()]
        if edit == "twice":
            col[1] = col[0]
        else:  # a chunk missing: its row names a chunk that is not a row
            col[0] = col.size
        ds[...] = col
        digests = element_digests(h)
    restamp(out, "elements", digests)  # the digests agree: only the invariant can tell
    return out


@pytest.mark.parametrize(
    ("edit", "says"), [("twice", "more than one list"), ("missing", "not a chunk row")]
)
def test_a_tampered_index_fails_verify_in_one_line(
    packs: dict[str, Path], tmp_path: Path, model: Path, edit: str, says: str
) -> None:
    bad = _tampered(packs["a"], tmp_path / "bad.kbpack", edit)
    report = verify_pack(bad)
    assert not report.intact
    found = [f for f in report.as_dict()["findings"] if f["code"] == "ivf"]
    assert len(found) == 1 and says in found[0]["detail"], report.as_dict()["findings"]
    assert found[0]["path"] == F.IVF_LIST_CHUNKS and "\n" not in found[0]["detail"]
    with (
        kbpack.open(bad, model=model) as p,
        pytest.raises(DamagedDataError, match="/ivf"),
    ):
        p.search("rotate logs", mode="dense")
    with kbpack.open(bad, model=model) as p:  # exact search never reads the index
        assert p.search("rotate logs", mode="dense", exact=True).results


def test_an_index_whose_bytes_changed_fails_its_digest(packs: dict[str, Path], tmp_path: Path):
    out = tmp_path / "flipped.kbpack"
    shutil.copyfile(packs["a"], out)
    with h5py.File(out, "r+") as h:
        col = h[F.IVF_LIST_OFFSETS][()]
        col[1] += 1
        h[F.IVF_LIST_OFFSETS][...] = col
    restamp(out, "bytes")
    findings = verify_pack(out).as_dict()["findings"]
    assert any(f["code"] == "digest-mismatch" and f["path"] == F.IVF_LIST_OFFSETS for f in findings)


def test_merge_split_and_migrate_keep_the_index(packs: dict[str, Path], tmp_path: Path) -> None:
    merged = tmp_path / "merged.kbpack"
    report = merge_packs([packs["a"], packs["b"]], merged)
    assert any("IVF index rebuilt" in n for n in report.notes)
    assert verify_pack(merged).intact
    with PackReader(merged) as r:
        index = r.ivf_index()
        assert index is not None and index.list_chunks.size == r.counts["chunks"]

    size = merged.stat().st_size
    members = split_pack(merged, tmp_path / "part.kbpack", size - 1).members
    assert len(members) >= 2
    for m in members:
        path = Path(m["path"])
        assert verify_pack(path).intact
        with PackReader(path) as r:
            # each member indexes its own vectors (a member of no chunk has none to index)
            assert r.has_ivf == (r.counts["chunks"] > 0)
            assert (r.ivf_index() is not None) == r.has_ivf

    migrated = tmp_path / "migrated.kbpack"
    migrate_pack(packs["a"], migrated)
    assert verify_pack(migrated).intact
    with PackReader(packs["a"]) as old, PackReader(migrated) as new:
        a, b = old.ivf_index(), new.ivf_index()
        assert a is not None and b is not None
        for x, y in ((a.centroids, b.centroids), (a.list_chunks, b.list_chunks)):
            assert np.array_equal(x, y)  # the same vectors: the same index


def test_kbpack_index_adds_the_index_without_re_embedding(
    packs: dict[str, Path], tmp_path: Path, model: Path
) -> None:
    src = packs["b"]  # built without an index
    out = tmp_path / "indexed.kbpack"
    result = CliRunner().invoke(cli, ["index", str(src), "--ivf-lists", "3", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "IVF index added: 3 lists" in result.output
    assert verify_pack(out).intact
    with PackReader(src) as old, PackReader(out) as new:
        assert new.counts["ivf_lists"] == 3 and not old.has_ivf
        for path in (F.VEC_DATA, F.CHUNK_FROM, F.BM25_CHUNK):  # nothing else changed
            assert np.array_equal(old.column(path), new.column(path))
    with kbpack.open(out, model=model) as p:
        assert _ids(p, "logs", mode="dense", probe=3) == _ids(p, "logs", mode="dense", exact=True)
    shown = CliRunner().invoke(cli, ["inspect", str(out)])
    assert "ivf index" in shown.output and "3 lists" in shown.output
    assert "ivf index" not in CliRunner().invoke(cli, ["inspect", str(src)]).output
    again = CliRunner().invoke(cli, ["index", str(out), "--ivf", "--json"])  # in place: rebuilt
    assert again.exit_code == 0 and json.loads(again.stdout)["replaced"] is True
    assert verify_pack(out).intact
    none = CliRunner().invoke(cli, ["index", str(src)])
    assert none.exit_code == 2 and "--ivf" in none.output


def test_update_keeps_the_index(packs: dict[str, Path], tmp_path: Path, model: Path) -> None:
    from kbpack.ops.build import BuildOptions
    from kbpack.ops.update import update_pack

    out = tmp_path / "updated.kbpack"
    opts = BuildOptions(sources=[packs["a_src"]], out=out, model=model, threads=1, pieces=None)
    update_pack(packs["a"], opts)
    assert verify_pack(out).intact
    with PackReader(out) as r:
        index = r.ivf_index()
        assert r.has_ivf and index is not None and index.codes is not None  # codes rebuilt too


# -- the int8 codes (/ivf/codes, /ivf/code_scale) --------------------------------------------


def test_codes_are_the_vectors_quantised_in_list_order_and_bound_the_estimate() -> None:
    vectors = clustered(2000, 48)
    index = build_index(vectors, 12)
    codes, scale = index.codes, index.code_scale
    assert codes is not None and scale is not None
    assert codes.dtype == np.int8 and codes.shape == (2000, 48) and scale.dtype == np.float32
    v = vectors.astype(np.float32)
    # row r is chunk list_chunks[r]'s vector, within half a step (+ tolerance) per component
    assert np.all(np.abs(codes * scale - v[index.list_chunks]) <= CODE_TOLERANCE * scale + 1e-7)
    assert not code_faults(codes, scale, v[index.list_chunks]).any()
    assert np.abs(codes).max() == 127  # the scale is each dimension's largest magnitude
    # every estimate is within the stated bound of the exact float32 cosine, for any query
    starts, ends = np.array([0]), np.array([2000])
    for q in clustered(30, 48, seed=5).astype(np.float32):
        est, bound = code_scores(codes, scale, q, starts, ends)
        exact = v[index.list_chunks] @ q
        assert np.abs(est - exact).max() <= bound
        assert bound < 0.1  # and it is a useful bound, not a vacuous one


def test_a_search_with_codes_equals_one_without_and_reads_a_shortlist() -> None:
    vectors = clustered(3000, 32)
    index = build_index(vectors, 16)
    plain = replace(index, codes=None, code_scale=None)
    for q in clustered(10, 32, seed=2).astype(np.float32):
        for probe_lists in (2, 5, 16):
            a = top_k(vectors, index, index.centroids, q, 10, probe_lists)
            b = top_k(vectors, plain, index.centroids, q, 10, probe_lists)
            assert a[0].tolist() == b[0].tolist()  # the same chunks: the top of the probed
            assert np.allclose(a[1], b[1], rtol=0, atol=1e-6)
        d = ivf_dense_scores(vectors, index, index.centroids, q, None, 16)
        d.top(10)
        assert 10 <= d.exact.sum() < 3000  # re-scored: those that could be in the top 10


def _codes_damaged(src: Path, out: Path) -> tuple[Path, int]:
    shutil.copyfile(src, out)
    with h5py.File(out, "r+") as h:
        codes = h[F.IVF_CODES][()]
        row = codes.shape[0] // 2
        codes[row] = -codes[row]  # a plausible row (in range), but another vector's
        codes[row, 0] = 99 if codes[row, 0] != 99 else -99
        h[F.IVF_CODES][...] = codes
        digests = element_digests(h)
    restamp(out, "elements", digests)  # the digests agree: only the invariant can tell
    return out, row


def test_verify_finds_a_damaged_code_row(packs: dict[str, Path], tmp_path: Path) -> None:
    with h5py.File(packs["a"], "r") as h:
        assert h[F.IVF_CODES].dtype == np.int8 and h[F.IVF_CODE_SCALE].dtype == np.float64
        assert h[F.IVF_CODES].compression is None and h[F.IVF_CODES].fletcher32
    bad, row = _codes_damaged(packs["a"], tmp_path / "codes.kbpack")
    report = verify_pack(bad)
    assert not report.intact
    found = [f for f in report.as_dict()["findings"] if f["code"] == "ivf"]
    assert len(found) == 1, report.as_dict()["findings"]
    assert found[0]["path"] == F.IVF_CODES and f"rows {row}" in found[0]["detail"]
    assert "\n" not in found[0]["detail"]


def test_a_pack_whose_index_has_no_codes_still_searches(
    packs: dict[str, Path], tmp_path: Path, model: Path
) -> None:
    old = tmp_path / "no-codes.kbpack"
    shutil.copyfile(packs["a"], old)
    with h5py.File(old, "r+") as h:
        for path in F.IVF_CODE_DATASETS:
            del h[path]
        digests = element_digests(h)
    restamp(old, "elements", digests)
    assert verify_pack(old).intact
    with PackReader(old) as r:
        index = r.ivf_index()
        assert index is not None and index.codes is None
    with kbpack.open(old, model=model) as p, kbpack.open(packs["a"], model=model) as q:
        for text in QUESTIONS:
            for probe_lists in (1, 4):
                got = _ids(p, text, mode="dense", probe=probe_lists)
                assert got == _ids(q, text, mode="dense", probe=probe_lists), text
    # and a lone code dataset is one finding
    half = tmp_path / "half.kbpack"
    shutil.copyfile(packs["a"], half)
    with h5py.File(half, "r+") as h:
        del h[F.IVF_CODE_SCALE]
        digests = element_digests(h)
    restamp(half, "elements", digests)
    findings = verify_pack(half).as_dict()["findings"]
    assert [f["path"] for f in findings] == [F.IVF_CODE_SCALE], findings


def test_the_reader_maps_the_codes_and_merge_split_migrate_keep_them(
    packs: dict[str, Path], tmp_path: Path
) -> None:
    with PackReader(packs["a"]) as r:
        index = r.ivf_index()
        assert index is not None and index.codes is not None and index.codes.mapped
        vectors = r.column(F.VEC_DATA)
        want, scale = encode_codes(vectors, index.list_chunks)
        assert np.array_equal(index.codes[0 : len(want)], want)  # round trip, bit for bit
        assert np.array_equal(index.code_scale, scale)
        n = len(want)
        parts = index.codes.parts(1, n - 1)  # rows across HDF5 chunks, in order
        assert np.array_equal(np.concatenate(parts), want[1 : n - 1])
    merged = tmp_path / "merged.kbpack"
    merge_packs([packs["a"], packs["b"]], merged)
    members = split_pack(merged, tmp_path / "part.kbpack", merged.stat().st_size - 1).members
    migrated = tmp_path / "migrated.kbpack"
    migrate_pack(packs["a"], migrated)
    for path in [merged, migrated, *(Path(m["path"]) for m in members)]:
        assert verify_pack(path).intact, path
        with PackReader(path) as r:
            if not r.has_ivf:
                continue
            index = r.ivf_index()
            assert index is not None and index.codes is not None, path
            assert ivf_check(str(path)) == index.lists  # the spec's rule, read independently
            v = r.column(F.VEC_DATA).astype(np.float32)
            assert not code_faults(
                index.codes[0 : len(v)], index.code_scale, v[index.list_chunks]
            ).any()


def test_code_rows_read_runs_across_hdf5_chunks_where_they_lie(tmp_path: Path) -> None:
    from kbpack.pack.ivf import CodeRows

    rng = np.random.default_rng(4)
    codes = rng.integers(-127, 128, size=(50, 6)).astype(np.int8)
    path = tmp_path / "codes.h5"
    with h5py.File(path, "w") as h:
        h.create_dataset("c", data=codes, chunks=(7, 6), fletcher32=True, maxshape=(None, 6))
        h.create_dataset("z", data=codes, chunks=(7, 6), compression="gzip")
    with h5py.File(path, "r") as h:
        mapped, inflated = CodeRows(h["c"], h["c"], str(path)), CodeRows(h["z"], h["z"], str(path))
        assert mapped.mapped and not inflated.mapped  # deflated bytes are not the values
        for rows in ((0, 50), (3, 4), (6, 8), (13, 36), (49, 50), (10, 10)):
            for where in (mapped, inflated):
                parts = where.parts(*rows)
                got = np.concatenate(parts) if parts else np.zeros((0, 6), np.int8)
                assert np.array_equal(got, codes[rows[0] : rows[1]]), rows
        assert len(mapped.parts(6, 8)) == 2  # one view per chunk the run crosses, no copy
        mapped.close()


def test_mth_largest_is_exact_whatever_the_sample() -> None:
    from kbpack.search.ivf import mth_largest

    rng = np.random.default_rng(7)
    for size in (5, 100, 40_000, 200_000):
        values = rng.normal(size=size).astype(np.float32)
        values[rng.integers(0, size, size // 10)] = -np.inf  # masked rows
        values[:3] = values.max() + 1  # ties at the top
        for m in (1, 3, 4, 10, 100):
            if m < size:
                assert mth_largest(values, m) == np.sort(values)[::-1][m - 1], (size, m)


# -- a vector that is not finite, whose code is (issue 35 item 4's closing note) ---------------


def _nan_vector(src: Path, out: Path, chunk: int) -> Path:
    """A copy of ``src`` whose chunk ``chunk`` has a NaN vector, its code left as it was (finite,
    plausible) and every digest restamped: only verify's invariants, or reading the vector,
    can tell."""
    shutil.copyfile(src, out)
    with h5py.File(out, "r+") as h:
        vectors = h[F.VEC_DATA][()]
        vectors[chunk, 5] = np.nan
        h[F.VEC_DATA][...] = vectors
        digests = element_digests(h)
    restamp(out, "elements", digests)
    return out


def test_a_nan_vector_whose_code_is_finite_is_named_by_verify_and_fails_the_query_reading_it(
    packs: dict[str, Path], tmp_path: Path, model: Path
) -> None:
    question = QUESTIONS[0]
    with kbpack.open(packs["a"], model=model) as p:  # the chunk this query's dense top is
        best = p.search(question, k=1, mode="dense").results[0].chunk
    bad = _nan_vector(packs["a"], tmp_path / "nan.kbpack", best)
    with h5py.File(bad, "r") as h:  # its code is the one it had: finite, in range
        assert np.isfinite(h[F.IVF_CODES][()]).all() and np.abs(h[F.IVF_CODES][()]).max() <= 127
    findings = verify_pack(bad).as_dict()["findings"]
    named = [f for f in findings if f["code"] == "vector-not-finite"]
    assert len(named) == 1 and named[0]["path"] == F.VEC_DATA, findings
    assert re.search(rf"\brows? {best}\b", named[0]["detail"]), named
    assert "\n" not in named[0]["detail"]
    assert not [f for f in findings if f["code"] in ("check-failed", "element-unreadable")]
    # the query's shortlist holds that chunk (its code scores as before): reading its vector
    # must fail in one line naming the element and the chunk, as the exact scan does
    for kw in ({"mode": "dense"}, {"mode": "hybrid"}, {"mode": "dense", "exact": True}):
        with (
            kbpack.open(bad, model=model) as p,
            pytest.raises(DamagedDataError, match=f"chunk {best} are not finite") as e,
        ):
            p.search(question, k=5, **kw)  # type: ignore[arg-type]
        assert F.VEC_DATA in str(e.value) and "\n" not in str(e.value), kw


def test_index_and_merge_refuse_to_index_a_nan_vector_in_one_line(
    packs: dict[str, Path], tmp_path: Path
) -> None:
    # they published an index with a NaN centroid and scale, which every query then refused
    bad = _nan_vector(packs["b"], tmp_path / "nan.kbpack", 3)
    out = tmp_path / "indexed.kbpack"
    result = CliRunner().invoke(cli, ["index", str(bad), "--ivf-lists", "3", "-o", str(out)])
    assert result.exit_code == 1, result.output
    assert "chunk 3 is not finite" in result.output and F.VEC_DATA in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == ["nan.kbpack"]
    merged = tmp_path / "merged.kbpack"
    with pytest.raises(KbpackError, match="chunk 3 is not finite") as e:
        merge_packs([_nan_vector(packs["a"], tmp_path / "nan-a.kbpack", 3), packs["b"]], merged)
    assert "\n" not in str(e.value) and not merged.exists()


def test_re_scoring_a_nan_row_of_plain_arrays_raises_value_error() -> None:
    vectors = clustered(3000, 32)
    index = build_index(vectors, 16)  # codes of the intact vectors
    q = vectors[7].astype(np.float32)  # chunk 7's own vector: it is in the shortlist
    bad = vectors.copy()
    bad[7, 3] = np.nan
    with pytest.raises(ValueError, match="chunk 7 are not finite"):
        top_k(bad, index, index.centroids, q, 10, probe_lists=16)
