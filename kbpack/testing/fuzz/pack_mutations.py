"""Mutations of a valid pack, the way damage and hostility reach one.

Three families, each drawn from a seeded ``random.Random`` so that a finding is replayed from
its seed and index:

* **bytes**: flipped bits and overwritten integers in the HDF5 bytes -- inside one element's
  stored data, or in HDF5's own metadata (object headers, B-trees, heaps) --, zeroed sectors,
  copied blocks, truncation and appended bytes;
* **structure** (through h5py): attributes changed to other values or types, deleted or added;
  datasets rewritten with other values, shapes or dtypes; elements deleted, renamed, swapped or
  added; links;
* **manifest**: JSON edits of the header (keys deleted or misspelt, values of another type,
  counts and digests changed, provenance fields added), re-encoded so that the header parses.

After a mutation the manifest is *restamped* to one of three levels: ``raw`` (as the mutation
left it), ``bytes`` (file size and whole-file SHA-256 recomputed: ``verify``'s first step passes
and HDF5 really parses the damage) or ``elements`` (every element digest recomputed too: a
hostile pack that is consistent with its own manifest, so the damage reaches the invariants,
search and export). Damage (the bytes and manifest families) below ``elements`` leaves a pack
that still claims the seed's content: a command that succeeds must then show exactly what it
shows for the seed (``Mutant.claims_seed``). A rewrite through HDF5 is a forgery, not damage:
its data carries valid HDF5 checksums and only the element digests tell, which the reader
compares for whole columns and attributes but not for every slice a query reads (that is
verify's job; a forger would rewrite the digests too), so it claims nothing.
"""

from __future__ import annotations

import contextlib
import json
import random
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from kbpack.pack import format as F
from kbpack.pack.digest import attrs_digest, numeric_digest, strings_digest
from kbpack.pack.manifest import encode_header, hash_hdf5_bytes

RESTAMP_LEVELS = ("raw", "bytes", "elements")
INTERESTING_INTS = (0, 1, -1, 2, 7, 255, 256, 65535, 2**31 - 1, -(2**31), 2**32, 2**62, -(2**62))
INTERESTING_FLOATS = (0.0, -0.0, 1.0, -1.0, 2.0, 1e308, float("nan"), float("inf"), -float("inf"))
INTERESTING_STRINGS = (
    "",
    " ",
    "x" * 10_000,
    "{",
    "[]",
    '["a", 1]',
    "null",
    "\u2028\u00e9\U0001f680",
    "\x1b[31m",
    "ok",
    "failed",
    "skipped",
    "dense",
    "none",
    "plain",
    "snowball-english",
    "-1",
    "1e999",
)


@dataclass(frozen=True)
class Seed:
    """A valid pack to start from, with the layout the mutators aim at."""

    name: str
    data: bytes
    spans: dict[str, list[tuple[int, int]]]  # dataset path -> (file offset, bytes) of its data
    datasets: tuple[str, ...]  # element datasets present
    objects: tuple[str, ...]  # element groups and datasets present, "/" first

    @classmethod
    def load(cls, path: Path, name: str | None = None) -> Seed:
        import h5py

        from kbpack.pack.storage import data_spans

        spans: dict[str, list[tuple[int, int]]] = {}
        objects = ["/"]
        with h5py.File(path, "r") as h:
            for el in F.ELEMENTS:
                if el.path not in h:
                    continue
                objects.append(el.path)
                if el.dtype:
                    spans[el.path] = [s for s in data_spans(h[el.path]) if s[1] > 0]
        return cls(name or path.name, path.read_bytes(), spans, tuple(spans), tuple(objects))


@dataclass
class Mutant:
    """What a mutation did. ``claims_seed``: the manifest still describes the seed's content,
    so a read that succeeds must return the seed's values (else it is a silent wrong read)."""

    seed: str
    label: str
    restamp: str = "raw"
    forged: bool = False  # rewritten through HDF5 (see the module docstring)

    @property
    def claims_seed(self) -> bool:
        return self.restamp != "elements" and not self.forged

    def describe(self) -> str:
        return f"{self.seed}: {self.label} (restamp {self.restamp})"


# -- bytes ---------------------------------------------------------------------------------------


def _region(seed: Seed) -> tuple[int, int]:
    """The HDF5 bytes: everything after the kbpack header."""
    return F.USERBLOCK_SIZE, len(seed.data)


def _in_data(seed: Seed, rng: random.Random) -> tuple[int, str] | None:
    """A random byte offset inside some element's stored data, and the element."""
    spans = [(p, s) for p, ss in seed.spans.items() for s in ss]
    if not spans:
        return None
    path, (offset, size) = rng.choice(spans)
    return offset + rng.randrange(size), path


def _in_metadata(seed: Seed, rng: random.Random) -> int:
    """A random offset in the HDF5 bytes outside every element's data: HDF5's own structures."""
    taken = sorted(s for ss in seed.spans.values() for s in ss)
    for _ in range(64):
        at = rng.randrange(F.USERBLOCK_SIZE, len(seed.data))
        if not any(o <= at < o + n for o, n in taken):
            return at
    return rng.randrange(F.USERBLOCK_SIZE, len(seed.data))


def flip_bits(data: bytearray, seed: Seed, rng: random.Random) -> str:
    n = rng.choice((1, 1, 1, 2, 3, 8))
    where = rng.choice(("anywhere", "data", "metadata"))
    named = ""
    for _ in range(n):
        if where == "data" and (hit := _in_data(seed, rng)) is not None:
            at, named = hit
        elif where == "metadata":
            at = _in_metadata(seed, rng)
        else:
            at = rng.randrange(*_region(seed))
        data[at] ^= 1 << rng.randrange(8)
    return f"flip {n} bit(s) in {where}{' ' + named if named else ''}"


def overwrite_int(data: bytearray, seed: Seed, rng: random.Random) -> str:
    """An HDF5 size, address or count replaced by an interesting integer (little-endian)."""
    width = rng.choice((1, 2, 4, 8))
    value = rng.choice(INTERESTING_INTS) % (1 << (8 * width))
    at = _in_metadata(seed, rng) if rng.random() < 0.7 else rng.randrange(*_region(seed))
    at = min(at, len(data) - width)
    data[at : at + width] = value.to_bytes(width, "little")
    return f"overwrite {width}-byte int {value:#x} at {at}"


def zero_sector(data: bytearray, seed: Seed, rng: random.Random) -> str:
    size = rng.choice((512, 4096))
    at = rng.randrange(F.USERBLOCK_SIZE, len(data)) // size * size
    at = max(at, F.USERBLOCK_SIZE)
    data[at : at + size] = bytes(len(data[at : at + size]))
    return f"zero {size} bytes at {at}"


def copy_block(data: bytearray, seed: Seed, rng: random.Random) -> str:
    size = rng.choice((8, 64, 512, 4096))
    lo, hi = _region(seed)
    if hi - lo <= size:
        return "copy nothing"
    src, dst = rng.randrange(lo, hi - size), rng.randrange(lo, hi - size)
    data[dst : dst + size] = data[src : src + size]
    return f"copy {size} bytes {src} -> {dst}"


def truncate(data: bytearray, seed: Seed, rng: random.Random) -> str:
    keep = rng.randrange(F.USERBLOCK_SIZE // 2, len(data))
    del data[keep:]
    return f"truncate to {keep}"


def append(data: bytearray, seed: Seed, rng: random.Random) -> str:
    n = rng.choice((1, 512, 4096))
    data.extend(rng.randbytes(n))
    return f"append {n} bytes"


M = TypeVar("M")


def weighted(*entries: tuple[M, int]) -> tuple[M, ...]:
    """Each mutation repeated by its weight, in order: ``rng.choice`` picks it that often."""
    return tuple(m for m, weight in entries for _ in range(weight))


BYTE_MUTATIONS: tuple[Callable[[bytearray, Seed, random.Random], str], ...] = weighted(
    (flip_bits, 3),
    (overwrite_int, 2),
    (zero_sector, 1),
    (copy_block, 1),
    (truncate, 1),
    (append, 1),
)


# -- manifest --------------------------------------------------------------------------------


def _header_parts(data: bytes | bytearray) -> tuple[dict[str, Any], bytes, int]:
    """(manifest as parsed JSON, signature bytes, end of signature) of an intact header."""
    (m_len,) = struct.unpack_from(F.LEN_FORMAT, data, 8)
    manifest = json.loads(bytes(data[16 : 16 + m_len]))
    (s_len,) = struct.unpack_from(F.LEN_FORMAT, data, 16 + m_len)
    return manifest, bytes(data[24 + m_len : 24 + m_len + s_len]), 24 + m_len + s_len


def _write_manifest(data: bytearray, manifest: dict[str, Any], signature: bytes) -> None:
    sig = json.loads(signature) if signature else None
    raw = json.dumps(manifest, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    raw = raw[: F.MAX_MANIFEST_BYTES]
    data[: F.USERBLOCK_SIZE] = encode_header(raw, sig if isinstance(sig, dict) else None)


def _other_value(value: Any, rng: random.Random) -> Any:
    kinds: list[Any] = [
        rng.choice(INTERESTING_INTS),
        rng.choice(INTERESTING_STRINGS),
        None,
        True,
        [],
        {},
        1.5,
    ]
    if isinstance(value, int) and not isinstance(value, bool):
        kinds += [value + 1, value - 1, value * 2, -value]
    if isinstance(value, str) and value:
        i = rng.randrange(len(value))
        kinds.append(value[:i] + chr(ord(value[i]) ^ 1) + value[i + 1 :])
    return rng.choice(kinds)


def edit_manifest(data: bytearray, seed: Seed, rng: random.Random) -> str:
    manifest, signature, end = _header_parts(data)
    op = rng.choice(("flip-byte", "delete", "misspell", "value", "count", "digest", "extra"))
    if op == "flip-byte":  # raw damage to the JSON itself
        at = rng.randrange(16, end)
        data[at] ^= 1 << rng.randrange(8)
        return f"manifest byte {at} flipped"
    if op in ("count", "digest"):
        table = manifest["counts" if op == "count" else "elements"]
        key = rng.choice(sorted(table))
        if rng.random() < 0.3:
            del table[key]
            what = "deleted"
        elif rng.random() < 0.3:
            table[key[:-1] + chr(ord(key[-1]) ^ 1)] = table.pop(key)
            what = "misspelt"
        else:
            table[key] = _other_value(table[key], rng)
            what = f"= {str(table[key])[:24]!r}"
        _write_manifest(data, manifest, signature)
        return f"manifest {op} {key} {what}"
    if op == "extra":
        key = rng.choice(("set", "shard", "merged_from", "format_version", "created"))
        manifest[key] = rng.choice(
            (
                {"id": "x", "index": 0, "count": 0},
                {"index": 2, "count": 1},
                {"index": "a"},
                [1, 2],
                ["a.kbpack"],
                1,
                "x",
                None,
            )
        )
        _write_manifest(data, manifest, signature)
        return f"manifest {key} = {str(manifest[key])[:24]}"
    key = rng.choice(sorted(manifest))
    if op == "delete":
        del manifest[key]
    elif op == "misspell":
        i = rng.randrange(len(key))
        manifest[key[:i] + chr(ord(key[i]) ^ 1) + key[i + 1 :]] = manifest.pop(key)
    else:
        manifest[key] = _other_value(manifest[key], rng)
    _write_manifest(data, manifest, signature)
    return f"manifest {op} {key}"


# -- structure (h5py) ----------------------------------------------------------------------------


def _attr_value(old: Any, rng: random.Random) -> Any:
    kind = rng.choice(("int", "float", "str", "array", "same-type"))
    if kind == "same-type":
        if isinstance(old, bytes | str):
            s = old.decode("utf-8", "replace") if isinstance(old, bytes) else old
            return s[: rng.randrange(len(s) + 1)] + rng.choice(INTERESTING_STRINGS)[:50]
        if isinstance(old, float | np.floating):
            return rng.choice(INTERESTING_FLOATS)
        kind = "int"
    if kind == "int":
        return np.int64(rng.choice(INTERESTING_INTS))
    if kind == "float":
        return rng.choice(INTERESTING_FLOATS)
    if kind == "str":
        return rng.choice(INTERESTING_STRINGS)
    return np.arange(rng.randrange(0, 4), dtype=np.int32)


def change_attribute(h: Any, seed: Seed, rng: random.Random) -> str:
    path = rng.choice(seed.objects)
    obj = h[path]
    names = list(obj.attrs)
    op = rng.choice(("set", "set", "set", "delete", "add"))
    if op == "add" or not names:
        obj.attrs["fuzz:extra"] = _attr_value("", rng)
        return f"attribute {path}@fuzz:extra added"
    name = rng.choice(names)
    if op == "delete":
        del obj.attrs[name]
        return f"attribute {path}@{name} deleted"
    value = _attr_value(obj.attrs[name], rng)
    obj.attrs[name] = value
    return f"attribute {path}@{name} = {str(value)[:30]!r}"


def _recreate(h: Any, path: str, data: Any, attrs: dict[str, Any]) -> None:
    from kbpack.pack.storage import create_dataset

    del h[path]
    arr = data if isinstance(data, list) else np.asarray(data)
    if isinstance(arr, list) or arr.dtype.kind in "OSU":
        import h5py

        values = [x.decode("utf-8", "replace") if isinstance(x, bytes) else str(x) for x in arr]
        ds = h.create_dataset(path, data=values, dtype=h5py.string_dtype("utf-8"))
    elif F.ELEMENT_BY_PATH[path].dtype == "str":  # a string column made numeric: plain storage
        ds = h.create_dataset(path, data=arr)
    else:
        ds = create_dataset(h, path, data=arr)
    for k, v in attrs.items():
        ds.attrs[k] = v


def _new_values(arr: np.ndarray, rng: random.Random) -> tuple[Any, str]:
    """The dataset's values, damaged the way a hostile writer would: what the structure check
    (dtypes, shapes) lets through but the invariants must catch."""
    op = rng.choice(("poke", "poke", "poke", "shuffle", "reverse", "rows", "dtype", "rank"))
    n = arr.shape[0] if arr.ndim else 0
    if op == "poke" and n:
        out = arr.copy()
        for _ in range(rng.choice((1, 1, 3))):
            i = rng.randrange(n)
            if out.dtype.kind == "O":
                out[i] = rng.choice(INTERESTING_STRINGS)
            elif out.dtype.kind == "f":
                out[i] = rng.choice(INTERESTING_FLOATS)
            else:
                info = np.iinfo(out.dtype)
                out[i] = min(max(rng.choice(INTERESTING_INTS), info.min), info.max)
        return out, "values poked"
    if op == "shuffle" and n:
        perm = list(range(n))
        rng.shuffle(perm)
        return arr[perm], "rows shuffled"
    if op == "reverse" and n:
        return arr[::-1].copy(), "rows reversed"
    if op == "rows":
        k = rng.choice((0, max(n - 1, 0), n + 1, 2 * n + 1))
        if k <= n:
            return arr[:k].copy(), f"{k} of {n} rows kept"
        extra = arr[: k - n] if n else np.zeros((k - n, *arr.shape[1:]), arr.dtype)
        return np.concatenate([arr, extra]) if n else extra, f"{k - n} rows added"
    if op == "dtype" and arr.dtype.kind != "O":
        to = rng.choice(("i1", "i4", "i8", "u1", "f2", "f8", "str"))
        if to == "str":
            return [str(x) for x in arr.reshape(-1)[:1000]], "made strings"
        with np.errstate(all="ignore"):
            return arr.astype(to), f"dtype {arr.dtype} -> {to}"
    if op == "rank" and arr.dtype.kind != "O":
        if arr.ndim == 2:
            return arr.reshape(-1), "flattened"
        return arr.reshape(-1, 1), "made 2-D"
    return arr, "unchanged"


def values_and_attrs(ds: Any) -> tuple[np.ndarray, dict[str, Any]]:
    """A dataset's values (strings decoded, as ``_recreate`` writes them back) and attributes."""
    arr = ds[()]
    if ds.dtype.kind == "O":
        arr = np.array(
            [x.decode("utf-8", "replace") if isinstance(x, bytes) else x for x in arr],
            dtype=object,
        )
    return arr, dict(ds.attrs.items())


def rewrite_dataset(h: Any, seed: Seed, rng: random.Random) -> str:
    path = rng.choice(seed.datasets)
    arr, attrs = values_and_attrs(h[path])
    values, what = _new_values(arr, rng)
    _recreate(h, path, values, attrs)
    return f"dataset {path}: {what}"


def move_elements(h: Any, seed: Seed, rng: random.Random) -> str:
    op = rng.choice(("delete", "rename", "swap", "add", "soft-link", "group-for-dataset"))
    path = rng.choice(seed.objects[1:])
    if op == "delete":
        del h[path]
        return f"{path} deleted"
    if op == "rename":
        h.move(path, path + "_x")
        return f"{path} renamed"
    if op == "swap":
        others = [
            p for p in seed.datasets if p != path and p.rsplit("/", 1)[0] == path.rsplit("/", 1)[0]
        ]
        if not others:
            return "swap nothing"
        other = rng.choice(others)
        h.move(path, "/fuzz_tmp")
        h.move(other, path)
        h.move("/fuzz_tmp", other)
        return f"{path} <-> {other} swapped"
    if op == "add":
        parent = path if path in ("/documents", "/chunks", "/bm25") else "/"
        h[parent.rstrip("/") + "/fuzz_extra"] = np.arange(3)
        return f"dataset added under {parent}"
    if op == "soft-link":
        del h[path]
        h[path] = __import__("h5py").SoftLink(rng.choice(seed.objects[1:]))
        return f"{path} made a soft link"
    del h[path]
    h.create_group(path)
    return f"{path} replaced by an empty group"


STRUCTURE_MUTATIONS: tuple[Callable[[Any, Seed, random.Random], str], ...] = weighted(
    (change_attribute, 2), (rewrite_dataset, 3), (move_elements, 1)
)


# -- restamping ----------------------------------------------------------------------------------


def element_digests(h: Any) -> dict[str, str]:
    """Every element's digests as the writer computes them (spec §Integrity), for whatever the
    file now holds; an element whose values cannot be digested is left out."""
    out = {"/@attrs": attrs_digest(dict(h.attrs.items()))}
    for el in F.ELEMENTS:
        with contextlib.suppress(Exception):
            obj = h[el.path]
            out[el.path + "@attrs"] = attrs_digest(dict(obj.attrs.items()))
            if el.dtype and hasattr(obj, "dtype"):
                values = obj[()]
                if obj.dtype.kind == "O":
                    out[el.path] = strings_digest(
                        [x if isinstance(x, bytes) else str(x).encode() for x in values]
                    )
                else:
                    out[el.path] = numeric_digest(np.asarray(values))
    return out


def restamp(path: Path, level: str, digests: dict[str, str] | None = None) -> None:
    """Bring the manifest up to ``level`` (see the module docstring); a header that no longer
    parses is left as it is."""
    if level == "raw":
        return
    with open(path, "r+b") as f:
        block = bytearray(f.read(F.USERBLOCK_SIZE))
        try:
            manifest, signature, _ = _header_parts(block)
        except (ValueError, struct.error, UnicodeDecodeError):
            return
        if not isinstance(manifest, dict):
            return
        manifest["file_size"], manifest["hdf5_sha256"] = hash_hdf5_bytes(path)
        if level == "elements" and digests is not None:
            manifest["elements"] = digests
        with contextlib.suppress(ValueError, TypeError):
            _write_manifest(block, manifest, signature)
            f.seek(0)
            f.write(block)


# -- the mutator ---------------------------------------------------------------------------------


def mutate(seed: Seed, rng: random.Random, out: Path) -> Mutant:
    """Write one mutant of ``seed`` to ``out``."""
    family = rng.choices(("bytes", "structure", "manifest"), weights=(5, 4, 1))[0]
    level = rng.choice(RESTAMP_LEVELS)
    if family == "structure":
        import h5py

        out.write_bytes(seed.data)
        digests = None
        with h5py.File(out, "r+", locking=False) as h:
            label = rng.choice(STRUCTURE_MUTATIONS)(h, seed, rng)
            if level == "elements":
                digests = element_digests(h)
        if level == "raw":  # h5py moved bytes around: keep the file size honest at least
            level = "bytes"
        restamp(out, level, digests)
        return Mutant(seed.name, label, level, forged=True)
    data = bytearray(seed.data)
    if family == "manifest":
        label = edit_manifest(data, seed, rng)
        level = "raw"
    else:
        label = rng.choice(BYTE_MUTATIONS)(data, seed, rng)
        level = "raw" if rng.random() < 0.5 else "bytes"
    out.write_bytes(data)
    restamp(out, level)
    return Mutant(seed.name, label, level)


__all__ = ["Mutant", "Seed", "element_digests", "mutate", "restamp"]
