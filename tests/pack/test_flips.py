"""Random single-bit flips in the HDF5 bytes of the golden pack, read without verify: each is
detected (one line naming what) or harmless (every value read is the intact one); none is
silent and none is an internal error. bench/flips.py runs the same at any size."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.paths import REPO_ROOT

BENCH = REPO_ROOT / "bench"
sys.path.insert(0, str(BENCH))

import flips  # noqa: E402


def test_no_flip_is_read_silently_or_crashes(tmp_path: Path) -> None:
    pack = tmp_path / "golden.kbpack"
    pack.write_bytes(flips.DEFAULT_PACK.read_bytes())
    result = flips.run(pack, flips=120, seed=20261202)
    o = result["outcomes"]
    assert result["silent"] == [] and result["crashes"] == []
    # both kinds of byte were hit: since HDF5 checksums its own metadata (spec §1) nearly every
    # flip is detected; the harmless ones fall in bytes no read uses (free space, padding)
    assert o["detected"] > 20 and o["harmless"] > 0
    assert sum(o.values()) == 120


def test_a_silent_read_would_be_reported(tmp_path: Path) -> None:
    """The classifier itself: a pack whose value changed behind the digests is 'silent'."""
    from kbpack.pack import format as F

    intact = flips.read_all(flips.DEFAULT_PACK)
    intact[F.CHUNK_TOKENS] = b"not what the pack holds"
    pack = tmp_path / "p.kbpack"
    pack.write_bytes(flips.DEFAULT_PACK.read_bytes())
    assert flips.classify(pack, intact) == ("silent", F.CHUNK_TOKENS)
