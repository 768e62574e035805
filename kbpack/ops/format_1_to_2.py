"""Format step 1 -> 2: the same elements, stored checksummed and compressed (spec §1.1, §5).

Format 2 changes how datasets are stored, not what they hold: every element is copied with its
values and attributes unchanged, so every data digest in the manifest stays valid; only the root
attributes (``kbpack:format_version``, ``kbpack:version``) say 2, and the manifest gets their new
digest, the new byte size and SHA-256. A signature does not survive (it covered the old
manifest); sign the migrated pack again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from kbpack.ops.format_steps import format_step
from kbpack.pack import format as F
from kbpack.pack.digest import attrs_digest
from kbpack.pack.manifest import encode_header, hash_hdf5_bytes, write_header
from kbpack.pack.read import PackReader, hdf5_errors
from kbpack.pack.storage import create_dataset
from kbpack.pack.write import _fsync_file

COPY_BLOCK_BYTES = 16 * 2**20  # bounded memory: a 1M-chunk pack's vectors are 768 MB
STRING_ROWS = 65536  # titles, names: short
TEXT_ROWS = 64  # canonical texts: whole documents


@format_step(1)
def format_1_to_2(src: Path, dst: Path) -> None:
    """Rewrite the format-1 pack ``src`` as the format-2 pack ``dst`` (a new file)."""
    import h5py

    with PackReader(src) as reader:  # refuses a damaged or hostile source before copying it
        if reader.format_version != 1:
            raise ValueError(f"{src}: format {reader.format_version}, this step reads format 1")
        manifest = reader.manifest
        with (
            hdf5_errors(str(src)),
            h5py.File(dst, "w", userblock_size=F.USERBLOCK_SIZE, libver=("v110", "v110")) as h,
        ):
            root = dict(reader.h5.attrs.items())
            root[F.R_FORMAT_VERSION] = 2
            root[F.A_VERSION] = 2
            _set_attrs(h, root)
            for el in F.ELEMENTS:
                if el.path not in reader.h5:
                    continue  # optional and absent (a BM25-only pack has no /vectors)
                old = reader.h5[el.path]
                if not el.dtype:
                    _set_attrs(h.create_group(el.path), old.attrs)
                    continue
                new = create_dataset(h, el.path, shape=old.shape, dtype=old.dtype)
                if old.dtype.kind == "O":  # read through h5py here: check the rows first
                    reader.check_string_rows(el.path)
                _copy_rows(old, new)
                _set_attrs(new, old.attrs)
    manifest.format_version = 2
    manifest.elements["/@attrs"] = attrs_digest(root)
    manifest.file_size, manifest.hdf5_sha256 = hash_hdf5_bytes(dst)
    write_header(dst, encode_header(manifest.to_json_bytes()))
    _fsync_file(dst)


def _copy_rows(old: Any, new: Any) -> None:
    n = old.shape[0]
    if not n:
        return
    if old.dtype.kind == "O":  # strings: a canonical text row can be megabytes
        step = TEXT_ROWS if old.name == F.DOC_TEXT else STRING_ROWS
    else:
        row_bytes = old.dtype.itemsize * int(np.prod(old.shape[1:], dtype=np.int64))
        step = max(1, COPY_BLOCK_BYTES // max(1, row_bytes))
    for at in range(0, n, step):
        new[at : at + step] = old[at : at + step]


def _set_attrs(obj: Any, attrs: Any) -> None:
    for k, v in attrs.items():
        obj.attrs[k] = v


__all__ = ["format_1_to_2"]
