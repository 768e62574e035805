"""What a pack holds, as ``kbpack inspect`` and serve's ``/api/inspect`` show it: counts, model,
pipeline, layout, failed documents; and the stored bytes of every element."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kbpack.pack import format as F


def element_bytes(r: Any) -> dict[str, int]:
    """Stored bytes of every dataset, by path, through the structure check's link walk (not
    ``visititems``: see ``structure.links``); any failure is one line naming the pack."""
    from h5py import h5d, h5l, h5o

    from kbpack.pack.read import hdf5_errors
    from kbpack.pack.structure import links

    sizes: dict[str, int] = {}
    with hdf5_errors(r.where):
        for name, link_type in links(r.h5):
            oid = h5o.open(r.h5.id, name) if link_type == h5l.TYPE_HARD else None
            if isinstance(oid, h5d.DatasetID):
                sizes["/" + name.decode("utf-8", "backslashreplace")] = int(oid.get_storage_size())
    return sizes


def describe(path: Path) -> dict[str, Any]:
    from kbpack.pack.read import PackReader

    with PackReader(path) as r:
        return describe_reader(r, path)


def describe_reader(r: Any, path: Path) -> dict[str, Any]:
    """``describe`` of a pack already open: serve's ``/api/inspect`` describes the file it
    checked and serves, never whatever the path names now."""
    c = r.counts
    names = r.strings(F.DOC_NAME)
    status = r.strings(F.DOC_STATUS)
    reasons = r.strings(F.DOC_REASON)
    stages = r.strings(F.DOC_STAGE)
    sizes = element_bytes(r)
    from kbpack.ops.migrate import staleness

    return {
        "path": str(path),
        "format_version": r.format_version,
        "kbpack_version": r.manifest.kbpack_version,
        "pipeline_version": r.root_attrs.get(F.R_PIPELINE_VERSION),
        "created": r.manifest.created,
        "file_size": r.manifest.file_size,
        "signed": r.header.signature is not None,
        "hdf5_metadata_checksummed": r.metadata_checksummed,
        "counts": c,
        "model": r.model,
        "embedded_model": r.has_embedded_model,
        "search": r.search_defaults,
        "bm25": {
            "k1": r.bm25_params[0],
            "b": r.bm25_params[1],
            # raw, so that a pack with an analyzer this kbpack lacks can still be inspected
            "analyzer": str(r.attrs(F.BM25).get(F.BM25_ANALYZER, "plain")),
            # what each chunk's postings count (spec 3.7): "content" for packs of 0.2.x
            "fields": str(r.attrs(F.BM25).get(F.BM25_FIELDS, "content")),
        },
        "element_bytes": sizes,
        "failed": [
            {"name": n, "stage": st, "reason": why}
            for n, s, st, why in zip(names, status, stages, reasons, strict=True)
            if s == "failed"
        ],
        "skipped": [
            {"name": n, "reason": why}
            for n, s, why in zip(names, status, reasons, strict=True)
            if s == "skipped"
        ],
        "stale": staleness(r),
        # how the pack came to be, when not by one build: merge, shard, member of a set
        "provenance": {
            k: r.manifest.extra[k] for k in ("merged_from", "shard", "set") if k in r.manifest.extra
        },
    }
