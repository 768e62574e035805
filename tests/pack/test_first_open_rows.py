"""The first open's sandboxed check (kbpack/pack/preflight.py) no longer reads every string row:
the reader checks each row's HDF5 global heap reference as it reads the row (issue 35, item 3).

A string row is 16 bytes in its contiguous column: length, collection address, object index.
HDF5 follows it into a global heap collection with no checksum, trusting what it finds: a
malformed collection stalls or overruns it (tests/test_fuzz_findings.py), an object of another
length makes it copy more than it allocated. These packs are crafted so that only a row leads
there: the first open must let them in (it reads no row), and the read of that row must refuse
them in one line naming the element and the row.
"""

from __future__ import annotations

import random
import shutil
import struct
from pathlib import Path

import h5py
import pytest

import kbpack.pack.global_heap as global_heap
from kbpack.errors import PackError
from kbpack.pack import format as F
from kbpack.pack.global_heap import SIGNATURE
from kbpack.pack.manifest import read_header
from kbpack.pack.preflight import (
    Outcome,
    _recall_outcome,
    is_remembered_clean,
    memo_key,
    remember_parsed,
)
from kbpack.pack.read import DamagedDataError, PackReader
from kbpack.pack.storage import data_spans
from tests.fixture_pack import GOLDEN, kbpack

USERBLOCK = F.USERBLOCK_SIZE


def row_reference(pack: Path, path: str, row: int) -> tuple[int, tuple[int, int, int]]:
    """(file offset, (length, collection address, object index)) of a string row."""
    with h5py.File(pack, "r", locking=False) as h:
        at = int(h[path].id.get_offset()) + 16 * row
    with open(pack, "rb") as f:
        f.seek(at)
        return at, struct.unpack("<IQI", f.read(16))


def poke(pack: Path, at: int, data: bytes) -> None:
    with open(pack, "r+b") as f:
        f.seek(at)
        f.write(data)


def stalled_collection_in_vectors(pack: Path) -> int:
    """Write a collection HDF5 would loop on forever (a free-space object of size 0) in the
    middle of /vectors/data's stored chunk, where no attribute and no HDF5 metadata leads (and
    HDF5's 512-byte speculative reads of the headers beside it do not reach): only a row
    crafted to point there. Returns its file offset."""
    with h5py.File(pack, "r") as h:
        start, length = data_spans(h[F.VEC_DATA])[0]
        at = start + length // 2 // 8 * 8
    size = 64
    body = SIGNATURE + size.to_bytes(8, "little")
    body += (1).to_bytes(2, "little") + bytes(6) + (5).to_bytes(8, "little") + b"hello\0\0\0"
    body += bytes(2) + bytes(6) + (0).to_bytes(8, "little")  # free space of size 0: a stall
    poke(pack, at, body.ljust(size, b"\0"))
    return at


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KBPACK_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_a_row_leading_to_a_stalled_collection_is_refused_when_read(
    tmp_path: Path, cache: Path
) -> None:
    pack = Path(shutil.copy(GOLDEN, tmp_path / "p.kbpack"))
    fake = stalled_collection_in_vectors(pack)
    at, (_length, _address, _index) = row_reference(pack, F.SEC_TITLE, 2)
    poke(pack, at, struct.pack("<IQI", 5, fake - USERBLOCK, 1))
    with PackReader(pack) as r:  # the first open reads no row: it lets the pack in
        assert r.rows_checked_as_read
        assert r.string_at(F.SEC_TITLE, 1)  # a row beside it reads as before
        with pytest.raises(DamagedDataError) as e:
            r.string_at(F.SEC_TITLE, 2)
    message = str(e.value)
    assert "\n" not in message and F.SEC_TITLE in message and "row 2" in message
    assert f"global heap collection at byte {fake}" in message and "has size 0" in message
    # every command that reads the row stops there in one line (a hang fails the test)
    for args in (["export", str(pack), "--what", "sections"], ["verify", str(pack)]):
        r2 = kbpack(*args, cache=cache)
        assert r2.returncode == 1, (args, r2.stdout, r2.stderr)
        if args[0] == "export":
            assert r2.stderr.count("\n") == 1 and "row 2" in r2.stderr, r2.stderr


@pytest.mark.parametrize(
    ("craft", "says"),
    [
        # HDF5 would copy n bytes into n - 1
        (lambda n, a, i: (n - 1 if n > 1 else n + 1, a, i), "holds"),
        (lambda n, a, i: (n + 7, a, i), "holds"),
        (lambda n, a, i: (n, a, 999), "lacks"),  # an object the collection does not hold
        (lambda n, a, i: (n, a, 0), "lacks"),  # the free space
        (lambda n, a, i: (n, a + 8, i), "no collection there"),
        (lambda n, a, i: (n, 2**40, i), "past the end of the file"),
    ],
)
def test_a_query_refuses_a_text_whose_heap_reference_is_crafted(
    tmp_path: Path, cache: Path, craft: object, says: str
) -> None:
    pack = Path(shutil.copy(GOLDEN, tmp_path / "p.kbpack"))
    n_docs = read_header(pack).manifest.counts["documents"]
    for doc in range(n_docs):  # whichever document the query cites
        at, ref = row_reference(pack, F.DOC_TEXT, doc)
        poke(pack, at, struct.pack("<IQI", *craft(*ref)))  # type: ignore[operator]
    r = kbpack("query", str(pack), "--mode", "bm25", "--", "pypdf", cache=cache)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1, r.stderr
    assert F.DOC_TEXT in r.stderr and "row " in r.stderr and says in r.stderr, r.stderr
    assert "internal error" not in r.stderr


def test_the_first_open_walks_no_heap_of_the_rows(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the first open checks: the structure and the attributes, through the guarded file;
    never the whole-file heap scan, never a string row. What a reader checks: the rows it
    reads, each collection once."""
    pack = Path(shutil.copy(GOLDEN, tmp_path / "p.kbpack"))
    stalled_collection_in_vectors(pack)  # a scan of every collection would refuse the pack

    def no_scan(path: Path) -> list[str]:
        raise AssertionError("the first open scanned the whole file")

    monkeypatch.setattr(global_heap, "malformed_collections", no_scan)  # the forked child too
    with PackReader(pack) as r:
        header = read_header(pack)
        assert _recall_outcome(memo_key(pack, header)) == Outcome(structure=True, rows=False)
        assert not is_remembered_clean(pack, header)  # sign must not carry it over as proven
        assert r.heap_check.heap is None  # no row read yet: nothing walked in-process
        r.string_at(F.SEC_TITLE, 0)
        assert r.heap_check.heap is not None
        _, (_, address, _) = row_reference(pack, F.SEC_TITLE, 0)
        assert list(r.heap_check.heap.walked) == [address + USERBLOCK]  # that row's collection only
        r.string_at(F.SEC_TITLE, 1)
        assert len(r.heap_check.heap.walked) == 1  # same collection: walked once
    with PackReader(pack) as r:  # remembered: no child, the rows still checked as read
        assert r.rows_checked_as_read


def test_a_pack_written_or_verified_here_reads_its_rows_unchecked(
    tmp_path: Path, cache: Path
) -> None:
    pack = Path(shutil.copy(GOLDEN, tmp_path / "p.kbpack"))
    remember_parsed(pack)  # what a writer's commit and a full verify record
    with PackReader(pack) as r:
        assert not r.rows_checked_as_read
        assert r.string_at(F.SEC_TITLE, 0)
        assert r.heap_check.heap is None
    assert is_remembered_clean(pack, read_header(pack))


def test_a_column_not_stored_as_kbpack_writes_it_is_read_whole_by_the_child(
    tmp_path: Path, cache: Path
) -> None:
    """A string column the reader cannot check row by row (here: chunked) is read whole in
    the sandboxed child, as every column was before, and its rows are then proven."""
    pack = Path(shutil.copy(GOLDEN, tmp_path / "p.kbpack"))
    with h5py.File(pack, "r+") as h:
        names = list(h[F.DOC_NAME][()])
        del h[F.DOC_NAME]
        h.create_dataset(F.DOC_NAME, data=names, dtype=h5py.string_dtype(), chunks=(2,))
    try:
        r = PackReader(pack)
    except PackError:
        return  # the structure allowlist refuses the layout: as safe
    with r:
        assert not r.rows_checked_as_read


def test_many_references_at_once_answer_as_one_at_a_time(tmp_path: Path) -> None:
    """A whole column's references are checked in numpy, a citation's one by one: the same
    first refusal, on crafted references of every kind."""
    import os

    import numpy as np

    from kbpack.pack.global_heap import REFERENCE, HeapReferences

    pack = Path(shutil.copy(GOLDEN, tmp_path / "p.kbpack"))
    stalled_collection_in_vectors(pack)
    with h5py.File(pack, "r", locking=False) as h:
        columns = [h[p] for p in (F.DOC_NAME, F.DOC_TEXT, F.DOC_TITLE, F.SEC_TITLE)]
        refs = np.concatenate(
            [np.fromfile(pack, REFERENCE, len(c), offset=int(c.id.get_offset())) for c in columns]
        )
    with h5py.File(pack, "r", locking=False) as h:
        fake = data_spans(h[F.VEC_DATA])[0]
    fake_address = fake[0] + fake[1] // 2 // 8 * 8 - USERBLOCK
    rng = random.Random(3)
    fd = os.open(pack, os.O_RDONLY)
    try:
        assert (
            len(refs) > 16
            and HeapReferences(fd, pack.stat().st_size, USERBLOCK).problem(refs) is None
        )
        for _ in range(60):
            crafted = refs.copy()
            for i in rng.sample(range(len(refs)), rng.choice([1, 2, 5])):
                field, value = rng.choice(
                    [
                        ("length", int(crafted["length"][i]) + rng.choice([-1, 1, 9])),
                        ("index", rng.choice([0, 999, 2**20])),
                        ("address", rng.choice([0, 8, fake_address, 2**40])),
                    ]
                )
                crafted[field][i] = max(0, value)
            many = HeapReferences(fd, pack.stat().st_size, USERBLOCK).problem(crafted)
            single = HeapReferences(fd, pack.stat().st_size, USERBLOCK)
            one_by_one = next(
                (
                    (i, why)
                    for i in range(len(crafted))
                    if (why := single._one(*crafted[i].tolist())) is not None
                ),
                None,
            )
            assert many == one_by_one
    finally:
        os.close(fd)


def test_a_stalled_collection_with_its_reserved_bytes_set_is_still_found(
    tmp_path: Path, cache: Path
) -> None:
    """HDF5 checks "GCOL" and the version of a collection, not the three reserved bytes after
    them: a stalled collection with them set hung HDF5 2.0.0 as well, and a search for the
    whole 8-byte header (verify's) did not find it."""
    from kbpack.pack.global_heap import malformed_collections
    from tests.fixture_pack import stall_heap

    pack = Path(shutil.copy(GOLDEN, tmp_path / "p.kbpack"))
    at = stall_heap(pack)
    poke(pack, at + 5, b"\xff\xff\xff")
    assert any(str(at) in line for line in malformed_collections(pack))
    with pytest.raises(PackError, match=f"global heap collection at byte {at}"):
        PackReader(pack)  # the first open's guarded parse meets it
    r = kbpack("verify", str(pack), cache=cache)
    assert r.returncode == 1 and "heap-malformed" in r.stdout, r.stdout
