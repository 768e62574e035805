"""Enumerated mutants: damage that random mutation (``pack_mutations``) almost never draws.

A random structure mutation changes one element; when it changes a row count, the manifest's
counts no longer agree and the structure allowlist refuses the pack before any data is read
(``count-mismatch``). A hostile writer changes both. ``row_drops`` does that for every count of
the seed's manifest: the first row, the last row or every row of each dataset counted by it
(and of the datasets counted by its linked count: ``terms`` and ``terms_plus_one``) is removed,
the count is set to match and every element digest is recomputed, so the pack passes the
allowlist and the digests and reaches the readers' and ``verify``'s own checks of how the
elements refer to one another (offsets, row numbers, postings, pieces).

``attribute_deletions`` deletes each attribute of each element (and of the root) in turn,
digests restamped: a random mutation picks one of ~200 attributes of a pack, and deletes
rather than changes it one time in five, so a given attribute's absence is rarely drawn.

``metadata_flips`` flips one bit of each byte of HDF5's own structures (every byte of the HDF5
part outside the elements' stored data: superblock, object headers, chunk indexes, B-trees,
heaps), the file's hash restamped: random mutation hits a given one of those ~10^5 bytes a
handful of times in 100,000 executions, and every late finding of the random runs lived there.
Its items come in a fixed shuffled order, so the first N of them are a uniform sample and all
of them the whole sweep (``bench/fuzz.py --enumerate metadata-flips --executions N``).

Each item is (label, writer); the writer writes the mutant to a path and returns its
``Mutant`` (a forgery: it claims nothing of the seed's content).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

from kbpack.pack import format as F
from kbpack.testing.fuzz.pack_mutations import (
    Mutant,
    Seed,
    _header_parts,
    _recreate,
    _write_manifest,
    element_digests,
    restamp,
    values_and_attrs,
)

LINKED = {"terms": ("terms_plus_one",), "terms_plus_one": ("terms",)}
WHERE = ("first", "last", "all")

Item = tuple[str, Callable[[Path], Mutant]]


def row_drops(seed: Seed) -> Iterator[Item]:
    """For each count with rows in the seed: the first, the last or every row dropped."""
    counts = _header_parts(seed.data)[0].get("counts", {})
    for key in sorted(counts):
        if not any(el.rows == key and el.path in seed.datasets for el in F.ELEMENTS):
            continue
        if not isinstance(counts[key], int) or counts[key] < 1:
            continue
        for where in WHERE:
            label = f"{key}: {where} row{'s' if where == 'all' else ''} dropped, count matched"
            yield label, partial(_drop_rows, seed, key, where, label)


def _drop_rows(seed: Seed, key: str, where: str, label: str, out: Path) -> Mutant:
    import h5py

    keys = (key, *LINKED.get(key, ()))
    out.write_bytes(seed.data)
    with h5py.File(out, "r+", locking=False) as h:
        for el in F.ELEMENTS:
            if el.rows not in keys or el.path not in seed.datasets:
                continue
            arr, attrs = values_and_attrs(h[el.path])
            kept = arr[1:] if where == "first" else arr[:-1] if where == "last" else arr[:0]
            _recreate(h, el.path, kept.copy(), attrs)
        digests = element_digests(h)
    data = bytearray(out.read_bytes())
    manifest, signature, _ = _header_parts(data)
    for k in keys:
        if isinstance(manifest["counts"].get(k), int):
            manifest["counts"][k] = 0 if where == "all" else manifest["counts"][k] - 1
    _write_manifest(data, manifest, signature)
    out.write_bytes(data)
    restamp(out, "elements", digests)
    return Mutant(seed.name, f"enumerated: {label}", "elements", forged=True)


def attribute_deletions(seed: Seed) -> Iterator[Item]:
    """Each attribute of each object of the seed deleted, one per item."""
    import io

    import h5py

    with h5py.File(io.BytesIO(seed.data), "r") as h:
        names = [(path, name) for path in seed.objects for name in sorted(h[path].attrs)]
    for path, name in names:
        label = f"attribute {path}@{name} deleted"
        yield label, partial(_delete_attribute, seed, path, name, label)


def _delete_attribute(seed: Seed, path: str, name: str, label: str, out: Path) -> Mutant:
    import h5py

    out.write_bytes(seed.data)
    with h5py.File(out, "r+", locking=False) as h:
        del h[path].attrs[name]
        digests = element_digests(h)
    restamp(out, "elements", digests)
    return Mutant(seed.name, f"enumerated: {label}", "elements", forged=True)


def metadata_flips(seed: Seed) -> Iterator[Item]:
    """One bit of every byte of the seed's HDF5 metadata, in a shuffled order fixed by the
    seed's name; the bit is drawn from the same generator."""
    data_bytes = bytearray(len(seed.data))
    for spans in seed.spans.values():
        for offset, size in spans:
            data_bytes[offset : offset + size] = b"\x01" * size
    where = [i for i in range(F.USERBLOCK_SIZE, len(seed.data)) if not data_bytes[i]]
    rng = random.Random(f"metadata-flips:{seed.name}")
    rng.shuffle(where)
    for at in where:
        bit = rng.randrange(8)
        label = f"metadata bit {bit} of byte {at} flipped"
        yield label, partial(_flip, seed, at, bit, label)


def _flip(seed: Seed, at: int, bit: int, label: str, out: Path) -> Mutant:
    data = bytearray(seed.data)
    data[at] ^= 1 << bit
    out.write_bytes(data)
    restamp(out, "bytes")  # the whole-file hash matches: verify must find the damage itself
    return Mutant(seed.name, f"enumerated: {label}", "bytes")


ENUMERATIONS: dict[str, Callable[[Seed], Iterator[Item]]] = {
    "row-drops": row_drops,
    "attribute-deletions": attribute_deletions,
    "metadata-flips": metadata_flips,
}
# enumerations whose items come in a shuffled order, meant to be run in part
SAMPLED = frozenset({"metadata-flips"})
