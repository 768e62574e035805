"""The kbpack file format and nothing above it: names and constants (``format``), the HDF5
layout (``storage``), the user-block manifest and signature (``manifest``, ``sign``), the
structure allowlist, digests, the checked reader and the atomic writer, the first-open
preflight, and this machine's memos about packs (``verified``).
"""

__all__ = [
    "bm25_store",
    "digest",
    "format",
    "global_heap",
    "manifest",
    "preflight",
    "read",
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
]
