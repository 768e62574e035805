"""The structural allowlist: what a pack may contain, checked before any data is read.

Every object must be a hard-linked group or dataset that the spec names (``format.ELEMENTS``),
with the spec's dtype and rank, contiguous or chunked storage only, no external storage, no
virtual dataset, no reference types, only deflate/shuffle/fletcher32 filters (and from format 2
Fletcher-32 on every numeric dataset, so that every read of its data is checked), and a declared size
that agrees with the manifest counts and fits the file. Only metadata is read here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from kbpack.errors import describe
from kbpack.pack import format as F

ALLOWED_FILTERS = {1, 2, 3}  # H5Z_FILTER_DEFLATE, SHUFFLE, FLETCHER32
FLETCHER32 = 3
SHUFFLE = 2
DEFLATE = 1
_KIND_OF = {"str": "O", "i1": "i", "i4": "i", "i8": "i", "u1": "u", "f2": "f", "f8": "f"}


@dataclass(frozen=True)
class Finding:
    """One problem: a stable code, the element path, a one-line detail."""

    code: str
    path: str
    detail: str

    def __str__(self) -> str:
        return f"{self.code} {self.path}: {self.detail}"

    def as_dict(self) -> dict[str, str]:
        return {"code": self.code, "path": self.path, "detail": self.detail}


def check_structure(
    h: Any, counts: dict[str, int], file_size: int, format_version: int = F.FORMAT_VERSION
) -> list[Finding]:
    """Findings for every object, link, dtype, filter or size the spec of ``format_version``
    does not allow.

    Written against h5py's low-level API (link visit with link info, ``h5o.open``, the
    dataset's own dtype, shape and creation property list): the high-level objects cost a
    Python object, a lock and a name lookup per property, which made this allowlist the
    largest item of a pack's first open (11 ms of 24 ms in the pre-flight child on the seed
    packs of bench/fuzz.py; this walk checks the same things in about a third of that)."""
    from h5py import h5l, h5o

    findings: list[Finding] = []
    hard: list[tuple[str, bytes]] = []  # (path, the name HDF5 knows it by)
    for name, link_type in links(h):
        path = "/" + name.decode("utf-8", "backslashreplace")
        if link_type != h5l.TYPE_HARD:
            kind = _LINK_KIND.get(link_type, "user-defined link")
            findings.append(
                Finding("link-not-allowed", path, f"{kind} (only hard links are allowed)")
            )
            continue
        hard.append((path, name))
    found = {path for path, _ in hard}
    for path, name in sorted(hard):
        el = F.ELEMENT_BY_PATH.get(path)
        if el is None or el.since > format_version:
            findings.append(Finding("unknown-object", path, "not an element of the kbpack spec"))
            continue
        try:
            oid = h5o.open(h.id, name)
            # inside the try: reading an object's info, attributes and chunk index can meet
            # damage (in a 'v110' pack, a checksum mismatch) that opening it did not
            findings.extend(_check_object(oid, el, path, counts, file_size, format_version))
        except Exception as e:
            findings.append(Finding("unreadable-object", path, describe(e)))
    dense = _root_says_dense(h)
    for el in F.ELEMENTS:
        why = _why_required(el, counts, dense, format_version)
        if why and el.path not in found:
            findings.append(Finding("missing-element", el.path, why))
    root = h5o.open(h.id, b"/")
    try:
        # the root's own info walks its symbol table and attribute indexes, which no read
        # above touches: a damaged B-tree node there failed only inspect (bench/fuzz.py 61:13322)
        h5o.get_info(root)
    except Exception as e:
        findings.append(Finding("unreadable-object", "/", describe(e)))
    findings.extend(_check_attrs(root, "/"))
    return findings


# counts that only optional elements have rows of (pieces, copies, the embedded model, ...)
_OPTIONAL_COUNTS = {e.rows for e in F.ELEMENTS if e.optional} - {
    e.rows for e in F.ELEMENTS if not e.optional
}


def links(h: Any) -> list[tuple[bytes, int]]:
    """Every link below the root: (the name HDF5 knows it by, its type), through the link
    visit (``H5Lvisit``), which reads only the groups' link tables. ``visititems``
    (``H5Ovisit``) also computes each object's header info, and fails on damage no read
    touches (bench/fuzz.py packs 61:13322)."""
    out: list[tuple[bytes, int]] = []
    h.id.links.visit(lambda name, info: out.append((name, info.type)), info=True)
    return out


def _why_required(
    el: F.Element, counts: dict[str, int], dense: bool, format_version: int
) -> str | None:
    """Why this pack must hold ``el`` (None: it may lack it)."""
    if el.since > format_version:
        return None
    if not el.optional:
        return "required by the spec"
    if dense and el.path in (F.VECTORS, F.VEC_DATA, F.MODEL):
        # optional in a BM25-only pack, required in a dense one: with /vectors/data deleted
        # (digests restamped) verify passed and query failed on a KeyError (bench/fuzz.py 61:420)
        return "required when the root says kbpack:vectors = 'dense' (spec §3.5, §3.6)"
    # an optional element the manifest counts rows of must be there: with /model/gguf's link
    # lost (4 bytes overwritten) query answered as if the pack embedded no model (70:17959)
    rows = counts.get(el.rows, 0) if el.rows in _OPTIONAL_COUNTS else 0
    if isinstance(rows, int) and rows > 0:
        return f"the manifest counts {rows} {el.rows}, the rows of this element"
    return None


def _root_says_dense(h: Any) -> bool:
    """Whether the root's ``kbpack:vectors`` is "dense" (False when it cannot be read: the
    attribute checks report that)."""
    try:
        value = h.attrs.get(F.R_VECTORS)
    except Exception:
        return False
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return bool(value == "dense")


def _check_object(
    oid: Any,
    el: F.Element,
    path: str,
    counts: dict[str, int],
    file_size: int,
    format_version: int,
) -> list[Finding]:
    from h5py import h5d, h5g, h5o

    is_group = isinstance(oid, h5g.GroupID)
    if bool(el.dtype) == is_group or not isinstance(oid, h5g.GroupID | h5d.DatasetID):
        want = "a dataset" if el.dtype else "a group"
        return [Finding("wrong-object-type", path, f"must be {want}")]
    if h5o.get_info(oid).rc != 1:
        # two names for one object (e.g. /chunks/to aliasing /chunks/from) defeat checks
        # that assume each element is its own data
        return [Finding("hard-link-alias", path, "the object has more than one name")]
    out = _check_attrs(oid, path)
    if not is_group:
        out.extend(_check_dataset(oid, el, counts, file_size, format_version))
    return out


_LINK_KIND = {1: "SoftLink", 64: "ExternalLink"}  # h5l.TYPE_SOFT, h5l.TYPE_EXTERNAL


def _check_attrs(oid: Any, path: str) -> list[Finding]:
    import h5py
    from h5py import h5, h5a

    out: list[Finding] = []
    try:
        # one walk of the attribute index, then each opened by name: opening by position
        # sorts the whole dense index per call, and 20,000 attributes on /chunks (a 1.5 MB
        # pack) kept verify busy for minutes (issue 30, found 7)
        names: list[bytes] = []
        h5a.iterate(oid, names.append, order=h5.ITER_NATIVE)
        for raw in names:
            dt = h5a.open(oid, raw).dtype
            if h5py.check_dtype(ref=dt) is not None or dt.kind == "V":
                try:
                    name: str | bytes = raw.decode("utf-8")
                except UnicodeDecodeError:
                    name = raw
                out.append(
                    Finding("attribute-not-allowed", path, f"attribute {name!r} has type {dt}")
                )
    except Exception as e:
        out.append(Finding("unreadable-attributes", path, describe(e)))
    return out


def _file_type(dtype: str) -> Any:
    """The HDF5 file type a pack stores for the spec's numeric ``dtype``."""
    from h5py import h5t

    return {
        "i1": h5t.STD_I8LE,
        "i4": h5t.STD_I32LE,
        "i8": h5t.STD_I64LE,
        "u1": h5t.STD_U8LE,
        "f2": h5t.IEEE_F16LE,
        "f8": h5t.IEEE_F64LE,
    }[dtype]


def _check_chunk_index(
    did: Any, dcpl: Any, path: str, shape: tuple[int, ...], file_size: int
) -> list[Finding]:
    """A pack's writer writes every chunk of a chunked dataset, so its chunk index holds
    exactly ceil(rows / chunk rows) entries. The index (a version-1 B-tree in a pack written
    with libver 'earliest', spec §1) has no checksum: one flipped bit in a node's entry count gave /bm25/tf's index two phantom
    entries of size 0, and HDF5 read zeros for every row with no error (bench/fuzz.py
    packs 41:3070's class, found by flipping each bit of that object header in turn).

    Each entry must also be one the writer could have made: its rows in range and aligned, a
    filter mask of 0 (it skips no filter), a size > 0 (a Fletcher-32 chunk has at least its 4
    checksum bytes) and its bytes inside the file. One overwritten entry of /sections/to (size
    0, mask 0x40000000) made HDF5 2.0 crash with SIGSEGV on the whole-column read that checks
    the digest (bench/fuzz.py packs 61:11726): the first open must refuse it first."""
    rows = dcpl.get_chunk()[0]
    want = -(-shape[0] // rows) if rows else 0
    entries: list[Any] = []
    try:
        # a pack written with libver 'v110' checksums its chunk index (spec §1): damage there
        # fails these calls, where the first read of the data would otherwise fail later
        got = did.get_num_chunks()
        if got:
            did.chunk_iter(entries.append)
    except Exception as e:
        return [Finding("chunk-index", path, f"its chunk index cannot be read: {describe(e)}")]
    if got != want:
        return [
            Finding(
                "chunk-index",
                path,
                f"its chunk index holds {got} chunks, {shape[0]} rows of {rows} need {want}",
            )
        ]
    seen: set[int] = set()
    for entry in entries:
        first = int(entry.chunk_offset[0])
        where = f"its chunk index entry at row {first}"
        if first % rows or not 0 <= first < shape[0] or first in seen:
            return [Finding("chunk-index", path, f"{where} is not a chunk of its rows")]
        seen.add(first)
        if entry.filter_mask:
            return [
                Finding("chunk-index", path, f"{where} skips filters (mask {entry.filter_mask:#x})")
            ]
        end = int(entry.byte_offset) + int(entry.size)
        if entry.size <= 0 or int(entry.byte_offset) < F.USERBLOCK_SIZE or end > file_size:
            return [
                Finding(
                    "chunk-index",
                    path,
                    f"{where} points at bytes {entry.byte_offset}..{end}, outside the file's data",
                )
            ]
    return []


def _check_pipeline(
    path: str, filters: list[Any], itemsize: int, format_version: int
) -> list[Finding]:
    """The filter pipeline in the object header, where neither Fletcher-32 (it checks the
    chunks) nor an element digest (a query reads parts) reaches. One flipped bit there made
    shuffle's element size 4100 instead of 4 (bench/fuzz.py, packs 41:3070): HDF5 then skips
    the unshuffle, the checksum of the compressed bytes still passes, and a query ranked
    by tf values of 0x01010101 without a word. Shuffle's element size must be the dtype's
    (HDF5 always writes it so), and from format 2 the pipeline must be the spec's (§1.1)."""
    from kbpack.pack.storage import EITHER_WAY, compressed

    out = []
    for code, _flags, params, _name in filters:
        if code == SHUFFLE and tuple(params) != (itemsize,):
            out.append(
                Finding(
                    "filter-pipeline",
                    path,
                    f"shuffle's element size {tuple(params)} is not the dtype's {itemsize} "
                    "bytes: HDF5 would return the bytes unshuffled",
                )
            )
    if format_version >= F.FIRST_CHECKSUMMED_FORMAT and path in F.ELEMENT_BY_PATH:
        codes = [f[0] for f in filters]
        deflated, plain = [SHUFFLE, DEFLATE, FLETCHER32], [FLETCHER32]
        want = deflated if compressed(path) else plain
        allowed = (deflated, plain) if path in EITHER_WAY else (want,)
        if F.ELEMENT_BY_PATH[path].dtype != "str" and codes not in allowed and FLETCHER32 in codes:
            out.append(
                Finding(
                    "filter-pipeline",
                    path,
                    f"filters {codes}: format {format_version} stores it with {want} (spec §1.1)",
                )
            )
    return out


def _check_dataset(
    did: Any, el: F.Element, counts: dict[str, int], file_size: int, format_version: int
) -> list[Finding]:
    import h5py
    from h5py import h5d

    out: list[Finding] = []
    path = el.path
    dt = did.dtype
    if h5py.check_dtype(ref=dt) is not None:
        return [Finding("reference-not-allowed", path, "object or region references are refused")]
    want = _KIND_OF[el.dtype]
    if el.dtype == "str":
        info = h5py.check_string_dtype(dt)
        if info is None or info.length is not None:
            out.append(Finding("wrong-dtype", path, f"{dt}: must be variable-length UTF-8 strings"))
    elif dt.kind != want or dt.itemsize != np.dtype(el.dtype).itemsize:
        out.append(Finding("wrong-dtype", path, f"{dt}: must be {el.dtype}"))
    elif not did.get_type().equal(_file_type(el.dtype)):
        # kind and size agree, the bit layout does not: a flipped bit in the datatype message
        # (byte order, precision, offset, float fields) makes HDF5 convert every value wrong,
        # and Fletcher-32 (over the stored bytes) passes. Packs store little-endian only.
        out.append(
            Finding(
                "wrong-dtype",
                path,
                f"{dt}: not the spec's little-endian {el.dtype} "
                "(byte order, precision or bit layout differ)",
            )
        )
    shape = did.shape
    if len(shape) != el.ndim:
        out.append(Finding("wrong-shape", path, f"rank {len(shape)}, must be {el.ndim}"))
        return out
    dcpl = did.get_create_plist()
    if dcpl.get_layout() == h5d.VIRTUAL:
        return [*out, Finding("virtual-dataset", path, "virtual datasets are refused")]
    if dcpl.get_external_count():
        return [
            *out,
            Finding("external-storage", path, "raw data stored in another file is refused"),
        ]
    filters = [dcpl.get_filter(i) for i in range(dcpl.get_nfilters())]
    codes = [f[0] for f in filters]
    for code in codes:
        if code not in ALLOWED_FILTERS:
            out.append(Finding("filter-not-allowed", path, f"HDF5 filter {code}"))
    out.extend(_check_pipeline(path, filters, dt.itemsize, format_version))
    if dcpl.get_layout() == h5d.CHUNKED:
        out.extend(_check_chunk_index(did, dcpl, path, shape, file_size))
    checked = format_version >= F.FIRST_CHECKSUMMED_FORMAT and el.dtype != "str"
    if checked and FLETCHER32 not in codes:
        out.append(
            Finding(
                "checksum-missing",
                path,
                f"format {format_version} stores every numeric dataset with Fletcher-32",
            )
        )
    rows = counts.get(el.rows)
    if rows is not None and shape[0] != rows:
        out.append(
            Finding("count-mismatch", path, f"{shape[0]} rows, manifest counts {el.rows}={rows}")
        )
    # declared bytes must fit the file; a vlen string row costs at least its 8-byte heap
    # pointer there, so a 10**12-row string column is refused too
    declared = int(np.prod(shape, dtype=np.float64)) * dt.itemsize
    compressed = 1 in codes
    limit = file_size * (1024 if compressed else 1)
    if declared > limit:
        out.append(
            Finding(
                "size-out-of-range",
                path,
                f"declares {declared} bytes, the file has {file_size}",
            )
        )
    elif shape[0] > _most_rows(el.rows, file_size):
        out.append(
            Finding(
                "size-out-of-range",
                path,
                f"declares {shape[0]} rows of {el.rows}; a file of {file_size} bytes holds at "
                f"most {_most_rows(el.rows, file_size)} (spec §1.1)",
            )
        )
    return out


# Rows each backed by at least one byte of document text (or term) that the file holds as
# it is, outside any compressed dataset (HDF5's global heap, the terms blob): a pack of F bytes
# has at most F of them. Deflated zeros let a 3.6 MB pack declare 50 M chunks, and a BM25
# query allocated per declared chunk (1.05 GB; issue 30, found 7). Postings: a chunk's distinct
# terms each take a character and a separator of its text, overlapping chunks repeat some.
_TEXT_ROWS = {"documents": 1, "sections": 1, "pages": 1, "chunks": 1, "pieces": 1, "copies": 1}
_TEXT_ROWS |= {"links": 1}  # a link has at least one code point of text (spec §3.12)
_TEXT_ROWS |= {"terms": 1, "terms_plus_one": 1, "terms_bytes": 1, "postings": 4}
_TEXT_ROWS |= {"ivf_lists": 1}  # an IVF index has at most one list per chunk (spec §3.13)


def _most_rows(rows: str, file_size: int) -> float:
    """The most rows of kind ``rows`` a file of ``file_size`` bytes can back (inf: no bound)."""
    per_byte = _TEXT_ROWS.get(rows)
    return float("inf") if per_byte is None else per_byte * file_size + 1
