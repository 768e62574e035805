"""HDF5's own bookkeeping is checksummed (spec §1): packs are written with libver
('v110', 'v110'), so the superblock, object headers, chunk indexes and link heaps carry checksums
HDF5 checks on every read. The pokes that needed a check of the readers' own in a pack written
with libver 'earliest' (tests/hostile/test_fuzz_findings.py, tests/search/test_filter_mask.py, on
fixtures/golden/v2-earliest.kbpack) are refused here by HDF5's checksums, in one line."""

from __future__ import annotations

import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import h5py
import pytest
from cli_run import run

from kbpack.pack import format as F
from kbpack.testing.fuzz.pack_mutations import restamp
from tests.paths import REPO_ROOT

GOLDEN = REPO_ROOT / "fixtures" / "golden"
QUERY = "pypdf merge pages"
# structures of the 'earliest' layout, none of them checksummed: a version-1 B-tree node of
# group (0) or chunk (1) entries, a local heap, a symbol table node
UNCHECKED = (b"TREE\x00", b"TREE\x01", b"HEAP\x00", b"SNOD\x01")


def layout(pack: Path) -> tuple[int, set[int], list[bytes]]:
    """Superblock version, the object header versions, and the unchecked structures found."""
    with h5py.File(pack, "r") as h:
        superblock = h.id.get_create_plist().get_version()[0]
        headers = {h5py.h5o.get_info(h.id).hdr.version}
        h.visit(lambda name: headers.add(h5py.h5o.get_info(h[name].id).hdr.version))
    data = pack.read_bytes()[F.USERBLOCK_SIZE :]
    return superblock, headers, [s for s in UNCHECKED if s in data]


def test_packs_kbpack_writes_checksum_every_hdf5_structure(
    tmp_path: Path, tiny_model: Path
) -> None:
    src = tmp_path / "docs"
    src.mkdir()
    (src / "a.md").write_text("# Pumps\n\nThe seal of pump P-101 is checked every 500 hours.\n")
    built = tmp_path / "built.kbpack"
    code, _, err = run("build", str(src), "-o", str(built), "--model", str(tiny_model), "-q")
    assert code == 0, err
    # migrate rewrites a pack of either layout through the writer: a pack of kbpack 0.2.0
    # gets the checksums by `kbpack migrate OLD -o NEW`
    migrated = []
    for old in ("v1.kbpack", "v2-earliest.kbpack"):
        migrated.append(tmp_path / f"migrated-{old}")
        code, _, err = run("migrate", str(GOLDEN / old), "-o", str(migrated[-1]), "-q")
        assert code == 0, err
    for pack in (GOLDEN / "v2.kbpack", built, *migrated):
        assert layout(pack) == (3, {2}, []), pack.name
    # the layout before: what readers must still read safely
    superblock, headers, unchecked = layout(GOLDEN / "v2-earliest.kbpack")
    assert (superblock, headers) == (0, {1}) and len(unchecked) == 4


def header_of(path: str) -> int:
    with h5py.File(GOLDEN / "v2.kbpack", "r") as h:
        return F.USERBLOCK_SIZE + h5py.h5o.get_info(h[path].id).addr


def datatype_byte_order(data: bytearray) -> None:
    """/bm25/tf's datatype message made big-endian (test_fuzz_findings: wrong-dtype)."""
    where = header_of(F.BM25_TF)
    at = data.find(b"\x10\x08\x00\x00\x04\x00\x00\x00\x00\x00\x20\x00", where)
    assert 0 <= at - where < 1024
    data[at + 1] = 0x09


def dataspace_width(data: bytearray) -> None:
    """/vectors/data's rows made 128 numbers wide (test_fuzz_findings: vectors narrower)."""
    where = header_of(F.VEC_DATA)
    with h5py.File(GOLDEN / "v2.kbpack", "r") as h:
        n, dims = h[F.VEC_DATA].shape
    at = data.find(n.to_bytes(8, "little") + dims.to_bytes(8, "little"), where)
    assert 0 <= at - where < 256
    data[at + 8 : at + 16] = (dims - 256).to_bytes(8, "little")


def chunk_index_entry(data: bytearray) -> None:
    """A bit of /bm25/tf's chunk index entry, beside the chunk's address (test_filter_mask)."""
    with h5py.File(GOLDEN / "v2.kbpack", "r") as h:
        info = h[F.BM25_TF].id.get_chunk_info(0)
    address = struct.pack("<Q", info.byte_offset - F.USERBLOCK_SIZE)
    assert data.count(address) == 1
    data[data.find(address) + 8] ^= 1


def root_links(data: bytearray) -> None:
    """A bit in the fractal heap block that holds the root group's links (test_fuzz_findings:
    the root B-tree sibling)."""
    at = data.find(b"FHDB")
    assert at > 0
    data[at + 40] ^= 1


@pytest.mark.parametrize(
    "poke", [datatype_byte_order, dataspace_width, chunk_index_entry, root_links]
)
def test_damage_to_hdf5_metadata_fails_its_checksum_in_one_line(
    tmp_path: Path, poke: Callable[[bytearray], None]
) -> None:
    pack = tmp_path / "p.kbpack"
    shutil.copyfile(GOLDEN / "v2.kbpack", pack)
    data = bytearray(pack.read_bytes())
    poke(data)
    pack.write_bytes(data)
    restamp(pack, "bytes")  # the whole-file hash matches: verify must find the damage itself
    for args in (["query", "--mode", "bm25", str(pack), QUERY], ["inspect", str(pack)]):
        code, out, err = run(*args)
        assert (code, out) == (1, ""), args
        assert err.count("\n") == 1 and "incorrect metadata checksum" in err, err
    code, out, _ = run("verify", str(pack))
    assert code == 1 and "incorrect metadata checksum" in out


def test_inspect_says_whether_hdf5_metadata_is_checksummed() -> None:
    import json

    for name, checksummed in (("v2.kbpack", True), ("v2-earliest.kbpack", False)):
        code, out, _ = run("inspect", str(GOLDEN / name), "--json")
        assert code == 0 and json.loads(out)["hdf5_metadata_checksummed"] is checksummed
    code, out, _ = run("inspect", str(GOLDEN / "v2-earliest.kbpack"))
    assert (
        "metadata    no HDF5 checksums (older layout; kbpack migrate PACK -o NEW adds them)" in out
    )
