"""The structure allowlist (kbpack/pack/structure.py, h5py's low-level API) finds what the
high-level version it replaced finds (tests/structure_reference.py), on the golden packs and
on seeded mutants of them: flipped bits in HDF5 metadata, rewritten attributes and datasets,
deleted, renamed and linked elements (kbpack/fuzz/pack_mutations.py).

Where a damaged object cannot be opened or its attributes cannot be read, the two say so with
HDF5's message for the call each made (the low-level walk opens an attribute by index where the
high-level one iterated names, and names an object that does not open as unreadable where the
high-level ``get`` returned nothing and called it the wrong type): those are compared by the
paths they name.
"""

from __future__ import annotations

import random
from pathlib import Path

import h5py
import pytest
from structure_reference import check_structure_high_level

from kbpack.pack.manifest import read_header
from kbpack.pack.structure import check_structure
from kbpack.testing.fuzz.pack_mutations import Seed, mutate
from tests.paths import REPO_ROOT

REPO = REPO_ROOT
GOLDEN = [REPO / "fixtures" / "golden" / n for n in ("v1.kbpack", "v2.kbpack")]
MUTANTS = 150
UNREADABLE = {"unreadable-object", "unreadable-attributes", "wrong-object-type"}


def findings(fn: object, path: Path) -> list[tuple[str, str, str]] | str:
    header = read_header(path)
    m = header.manifest
    with h5py.File(path, "r", locking=False) as h:
        try:
            got = fn(h, m.counts, path.stat().st_size, m.format_version)  # type: ignore[operator]
        except Exception as e:
            return f"raised {type(e).__name__}"
    return sorted((f.code, f.path, f.detail) for f in got)


def comparable(found: list[tuple[str, str, str]] | str) -> object:
    if isinstance(found, str):
        return found
    # checks the high-level version did not make (added after it): the filter pipeline, the
    # exact file datatype and the chunk index count
    exact = [
        f
        for f in found
        if f[0] not in UNREADABLE
        and f[0] not in ("filter-pipeline", "chunk-index")
        and "not the spec's little-endian" not in f[2]
    ]
    return exact, sorted({f[1] for f in found if f[0] in UNREADABLE})


@pytest.mark.parametrize("pack", GOLDEN, ids=lambda p: p.name)
def test_intact_golden_packs_have_no_findings(pack: Path) -> None:
    assert findings(check_structure, pack) == findings(check_structure_high_level, pack) == []


def test_mutants_get_the_same_findings(tmp_path: Path) -> None:
    seeds = [Seed.load(p) for p in GOLDEN]
    target = tmp_path / "mutant.kbpack"
    compared = refused = 0
    for i in range(MUTANTS):
        rng = random.Random(f"structure:{i}")
        target.unlink(missing_ok=True)
        mutant = mutate(rng.choice(seeds), rng, target)
        try:
            read_header(target)
            h5py.File(target, "r", locking=False).close()
        except Exception:
            continue  # neither allowlist is reached: the header or HDF5's superblock refuses it
        new, old = findings(check_structure, target), findings(check_structure_high_level, target)
        if isinstance(old, str) and old == "raised TypeError" and new and not isinstance(new, str):
            new = old  # a link name that is not UTF-8: bytes + str before, a finding now
        assert comparable(new) == comparable(old), mutant.describe()
        compared += 1
        refused += bool(new)
    # the mutants reached the allowlist and some broke its rules
    assert compared > MUTANTS // 2 and refused > 10, (compared, refused)
