"""The IVF index's int8 codes are written a block at a time (spec/FORMAT.md §3.13): a writer
never holds ``/ivf/codes`` whole (3.6 GB at 10M chunks of 384 dims), and the bytes written are
those of the whole array written at once."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import h5py
import numpy as np
import pytest

from kbpack.pack import format as F
from kbpack.pack import write_hdf5
from kbpack.pack.ivf import CODE_BLOCK, CodeSource, build_index, code_scale_of, encode_codes
from kbpack.pack.write_hdf5 import ElementWriter


def unit_rows(n: int, dims: int, seed: int = 0) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=(n, dims))
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float16)


def test_a_code_source_gives_the_codes_encode_codes_keeps_in_any_blocks() -> None:
    vectors = unit_rows(3000, 24)
    index = build_index(vectors, 8, codes=False)
    want, scale = encode_codes(vectors, index.list_chunks)
    source = CodeSource(vectors, index.list_chunks, scale)
    assert source.shape == want.shape and source.dtype == np.int8
    for rows in (1, 7, 1000, 5000):
        assert np.array_equal(np.concatenate(list(source.blocks(rows))), want), rows
    assert np.array_equal(source[1234:2345], want[1234:2345])
    streamed = build_index(vectors, 8, stream=True)
    assert isinstance(streamed.codes, CodeSource)
    assert np.array_equal(streamed.code_scale, scale) and np.array_equal(streamed.codes[:], want)


def _write(path: Path, data: np.ndarray | CodeSource) -> str:
    with h5py.File(path, "w", userblock_size=F.USERBLOCK_SIZE, libver=("v110", "v110")) as h:
        h.create_group(F.IVF)
        elements: dict[str, str] = {}
        ElementWriter(h, elements).put_any(F.IVF_CODES, data)
    return elements[F.IVF_CODES]


def test_streamed_codes_are_the_bytes_of_the_whole_array_written_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    vectors = unit_rows(3000, 384)  # 682 rows an HDF5 chunk: five chunks
    index = build_index(vectors, 10, codes=False)
    codes, scale = encode_codes(vectors, index.list_chunks)
    source = CodeSource(vectors, index.list_chunks, scale)
    whole = _write(tmp_path / "whole.h5", codes)
    monkeypatch.setattr(write_hdf5, "CODE_BLOCK", 1500)  # three writes of two chunks each
    blocks = _write(tmp_path / "blocks.h5", source)
    assert blocks == whole  # the manifest's digest
    assert (tmp_path / "blocks.h5").read_bytes() == (tmp_path / "whole.h5").read_bytes()
    with h5py.File(tmp_path / "blocks.h5") as h:
        assert h[F.IVF_CODES].chunks == (682, 384)
        assert np.array_equal(h[F.IVF_CODES][()], codes)


def test_writing_streamed_codes_never_holds_them_whole(tmp_path: Path) -> None:
    n, dims = 1_000_000, 16  # codes: 16 MB
    spool = tmp_path / "vectors.f16"
    unit_rows(n, dims).tofile(spool)
    vectors = np.memmap(spool, dtype="<f2", mode="r", shape=(n, dims))  # as a writer's spool
    list_chunks = np.random.default_rng(1).permutation(n).astype(np.int32)
    tracemalloc.start()
    try:
        source = CodeSource(vectors, list_chunks, code_scale_of(vectors))
        digest = _write(tmp_path / "codes.h5", source)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < n * dims / 2, f"{peak} bytes at the peak: the codes were held whole"
    assert CODE_BLOCK * dims * 4 < n * dims / 2  # (a block's float32 copy is below it)
    codes, _ = encode_codes(vectors, list_chunks)
    assert digest == _write(tmp_path / "whole.h5", codes)
