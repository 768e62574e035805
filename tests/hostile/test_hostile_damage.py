"""Damage in transit: bit flips anywhere in the file (header included), truncation, appended
bytes, zeroed sectors. Every one must be detected, and damage inside an element's data must be
traced to that element.

Flips that step 1 already catches are checked with ``locate_damage=False`` (HDF5 is not parsed,
a millisecond each); flips that leave step 1 clean -- inside the manifest's own fields -- run
every step, because only the later steps can see them.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import h5py
import pytest

from kbpack.pack import format as F
from kbpack.pack.storage import data_spans
from kbpack.verify.pipeline import verify_pack
from tests.fixture_pack import make_pack

N_FLIPS = 1000
N_TRUNCATIONS = 100


@pytest.fixture(scope="module")
def pack(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_pack(tmp_path_factory.mktemp("damage") / "pack.kbpack")


def detected(path: Path, data: bytes) -> set[str]:
    path.write_bytes(data)
    return {f.code for f in verify_pack(path, locate_damage=False).findings}


def test_every_single_bit_flip_is_detected(pack: Path, tmp_path: Path) -> None:
    data = pack.read_bytes()
    rng = random.Random(20261130)
    target = tmp_path / "flipped.kbpack"
    missed: list[int] = []
    by_code: Counter[str] = Counter()
    in_header = 0
    for _ in range(N_FLIPS):
        bit = rng.randrange(len(data) * 8)
        damaged = bytearray(data)
        damaged[bit // 8] ^= 1 << (bit % 8)
        found = detected(target, bytes(damaged))
        in_header += bit // 8 < F.USERBLOCK_SIZE
        if not found:
            missed.append(bit // 8)
        by_code.update(found)
    print(f"\n{N_FLIPS} flips ({in_header} in the header): {dict(by_code.most_common())}")
    assert missed == []
    assert in_header > 100 and N_FLIPS - in_header > 100  # both regions were hit


def test_flips_inside_element_data_name_the_element(pack: Path, tmp_path: Path) -> None:
    with h5py.File(pack, "r") as h:
        spans = [
            (p, *data_spans(h[p])[0])
            for p in (F.CHUNK_FROM, F.CHUNK_TO, F.SEC_FROM, F.BM25_TF, F.BM25_CHUNK, F.VEC_DATA)
        ]
    data = pack.read_bytes()
    rng = random.Random(7)
    target = tmp_path / "flipped.kbpack"
    for path, offset, size in spans:
        for _ in range(4):
            at = offset + rng.randrange(size)
            damaged = bytearray(data)
            damaged[at] ^= 1 << rng.randrange(8)
            target.write_bytes(damaged)
            found = {(f.code, f.path) for f in verify_pack(target).findings}
            assert ("hash-mismatch", "header") in found
            # format 2 stores data checksummed: HDF5 refuses the read before a digest is taken
            assert {("element-unreadable", path), ("digest-mismatch", path)} & found, (path, at)


def test_truncation_at_random_lengths(pack: Path, tmp_path: Path) -> None:
    data = pack.read_bytes()
    rng = random.Random(3)
    lengths = {0, 1, 8, F.USERBLOCK_SIZE - 1, F.USERBLOCK_SIZE, len(data) - 1}
    while len(lengths) < N_TRUNCATIONS:
        lengths.add(rng.randrange(len(data)))
    target = tmp_path / "short.kbpack"
    for n in sorted(lengths):
        found = detected(target, data[:n])
        assert found & {"size-mismatch", "not-a-pack"}, (n, found)


@pytest.mark.parametrize("extra", [b"\0", b"\0" * 4096, b"appended junk\n" * 100])
def test_appended_bytes(pack: Path, tmp_path: Path, extra: bytes) -> None:
    assert "size-mismatch" in detected(tmp_path / "long.kbpack", pack.read_bytes() + extra)


def test_every_zeroed_sector_that_held_data(pack: Path, tmp_path: Path) -> None:
    data = pack.read_bytes()
    target = tmp_path / "zeroed.kbpack"
    tried = 0
    for at in range(0, len(data), 512):
        if not any(data[at : at + 512]):
            continue  # zeroing zeros changes nothing: not damage
        tried += 1
        damaged = data[:at] + b"\0" * len(data[at : at + 512]) + data[at + 512 :]
        assert detected(target, damaged), at
    assert tried > 50
