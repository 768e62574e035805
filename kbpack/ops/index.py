"""``kbpack index PACK --ivf``: add (or rebuild) the approximate index ``/ivf`` of an existing
pack without re-embedding anything (spec/FORMAT.md §3.13).

The vectors are read through HDF5's checksum, block by block, into a spool file beside the
output and memory-mapped from there (a 10M-chunk pack's 7.7 GB never sit in memory at once);
``kbpack.pack.ivf.build_index`` builds the index as a writer would, its int8 codes quantised
from the spool a block at a time as they are written (never held whole). The pack is copied to a
temp file beside the output, its datasets (centroids, lists, int8 codes) and the group are
added there (an index already present, with or without codes, is replaced), the manifest's
count, digests, size and byte digest are recomputed, and the file replaces the output
atomically. Every other element is untouched; a signature does not survive (it covered the old
manifest): sign the new pack again.
"""

from __future__ import annotations

import contextlib
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kbpack.errors import UsageError
from kbpack.pack import format as F
from kbpack.pack.digest import StreamDigest, attrs_digest, numeric_digest
from kbpack.pack.ivf import (
    CodeSource,
    IvfIndex,
    NotFiniteVector,
    build_index,
    default_probe,
    ivf_attrs,
    ivf_datasets,
)
from kbpack.pack.manifest import read_header
from kbpack.pack.read import DamagedDataError, PackReader, hdf5_errors
from kbpack.pack.rewrite import publish
from kbpack.pack.storage import create_dataset
from kbpack.pack.write import temp_path_for
from kbpack.pack.write_hdf5 import write_blocks

READ_ROWS = 65536


@dataclass(frozen=True)
class IndexReport:
    path: Path
    chunks: int
    lists: int
    probe: int
    replaced: bool  # the pack had an index, now rebuilt
    signature_dropped: bool

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "path": str(self.path)}


def add_ivf(src: Path, dst: Path, lists: int | None = None) -> IndexReport:
    """Write ``src`` with an IVF index of ``lists`` lists (None: about 2 sqrt(chunks)) to ``dst``
    (which may be ``src``: replaced atomically)."""
    tmp = temp_path_for(dst)
    spool = tmp.with_name(tmp.name + ".vec")
    try:
        with PackReader(src) as r:  # refuses a damaged or hostile pack before anything
            if not r.has_vectors:
                raise UsageError(f"{src}: a BM25-only pack has no vectors to index")
            n = int(r.counts.get("chunks", 0))
            if n == 0:
                raise UsageError(f"{src}: the pack has no chunks to index")
            if lists is not None and not 1 <= lists <= n:
                raise UsageError(f"--ivf-lists {lists}: give 1 to the pack's {n} chunks")
            replaced = r.has_ivf
            signed = read_header(src).signature is not None
            dims = _spool_vectors(r, spool)
        vectors = np.memmap(spool, dtype="<f2", mode="r", shape=(n, dims))
        try:  # the codes quantised from the spool as they are written (never held whole)
            try:
                index = build_index(vectors, lists, stream=True)
            except NotFiniteVector as e:  # (its index would be refused by every reader)
                raise DamagedDataError(str(src), F.VEC_DATA, str(e)) from None
            shutil.copyfile(src, tmp)
            elements = _write_index(tmp, index, str(src))
        finally:
            del vectors
        manifest = read_header(src).manifest
        if replaced:
            for key in [k for k in manifest.elements if k.startswith(F.IVF)]:
                del manifest.elements[key]
        manifest.elements.update(elements)
        manifest.counts["ivf_lists"] = index.lists
        publish(tmp, dst, manifest)  # unsigned: see the doc
    finally:
        for p in (tmp, spool):
            with contextlib.suppress(OSError):
                p.unlink(missing_ok=True)
    return IndexReport(dst, n, index.lists, default_probe(index.lists), replaced, signed)


def _spool_vectors(r: PackReader, spool: Path) -> int:
    """Copy ``/vectors/data`` (checksum-checked reads) into ``spool``; its width."""
    ds = r.dataset(F.VEC_DATA)
    n, dims = int(ds.shape[0]), int(ds.shape[1])
    digest = StreamDigest()
    with open(spool, "wb") as f:
        for at in range(0, n, READ_ROWS):
            block = np.ascontiguousarray(ds[at : at + READ_ROWS], dtype="<f2")
            digest.numeric(block)
            f.write(block.tobytes())
    if digest.hexdigest() != r.manifest.elements.get(F.VEC_DATA):
        raise UsageError(f"{r.where}: {F.VEC_DATA} differs from the manifest's digest; verify it")
    return dims


def _write_index(path: Path, index: IvfIndex, where: str) -> dict[str, str]:
    """Add ``/ivf`` to the HDF5 file ``path`` (replacing one there); the digests it adds."""
    import h5py

    out: dict[str, str] = {}
    with hdf5_errors(where), h5py.File(path, "r+", libver=("v110", "v110"), locking=False) as h:
        if F.IVF in h:
            del h[F.IVF]
        group = h.create_group(F.IVF)
        el = F.ELEMENT_BY_PATH[F.IVF]
        attrs: dict[str, Any] = {F.A_KIND: el.kind, F.A_VERSION: 1, F.A_DESCRIPTION: el.description}
        attrs.update(ivf_attrs(index))
        for k, v in attrs.items():
            group.attrs[k] = v
        out[F.IVF + "@attrs"] = attrs_digest(attrs)
        for p, data in ivf_datasets(index):
            # (the previous dataset stays open until the next one is made and written: where
            # HDF5 puts its metadata, and so the pack's bytes, depend on when it is closed)
            if isinstance(data, CodeSource):  # the codes, a block at a time
                made = create_dataset(h, p, shape=data.shape, dtype=data.dtype)
                digest = write_blocks(made, data)
            else:
                made = create_dataset(h, p, data=data)
                digest = numeric_digest(data)
            ds = made
            e = F.ELEMENT_BY_PATH[p]
            ds_attrs = {F.A_KIND: e.kind, F.A_VERSION: 1, F.A_DESCRIPTION: e.description}
            for k, v in ds_attrs.items():
                ds.attrs[k] = v
            out[p] = digest
            out[p + "@attrs"] = attrs_digest(ds_attrs)
        h.flush()
    return out
