"""Verify steps 3-5 as one job for the sandboxed child, and its result merged into the report.

``examine`` opens the file with HDF5, runs the structure allowlist (step 3), then the digests
(step 4) and the invariants (step 5) on the elements the allowlist found safe to read. It
returns plain JSON-able data; ``merge`` turns that into report steps in the parent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kbpack.errors import describe
from kbpack.pack import format as F
from kbpack.pack.global_heap import malformed_collections
from kbpack.pack.manifest import Header
from kbpack.pack.structure import Finding, check_structure
from kbpack.verify.digests import ElementDigests
from kbpack.verify.invariants.bm25 import Bm25Invariants
from kbpack.verify.invariants.copies import CopyInvariants
from kbpack.verify.invariants.group_attributes import GroupAttributeInvariants
from kbpack.verify.invariants.ivf import IvfInvariants
from kbpack.verify.invariants.links import LinkInvariants
from kbpack.verify.invariants.manifest import ManifestInvariants
from kbpack.verify.invariants.pieces import PieceInvariants
from kbpack.verify.invariants.row_digests import RowDigestInvariants
from kbpack.verify.invariants.text import Invariants
from kbpack.verify.invariants.vectors import VectorInvariants
from kbpack.verify.report import VerifyReport

# Structure findings after which an element must not be read: reading it could follow a link
# out of the file, read external storage, run an unknown filter or allocate without bound.
UNSAFE_TO_READ = {
    "link-not-allowed",
    "unknown-object",
    "unreadable-object",
    "wrong-object-type",
    "reference-not-allowed",
    "wrong-dtype",
    "wrong-shape",
    "virtual-dataset",
    "external-storage",
    "filter-not-allowed",
    "size-out-of-range",
    "hard-link-alias",
}


def preload_hdf5() -> None:
    """Run by the child before it is released: the import overlaps the parent's hashing."""
    import h5py  # noqa: F401


def manifest_dict(header: Header | None) -> dict[str, Any] | None:
    if header is None:
        return None
    m = header.manifest
    return {
        "counts": m.counts,
        "elements": m.elements,
        "created": m.created,
        "kbpack_version": m.kbpack_version,
        "format_version": m.format_version,
    }


def examine(
    path: str, manifest: dict[str, Any] | None, file_size: int, quick: bool, bm25_sample: int | None
) -> dict[str, Any]:
    """Steps 3-5, run in the sandboxed child. Returns plain JSON-able data."""
    import h5py

    ex = Examiner(manifest, file_size, bm25_sample)
    out: dict[str, Any] = {"structure": [], "digests": [], "invariants": []}
    heaps = malformed_collections(Path(path))  # HDF5 would loop on one of these (not crash)
    if heaps:
        more = f" (and {len(heaps) - 1} more)" if len(heaps) > 1 else ""
        out["structure"] = [Finding("heap-malformed", "/", heaps[0] + more).as_dict()]
        out["stopped"] = "HDF5 would stall reading its strings"
    else:
        h = None
        try:
            h = h5py.File(path, "r", locking=False)
        except Exception as e:
            out["structure"] = [
                Finding("hdf5-unreadable", "/", f"HDF5 cannot open it: {describe(e)}").as_dict()
            ]
            out["stopped"] = "HDF5 cannot open the file"
        if h is not None:
            with h:
                ex.run(h, quick, out)
    out["stats"] = ex.stats
    out["no_manifest"] = manifest is None
    out["compared"], out["mismatched"] = ex.compared, len(ex.mismatched_keys)
    out["mismatched_keys"], out["stamp_differs"] = ex.mismatched_keys, ex.stamp_differs
    return out


def merge(report: VerifyReport, result: dict[str, Any], quick: bool) -> None:
    """In the parent: ``examine``'s result as the report's steps 3-5."""

    def found(step: str) -> list[Finding]:
        return [Finding(**f) for f in result[step]]

    stats: dict[str, int] = result["stats"]
    report.stats.update(stats)
    report.add("structure", found("structure"), f"{stats.get('elements', 0)} elements allowed")
    if quick:
        report.skip("digests", "skipped (--quick)")
        report.skip("invariants", "skipped (--quick)")
        return
    if result.get("stopped"):
        report.skip("digests", result["stopped"])
        report.skip("invariants", result["stopped"])
        return
    digests = found("digests")
    if result.get("no_manifest") and not digests:
        report.skip("digests", "not compared: the manifest is unreadable")
    else:
        report.add("digests", digests, f"{result['compared']} digests match")
    n, sampled = stats.get("chunks", 0), stats.get("bm25_retokenised", 0)
    bm25 = f"BM25 re-tokenised {sampled} of {n} chunks" + ("" if sampled >= n else " (--deep: all)")
    report.add(
        "invariants",
        found("invariants"),
        f"{stats.get('documents', 0)} documents, {n} chunks, {stats.get('vectors', 0)} vectors; {bm25}",
    )


class Examiner(
    ElementDigests,
    ManifestInvariants,
    Invariants,
    VectorInvariants,
    PieceInvariants,
    CopyInvariants,
    IvfInvariants,
    GroupAttributeInvariants,
    RowDigestInvariants,
    LinkInvariants,
    Bm25Invariants,
):
    """Steps 3-5 in order, each check turned into findings instead of exceptions."""

    def run(self, h: Any, quick: bool, out: dict[str, Any]) -> None:
        try:
            version = int((self.manifest or {}).get("format_version", F.FORMAT_VERSION))
            structure = check_structure(h, self.counts, self.file_size, version)
            hard = _hard_paths(h)
        except Exception as e:
            out["structure"] = [Finding("hdf5-unreadable", "/", describe(e)).as_dict()]
            out["stopped"] = "HDF5 metadata cannot be read"
            return
        out["structure"] = [f.as_dict() for f in structure]
        unsafe = {f.path for f in structure if f.code in UNSAFE_TO_READ}
        self.readable = {
            p for p in hard if p in F.ELEMENT_BY_PATH and not any(_within(p, u) for u in unsafe)
        }
        self.in_file = set(hard)
        self.stats["elements"] = len(self.readable)
        if quick:
            return
        # The vectors are the bulk of a pack: their digest and norms run in a second thread
        # (hashlib and numpy release the GIL) while the rest is digested and checked.
        pool = ThreadPoolExecutor(1) if F.VEC_DATA in self.readable else None
        vectors = pool.submit(self._vector_pass, h) if pool else None
        try:
            self._step(self.digests, h)
            out["digests"] = self._take()
            self._step(self.invariants, h)
            out["invariants"] = self._take()
            if vectors is not None:
                try:
                    self._compare(F.VEC_DATA, vectors.result())
                except MemoryError:
                    self.add("memory-limit", F.VEC_DATA, "over the verify memory limit")
                except Exception as e:
                    self.add("element-unreadable", F.VEC_DATA, describe(e))
                out["digests"] += self._take()
            self._step(self.late_invariants, h)
            out["invariants"] += self._take()
        finally:
            if pool is not None:
                pool.shutdown(wait=True)

    def _step(self, fn: Callable[[Any], None], h: Any) -> None:
        try:
            fn(h)
        except MemoryError:
            self.add("memory-limit", "/", "the pack needs more memory than the verify limit")
        except Exception as e:  # a crafted file can make any read fail: one finding, go on
            self.add("element-unreadable", "/", describe(e))

    def invariants(self, h: Any) -> None:
        self._run_checks(
            self._check_manifest_vs_root,
            self._check_element_attributes,
            self._check_group_attributes,
            self._check_documents,
            self._check_sections,
            self._check_pages,
            self._check_chunks,
            self._check_bm25,
            self._check_row_digests,
            self._check_links,
        )

    def late_invariants(self, h: Any) -> None:
        """Checks that need the vector pass finished."""
        self.file = h  # the IVF codes' check reads the vectors again (invariants/ivf.py)
        self._run_checks(
            self._check_vectors,
            self._check_pieces,
            self._check_copies,
            self._check_ivf,
            self._check_counts,
        )

    def _run_checks(self, *checks: Callable[[], None]) -> None:
        for check in checks:
            try:
                check()
            except MemoryError:
                raise
            except Exception as e:
                self.add("check-failed", "/", f"{check.__name__[7:]}: {describe(e)}")


def _within(path: str, refused: str) -> bool:
    return path == refused or path.startswith(refused.rstrip("/") + "/")


def _hard_paths(h: Any) -> set[str]:
    """Paths reached through hard links only (H5Lvisit never follows soft or external ones)."""
    import h5py

    out: set[str] = set()

    def visit(name: str, link: Any) -> None:
        if isinstance(link, h5py.HardLink):
            out.add("/" + name)

    h.visititems_links(visit)
    # a hard link below a soft/external link cannot be reached by H5Lvisit; keep only paths
    # whose every ancestor is a hard link too
    return {p for p in out if all(a in out for a in _ancestors(p))}


def _ancestors(path: str) -> Iterator[str]:
    parts = path.strip("/").split("/")
    for i in range(1, len(parts)):
        yield "/" + "/".join(parts[:i])
