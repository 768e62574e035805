"""Rewrite a pack's small metadata (search settings) into a new file, atomically.

The HDF5 content changes, so the per-element digest of what changed, the byte digest and the
manifest are recomputed; a signature does not survive (it covered the old manifest).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kbpack.pack import format as F
from kbpack.pack.digest import attrs_digest
from kbpack.pack.manifest import (
    Manifest,
    encode_header,
    hash_hdf5_bytes,
    read_header,
    write_header,
)
from kbpack.pack.read import PackReader, hdf5_errors
from kbpack.pack.write import _fsync_dir, _fsync_file, temp_path_for
from kbpack.runtime import interrupt


def rewrite_search_settings(
    src: Path, dst: Path, max_distance: float, calibration: Mapping[str, Any] | None
) -> None:
    PackReader(src).close()  # refuse a damaged or hostile source before copying it
    tmp = temp_path_for(dst)
    try:
        shutil.copyfile(src, tmp)
        import h5py

        with hdf5_errors(str(src)), h5py.File(tmp, "r+", locking=False) as h:
            g = h[F.SEARCH]
            g.attrs[F.SEARCH_MAX_DISTANCE] = float(max_distance)
            if calibration is not None:
                g.attrs[F.SEARCH_CALIBRATION] = json.dumps(dict(calibration), sort_keys=True)
            new_attrs = dict(g.attrs.items())
        manifest = read_header(src).manifest
        manifest.elements[F.SEARCH + "@attrs"] = attrs_digest(new_attrs)
        publish(tmp, dst, manifest)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


def publish(tmp: Path, dst: Path, manifest: Manifest) -> None:
    """Stamp the rewritten HDF5 bytes of ``tmp`` into ``manifest`` (size, byte digest), write it
    unsigned into the header (a signature covered the old manifest), and put ``tmp`` in ``dst``'s
    place atomically and durably: an interrupt before the rename leaves ``dst`` as it was."""
    manifest.file_size, manifest.hdf5_sha256 = hash_hdf5_bytes(tmp)
    write_header(tmp, encode_header(manifest.to_json_bytes()))
    _fsync_file(tmp)
    interrupt.check()
    with interrupt.uninterruptible():
        os.replace(tmp, dst)
        interrupt.published(dst)
        _fsync_dir(dst.parent)
