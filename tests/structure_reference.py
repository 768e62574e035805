"""The structure allowlist as it was written before it moved to h5py's low-level API
(kbpack/pack/structure.py): h5py's high-level objects, one per element. Kept as a reference:
tests/pack/test_structure_reference.py checks that the low-level walk finds what this one finds."""

from __future__ import annotations

from typing import Any

import numpy as np

from kbpack.errors import describe
from kbpack.pack import format as F
from kbpack.pack.structure import ALLOWED_FILTERS, FLETCHER32, Finding

_KIND_OF = {"str": "O", "i1": "i", "i4": "i", "i8": "i", "u1": "u", "f2": "f", "f8": "f"}


def check_structure_high_level(
    h: Any, counts: dict[str, int], file_size: int, format_version: int = F.FORMAT_VERSION
) -> list[Finding]:
    """Findings for every object, link, dtype, filter or size the spec of ``format_version``
    does not allow."""
    import h5py

    findings: list[Finding] = []
    seen: set[str] = set()

    def visit(name: str, link: Any) -> None:
        path = "/" + name
        if not isinstance(link, h5py.HardLink):
            kind = type(link).__name__
            findings.append(
                Finding("link-not-allowed", path, f"{kind} (only hard links are allowed)")
            )
            return
        seen.add(path)

    h.visititems_links(visit)
    for path in sorted(seen):
        el = F.ELEMENT_BY_PATH.get(path)
        if el is None or el.since > format_version:
            findings.append(Finding("unknown-object", path, "not an element of the kbpack spec"))
            continue
        try:
            obj = h.get(path, getclass=False)
        except Exception as e:
            findings.append(Finding("unreadable-object", path, describe(e)))
            continue
        is_group = isinstance(obj, h5py.Group)
        if bool(el.dtype) == is_group or not isinstance(obj, h5py.Group | h5py.Dataset):
            want = "a dataset" if el.dtype else "a group"
            findings.append(Finding("wrong-object-type", path, f"must be {want}"))
            continue
        if h5py.h5o.get_info(obj.id).rc != 1:
            # two names for one object (e.g. /chunks/to aliasing /chunks/from) defeat checks
            # that assume each element is its own data
            findings.append(Finding("hard-link-alias", path, "the object has more than one name"))
            continue
        findings.extend(_check_attrs(obj, path))
        if not is_group:
            findings.extend(_check_dataset(obj, el, counts, file_size, format_version))
    for el in F.ELEMENTS:
        if el.path not in seen and not el.optional and el.since <= format_version:
            findings.append(Finding("missing-element", el.path, "required by the spec"))
    findings.extend(_check_attrs(h, "/"))
    return findings


def _check_attrs(obj: Any, path: str) -> list[Finding]:
    import h5py

    out: list[Finding] = []
    try:
        for name in obj.attrs:
            dt = obj.attrs.get_id(name).dtype
            if h5py.check_dtype(ref=dt) is not None or dt.kind == "V":
                out.append(
                    Finding("attribute-not-allowed", path, f"attribute {name!r} has type {dt}")
                )
    except Exception as e:
        out.append(Finding("unreadable-attributes", path, describe(e)))
    return out


def _check_dataset(
    ds: Any, el: F.Element, counts: dict[str, int], file_size: int, format_version: int
) -> list[Finding]:
    import h5py

    out: list[Finding] = []
    path = el.path
    dt = ds.dtype
    if h5py.check_dtype(ref=dt) is not None:
        return [Finding("reference-not-allowed", path, "object or region references are refused")]
    want = _KIND_OF[el.dtype]
    if el.dtype == "str":
        info = h5py.check_string_dtype(dt)
        if info is None or info.length is not None:
            out.append(Finding("wrong-dtype", path, f"{dt}: must be variable-length UTF-8 strings"))
    elif dt.kind != want or dt.itemsize != np.dtype(el.dtype).itemsize:
        out.append(Finding("wrong-dtype", path, f"{dt}: must be {el.dtype}"))
    if ds.ndim != el.ndim:
        out.append(Finding("wrong-shape", path, f"rank {ds.ndim}, must be {el.ndim}"))
        return out
    if ds.is_virtual:
        return [*out, Finding("virtual-dataset", path, "virtual datasets are refused")]
    dcpl = ds.id.get_create_plist()
    if dcpl.get_external_count():
        return [
            *out,
            Finding("external-storage", path, "raw data stored in another file is refused"),
        ]
    codes = [dcpl.get_filter(i)[0] for i in range(dcpl.get_nfilters())]
    for code in codes:
        if code not in ALLOWED_FILTERS:
            out.append(Finding("filter-not-allowed", path, f"HDF5 filter {code}"))
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
    if rows is not None and ds.shape[0] != rows:
        out.append(
            Finding("count-mismatch", path, f"{ds.shape[0]} rows, manifest counts {el.rows}={rows}")
        )
    # declared bytes must fit the file; a vlen string row costs at least its 8-byte heap
    # pointer there, so a 10**12-row string column is refused too
    declared = int(np.prod(ds.shape, dtype=np.float64)) * dt.itemsize
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
    return out
