"""The kbpack file format and nothing above it: names and constants (``format``), the HDF5
layout (``storage``), the user-block manifest and signature (``manifest``, ``sign``), the
structure allowlist, digests, the checked reader (``read.PackReader``, a facade over its
parts (``read_part``): ``read_checked``, ``read_heap``, ``read_columns``, ``read_strings``, ``read_meta`` and
``read_elements``) and the atomic writer (``write.PackWriter``, over ``write_spools``,
``write_tables``, ``write_hdf5`` and ``write_child``), the first-open preflight, and this
machine's memos about packs (``verified``).
"""

__all__ = [
    "bm25_store",
    "digest",
    "format",
    "global_heap",
    "manifest",
    "mapped",
    "preflight",
    "read",
    "read_checked",
    "read_columns",
    "read_elements",
    "read_heap",
    "read_meta",
    "read_part",
    "read_strings",
    "rewrite",
    "set_publish",
    "sign",
    "storage",
    "structure",
    "tempfiles",
    "vector_scan",
    "verified",
    "write",
    "write_child",
    "write_hdf5",
    "write_spools",
    "write_tables",
]
