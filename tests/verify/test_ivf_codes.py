"""Verify's check of the IVF codes (``kbpack.pack.ivf.faulty_code_rows``, spec/FORMAT.md
§3.13): every code row is its chunk's vector quantised within ``CODE_TOLERANCE`` steps, found
with the codes and the vectors each read in blocks, never whole."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import h5py
import numpy as np

from kbpack.pack.ivf import CODE_BLOCK, code_faults, encode_codes, faulty_code_rows


def unit_rows(n: int, dims: int, seed: int = 0) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=(n, dims))
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float16)


def fixture(n: int = 40_000, dims: int = 16) -> tuple[np.ndarray, np.ndarray, np.ndarray, Any]:
    vectors = unit_rows(n, dims)
    list_chunks = np.random.default_rng(3).permutation(n).astype(np.int32)
    codes, scale = encode_codes(vectors, list_chunks)
    return vectors, list_chunks, codes, scale


def whole(codes: np.ndarray, vectors: np.ndarray, list_chunks: np.ndarray, scale: Any) -> Any:
    """The whole comparison (what verify did with the codes in memory)."""
    off = np.flatnonzero(code_faults(codes, scale, vectors[list_chunks]))
    return int(off.size), off[:3].tolist()


class Reads:
    """An array whose reads are recorded: (rows read, by slice or by index)."""

    def __init__(self, a: np.ndarray) -> None:
        self.a, self.shape, self.reads = a, a.shape, []

    def __getitem__(self, key: Any) -> np.ndarray:
        rows = len(range(*key.indices(len(self.a)))) if isinstance(key, slice) else len(key)
        self.reads.append(("slice" if isinstance(key, slice) else "index", rows))
        return self.a[key]


def test_intact_codes_have_no_fault_and_are_read_in_blocks_once() -> None:
    vectors, list_chunks, codes, scale = fixture()
    c, v = Reads(codes), Reads(vectors)
    assert faulty_code_rows(c, v, list_chunks, scale) == (0, [])
    for reads in (c.reads, v.reads):  # each read once, a block at a time, never whole
        assert all(kind == "slice" and rows <= CODE_BLOCK for kind, rows in reads)
        assert sum(rows for _, rows in reads) == len(codes)


def test_damaged_rows_are_counted_and_named_as_the_whole_comparison_names_them() -> None:
    vectors, list_chunks, codes, scale = fixture()
    bad = codes.copy()
    rows = [5, 17_000, 17_001, 39_999]
    bad[rows[0], 3] += 3
    bad[rows[1]] = -bad[rows[1]]
    bad[rows[2]] = bad[rows[2] + 1]  # another chunk's code: plausible, not this chunk's
    bad[rows[3], 0] = -128  # out of the codes' range
    c = Reads(bad)
    found = faulty_code_rows(c, vectors, list_chunks, scale)
    assert found == whole(bad, vectors, list_chunks, scale) == (4, rows[:3])
    assert sum(rows for kind, rows in c.reads if kind == "index") == 4  # those rows again only
    # a code one step off at a near-tie is within the tolerance: not a fault
    x = vectors[list_chunks].astype(np.float32) / scale.astype(np.float32)
    frac = np.abs(x - np.floor(x) - 0.5)
    r, j = np.unravel_index(np.argmin(frac), frac.shape)
    assert frac[r, j] < 0.01
    tie = codes.copy()
    tie[r, j] = np.floor(x[r, j]) if tie[r, j] == np.ceil(x[r, j]) else np.ceil(x[r, j])
    assert not np.array_equal(tie, codes)
    assert faulty_code_rows(tie, vectors, list_chunks, scale) == (0, [])


def test_a_scale_too_small_faults_the_rows_whose_codes_it_clips() -> None:
    vectors, list_chunks, codes, scale = fixture()
    small = scale * np.float32(0.5)  # codes saturate at 127 where |v| > 63.5 steps
    found = faulty_code_rows(codes, vectors, list_chunks, small)
    assert found == whole(codes, vectors, list_chunks, small) and found[0] > 1000


def test_it_reads_h5py_datasets_where_they_lie(tmp_path: Path) -> None:
    vectors, list_chunks, codes, scale = fixture(n=50_000, dims=48)
    bad = codes.copy()
    bad[[7, 31_000]] = bad[[8, 31_001]]
    with h5py.File(tmp_path / "x.h5", "w") as h:
        h.create_dataset("codes", data=bad, chunks=(5000, 48), fletcher32=True)
        h.create_dataset("vectors", data=vectors, chunks=(3000, 48), fletcher32=True)
        found = faulty_code_rows(h["codes"], h["vectors"], list_chunks, scale)
    assert found == whole(bad, vectors, list_chunks, scale) == (2, [7, 31_000])
