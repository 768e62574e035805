"""A flipped bit in an HDF5 chunk's filter mask (in the chunk index, outside every checksum)
must not turn into a silent wrong answer.

The mask tells HDF5 which filters were *skipped* for that chunk; a set bit makes it skip the
unshuffle or the inflate, and the Fletcher-32 check with it, and return stored bytes as values.
Before the check in ``CheckedDataset``, a query reading only its terms' postings slices answered
with wrong citations (mask bit 0) or an internal IndexError (bit 1). Whole-column reads were
already caught by the manifest digest.
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import h5py
import pytest
from cli_run import run

from kbpack.pack import format as F
from tests.paths import REPO_ROOT

# a pack whose chunk indexes are version-1 B-trees, without checksums (spec §1): in one written
# with libver v110 a flipped mask bit fails the index's checksum (test_metadata_checksums.py)
GOLDEN = REPO_ROOT / "fixtures" / "golden" / "v2-earliest.kbpack"
QUERY = "pypdf merging pdf library"
USERBLOCK = F.USERBLOCK_SIZE


def mask_offset(pack: Path, element: str) -> int:
    """File offset of the filter mask of ``element``'s first chunk, found by its B-tree key
    (chunk size, mask, chunk offsets) followed by the chunk's address."""
    with h5py.File(pack, "r") as h:
        info = h[element].id.get_chunk_info(0)
    key = struct.pack("<II", info.size, info.filter_mask)
    key += b"".join(struct.pack("<Q", o) for o in info.chunk_offset) + struct.pack("<Q", 0)
    data = pack.read_bytes()
    # the child pointer after the key: the chunk's address, relative to HDF5's base address
    # (the end of the user block) or absolute, depending on the HDF5 version
    for address in (info.byte_offset - USERBLOCK, info.byte_offset):
        if data.count(key + struct.pack("<Q", address)) == 1:
            return data.find(key + struct.pack("<Q", address)) + 4
    raise AssertionError(f"{element}: its chunk's index key is not found once in {pack}")


@pytest.mark.parametrize("element", ["/bm25/chunk", "/bm25/tf"])
@pytest.mark.parametrize("bit", [0, 1, 2])
def test_a_skipped_filter_is_refused_by_query(element: str, bit: int, tmp_path: Path) -> None:
    pack = tmp_path / "p.kbpack"
    shutil.copyfile(GOLDEN, pack)
    code, intact, _ = run("query", str(pack), QUERY, "--mode", "bm25", "--json", "-q")
    assert code == 0
    at = mask_offset(pack, element)
    data = bytearray(pack.read_bytes())
    data[at] ^= 1 << bit
    pack.write_bytes(bytes(data))
    code, out, err = run("query", str(pack), QUERY, "--mode", "bm25", "--json", "-q")
    assert (code, out) == (1, ""), (code, out == intact)
    # refused at the first open, by the structure check of every chunk index entry
    assert err.splitlines() == [
        f"kbpack: error: {pack}: refused: chunk-index {element}: its chunk index entry at row "
        f"0 skips filters (mask {1 << bit:#x})"
    ]
    # and by the part read itself where that check does not run (a remembered state)
    from kbpack.pack.read import DamagedDataError, PackReader

    with PackReader(pack, check_structure_=False) as reader, pytest.raises(DamagedDataError) as e:
        reader.dataset(element)[0:3]
    assert str(e.value) == (
        f"{pack}: {element} is damaged (chunk at row 0: its filter mask "
        f"{1 << bit:#x} skips a filter); run kbpack verify {pack}, then copy the pack again"
    )
