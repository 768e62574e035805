"""``kbpack verify``: is this pack intact, complete, consistent and (when asked) signed?

Five steps, in this order, collecting findings instead of stopping at the first:

1. **bytes** -- the user-block header parses, its padding is zero, the file has the manifest's
   exact size and the SHA-256 of every HDF5 byte matches. HDF5 has parsed nothing yet.
2. **signature** -- when present or required, against keys the user trusts (never the pack's).
3. **structure** -- the spec's allowlist (``structure.check_structure``), metadata only.
4. **digests** -- every element's digest (``digest.py``), and its attributes' ``path@attrs``.
5. **invariants** -- offsets, section tree, page map, vectors, BM25 postings, counts.

Steps 3-5 run in a forked child with a time and memory limit and no right to write files: a
crafted file that crashes or hangs the HDF5 library becomes one finding, not a dead CLI. They
run even when step 1 failed, so that the report names the damaged element. Elements the
structure check refused (links, external storage, virtual datasets, unknown filters, absurd
sizes) are never read, so no byte of another file is read either.

Speed: hashing runs at OpenSSL speed and the vectors are read once, in blocks, for their digest
and norms. Re-tokenising chunk text for the BM25 check costs ~0.2 s per MB of text, so by
default a random sample of ``BM25_SAMPLE`` chunks is re-tokenised (all of them in smaller
packs); ``deep=True`` re-tokenises every chunk. Cheaper BM25 checks cover every chunk always.
"""

from __future__ import annotations

import contextlib
import faulthandler
import hashlib
import itertools
import json
import os
import resource
import secrets
import select
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kbpack.errors import NewerFormatError, PackError, UsageError
from kbpack.pack import format as F
from kbpack.pack.digest import StreamDigest, attrs_digest
from kbpack.pack.manifest import Header, hash_hdf5_bytes, parse_header
from kbpack.pack.structure import Finding

STEPS = ("bytes", "signature", "structure", "digests", "invariants")
BM25_SAMPLE = 1000  # chunks re-tokenised by default
NORM_TOLERANCE = 1e-2  # float16 storage keeps unit norms within ~1e-3
MAX_ROWS_SHOWN = 3  # row numbers quoted in one finding's detail
READ_BLOCK_BYTES = 16 * 2**20
HEADER = "header"  # the path of findings about the user block

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


# Every finding code verify can report, with what it means. A test checks that the code
# emits exactly these, so this table can be copied into the documentation as it is.
CODES: dict[str, str] = {
    # 1 bytes
    "not-a-pack": "no kbpack magic at byte 0",
    "newer-format": "written by a newer kbpack: upgrade kbpack",
    "header-damaged": "the user block does not parse, or its padding is not zero",
    "manifest-invalid": "the manifest's counts do not name exactly the spec's counts",
    "size-mismatch": "the file is shorter or longer than the manifest says",
    "hash-mismatch": "the SHA-256 of the HDF5 bytes differs from the manifest's",
    # 2 signature
    "signature-missing": "a signature is required and the pack has none",
    "signature-invalid": "the signature does not match the manifest: edited after signing",
    "signature-untrusted-key": "signed by a key that is not trusted here",
    "signature-malformed": "the signature record is not a valid Ed25519 record",
    "manifest-from-other-pack": "the header (and signature) was copied from another pack",
    # 3 structure (structure.py), and the child that parses HDF5
    "link-not-allowed": "a soft or external link",
    "unknown-object": "an object the spec does not name",
    "missing-element": "an element the spec requires is absent",
    "unreadable-object": "HDF5 cannot open the object",
    "wrong-object-type": "a group where a dataset belongs, or the reverse",
    "hard-link-alias": "one object under two names",
    "attribute-not-allowed": "an attribute of reference or opaque type",
    "unreadable-attributes": "HDF5 cannot read the attributes",
    "reference-not-allowed": "a dataset of object or region references",
    "wrong-dtype": "a dataset's type differs from the spec",
    "wrong-shape": "a dataset's rank differs from the spec",
    "virtual-dataset": "a virtual dataset (it maps other files)",
    "external-storage": "raw data stored in another file",
    "filter-not-allowed": "a filter other than deflate, shuffle, fletcher32",
    "count-mismatch": "a row count differs from the manifest's counts",
    "size-out-of-range": "a dataset declares more bytes than the file can hold",
    "hdf5-unreadable": "HDF5 cannot open or walk the file",
    "sandbox-crash": "the HDF5 parser crashed (in the child; the CLI survives)",
    "sandbox-timeout": "the HDF5 parser ran past its time limit",
    "sandbox-memory": "the HDF5 parser ran past its memory limit",
    # 4 digests
    "digest-mismatch": "an element's data or attributes differ from the manifest's digest",
    "digest-missing": "the manifest has no digest for an element present in the pack",
    "digest-orphan": "the manifest has a digest for no element",
    "element-unreadable": "an element's data cannot be read",
    "memory-limit": "an element needs more memory than the verify limit",
    # 5 invariants
    "manifest-mismatch": "manifest created/version differ from the root attributes",
    "attribute-invalid": "a root attribute has a value the spec does not allow",
    "column-lengths": "the columns of one group have different lengths",
    "duplicate-name": "two documents have the same name",
    "status-invalid": "a document status other than ok, failed, skipped",
    "failed-without-reason": "a failed or skipped document gives no reason",
    "text-encoding": "canonical text that is not valid UTF-8",
    "text-digest-mismatch": "text_sha256 differs from the canonical text's SHA-256",
    "warnings-invalid": "document warnings that are not a JSON array of strings",
    "reference-out-of-range": "a row points at a document that does not exist",
    "offset-out-of-range": "[from, to) not inside the document's canonical text",
    "section-order": "sections not grouped by document in order",
    "section-parent": "a parent that is not an earlier section of the same document",
    "section-nesting": "a section not inside its parent",
    "section-level": "a level that is not 0 for a root, 1..9 below its parent",
    "section-root": "a document without exactly one root section first",
    "page-number": "a page number below 1",
    "page-order": "pages not ordered, or overlapping",
    "chunk-order": "chunks not in document order",
    "chunk-tokens": "a negative token count",
    "chunk-of-failed-document": "a chunk of a failed or skipped document",
    "chunk-section": "a chunk outside the section it names",
    "chunk-page": "a chunk page that is not a page of its document",
    "model-stamp": "the model identity stamp is missing or malformed",
    "model-file-mismatch": "the stored GGUF's SHA-256 differs from the model stamp",
    "vectors-unexpected": "vectors in a pack whose root says it has none",
    "dims-mismatch": "vector dims differ from the model stamp",
    "vector-count": "not one vector per chunk",
    "vector-not-finite": "a vector with NaN or infinite components",
    "vector-norm": f"a vector whose norm differs from 1 by more than {NORM_TOLERANCE}",
    "bm25-params": "k1 or b out of range",
    "bm25-tokenizer": "a tokenizer this kbpack cannot re-run",
    "bm25-terms": "vocabulary not valid UTF-8, empty, or not strictly sorted",
    "bm25-postings": "indptr, chunk ids or tf out of range or order",
    "bm25-doc-len": "document lengths differ from the postings' term counts",
    "bm25-content-mismatch": "postings differ from the re-tokenised chunk content",
    "check-failed": "an invariant check could not run on this data",
}


@dataclass(frozen=True)
class Limits:
    """Limits of the child that parses HDF5."""

    timeout_s: float = 600.0
    memory_bytes: int = 4 * 2**30


@dataclass
class VerifyReport:
    path: str
    findings_by_step: dict[str, list[Finding]] = field(default_factory=dict)
    status: dict[str, str] = field(default_factory=dict)  # step -> ok / failed / skipped
    summary: dict[str, str] = field(default_factory=dict)  # step -> one human line
    notes: list[str] = field(default_factory=list)
    signature: dict[str, Any] | None = None
    stats: dict[str, int] = field(default_factory=dict)

    @property
    def findings(self) -> list[Finding]:
        return [f for step in STEPS for f in self.findings_by_step.get(step, [])]

    @property
    def intact(self) -> bool:
        return not self.findings

    def add(self, step: str, findings: list[Finding], summary: str = "") -> None:
        """Record a step's findings; ``summary`` describes it when it passed."""
        found = self.findings_by_step.setdefault(step, [])
        found.extend(findings)
        self.status[step] = "failed" if found else "ok"
        if found:
            self.summary[step] = f"{len(found)} finding{'s' if len(found) != 1 else ''}"
        elif summary:
            self.summary[step] = summary

    def skip(self, step: str, why: str) -> None:
        self.status[step] = "skipped"
        self.summary[step] = why

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "intact": self.intact,
            "steps": {
                s: {
                    "status": self.status.get(s, "skipped"),
                    "summary": self.summary.get(s, ""),
                    "findings": [f.as_dict() for f in self.findings_by_step.get(s, [])],
                }
                for s in STEPS
            },
            "findings": [f.as_dict() for f in self.findings],
            "signature": self.signature,
            "notes": self.notes,
            "stats": self.stats,
        }


def verify_pack(
    path: Path,
    *,
    key: Path | None = None,
    require_signature: bool = False,
    quick: bool = False,
    deep: bool = False,
    locate_damage: bool = True,
    limits: Limits | None = None,
) -> VerifyReport:
    """Run the five steps on ``path``. Raises UsageError only for what the user must fix
    (no such file, a bad key file); everything wrong with the pack is a finding.

    ``key``: trust only this public key (and require a signature). ``locate_damage=False``
    skips steps 3-5 when step 1 already failed (bulk damage tests); the report still fails.
    """
    path = Path(path)
    if not path.exists():
        raise UsageError(f"{path}: no such file")
    if path.is_dir():
        raise UsageError(f"{path}: is a directory, not a pack")
    if not path.is_file():  # a FIFO or a device would block or never end
        raise UsageError(f"{path}: not a regular file")
    report = VerifyReport(str(path))
    header, actual_size = _read_header(path, report)
    if limits is None:  # generous: a stuck parser is what the limit is for, not a big pack
        limits = Limits(timeout_s=max(600.0, actual_size / (1e6 if deep else 10e6)))
    if header is None and report.findings_by_step["bytes"][0].code == "not-a-pack":
        for s in STEPS[1:]:
            report.skip(s, "not a kbpack pack")
        return report
    child = None
    if locate_damage:
        # forked now so that it loads h5py while we hash; it parses nothing until released
        args = (str(path), _manifest_dict(header), actual_size, quick, deep)
        child = Isolated(_examine, args, limits, preload=_preload_hdf5)
    try:
        if header is not None:
            _check_bytes(path, header, actual_size, report)
        _step_signature(header, key, require_signature or key is not None, report)
        if child is None and report.status["bytes"] != "ok":
            for s in STEPS[2:]:
                report.skip(s, "bytes already damaged; not located")
            return report
        if child is None:
            args = (str(path), _manifest_dict(header), actual_size, quick, deep)
            child = Isolated(_examine, args, limits)
        result = child.result()
    except SandboxFailure as e:
        report.add("structure", [Finding(e.code, "/", e.detail)])
        for s in STEPS[3:]:
            report.skip(s, "HDF5 could not be examined")
        return report
    finally:
        if child is not None:
            child.cancel()
    _merge(report, result, quick)
    if header is not None and report.status["bytes"] != "ok":
        _classify_foreign_manifest(report, result)
    return report


def _preload_hdf5() -> None:
    import h5py  # noqa: F401


# -- step 1: bytes -----------------------------------------------------------------------------


def _read_header(path: Path, report: VerifyReport) -> tuple[Header | None, int]:
    """Step 1a: the user block parses (magic, manifest, signature record, zero padding)."""
    try:
        with open(path, "rb") as f:
            block = f.read(F.USERBLOCK_SIZE)
        actual = os.stat(path).st_size
    except OSError as e:
        raise UsageError(f"{path}: cannot read: {e.strerror or e}") from e
    report.stats["file_size"] = actual
    if block[:8] != F.MAGIC:
        report.add("bytes", [Finding("not-a-pack", HEADER, "no kbpack magic at byte 0")])
        return None, actual
    if len(block) < F.USERBLOCK_SIZE:
        detail = f"{actual} bytes, shorter than the {F.USERBLOCK_SIZE}-byte kbpack header"
        report.add("bytes", [Finding("size-mismatch", HEADER, f"truncated: {detail}")])
        return None, actual
    try:
        header = parse_header(block, str(path))
    except NewerFormatError as e:
        report.add("bytes", [Finding("newer-format", HEADER, _after_where(e, path))])
        return None, actual
    except PackError as e:
        report.add("bytes", [Finding("header-damaged", HEADER, _after_where(e, path))])
        return None, actual
    return header, actual


def _check_bytes(path: Path, header: Header, actual: int, report: VerifyReport) -> None:
    """Step 1b: counts are well-formed, the size is exact, the SHA-256 of the bytes matches."""
    findings: list[Finding] = []
    m = header.manifest
    if not header.padding_clean:
        findings.append(
            Finding("header-damaged", HEADER, "bytes after the signature record are not zero")
        )
    missing, unknown = set(F.COUNT_KEYS) - set(m.counts), set(m.counts) - set(F.COUNT_KEYS)
    if missing or unknown:
        wrong = [f"lack {', '.join(sorted(missing))}"] if missing else []
        wrong += [f"name unknown {', '.join(sorted(unknown))}"] if unknown else []
        findings.append(Finding("manifest-invalid", HEADER, f"counts {'; '.join(wrong)}"))
    if actual != m.file_size:
        what = "truncated" if actual < m.file_size else "bytes appended"
        findings.append(
            Finding(
                "size-mismatch",
                HEADER,
                f"{what}: {actual} bytes, the manifest says {m.file_size}; copy the pack again",
            )
        )
        summary = "size differs from the manifest; SHA-256 not computed"
    else:
        size, sha = hash_hdf5_bytes(path)
        report.stats["bytes_hashed"] = size - F.USERBLOCK_SIZE
        if size != m.file_size or sha != m.hdf5_sha256:
            findings.append(
                Finding(
                    "hash-mismatch",
                    HEADER,
                    f"SHA-256 of the HDF5 bytes is {sha[:16]}…, the manifest says "
                    f"{m.hdf5_sha256[:16]}…: the pack is damaged; copy it again",
                )
            )
        summary = f"{actual} bytes, SHA-256 {sha[:16]}… matches the manifest"
    report.add("bytes", findings, summary if not findings else "")


def _after_where(e: Exception, path: Path) -> str:
    msg = str(e)
    prefix = f"{path}: "
    return msg[len(prefix) :] if msg.startswith(prefix) else msg


def _manifest_dict(header: Header | None) -> dict[str, Any] | None:
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


# -- step 2: signature -------------------------------------------------------------------------


def _step_signature(
    header: Header | None, key: Path | None, required: bool, report: VerifyReport
) -> None:
    if header is None:
        if required:
            report.add(
                "signature", [Finding("signature-missing", HEADER, "the header is unreadable")]
            )
        else:
            report.skip("signature", "the header is unreadable")
        return
    from kbpack.pack import sign

    if header.signature is None and not required:
        report.signature = {"status": "unsigned", "key_id": None}
        report.skip("signature", "unsigned (no signature required)")
        return
    keys = sign.trusted_keys(key) if (header.signature is not None or key) else []
    check = sign.check_signature(header, keys)
    report.signature = check.as_dict()
    findings: list[Finding] = []
    if check.status == "unsigned":
        findings.append(
            Finding(
                "signature-missing",
                HEADER,
                "the pack is not signed and a signature is required; ask its maker to sign it",
            )
        )
    elif check.status == "invalid":
        findings.append(Finding("signature-invalid", HEADER, check.detail))
    elif check.status == "malformed":
        findings.append(Finding("signature-malformed", HEADER, check.detail))
    elif check.status == "untrusted-key":
        if required:
            findings.append(Finding("signature-untrusted-key", HEADER, check.detail))
        else:
            report.notes.append(check.detail)
    summary = check.detail if check.status in ("valid", "untrusted-key") else ""
    report.add("signature", findings, summary)


def _classify_foreign_manifest(report: VerifyReport, result: dict[str, Any]) -> None:
    """Tell a header copied from another pack from damage: a bit flip changes one element,
    while a foreign header disagrees with the root's creation stamp AND with other elements
    (or the size), or with most element digests."""
    compared, mismatched = result["compared"], result["mismatched"]
    other = [k for k in result["mismatched_keys"] if k != "/@attrs"]
    size_differs = any(f.code == "size-mismatch" for f in report.findings_by_step["bytes"])
    stamp_differs = result["stamp_differs"] and (other or size_differs)
    if stamp_differs or (compared >= 4 and mismatched * 2 >= compared):
        report.add(
            "signature",
            [
                Finding(
                    "manifest-from-other-pack",
                    HEADER,
                    f"the header was copied from another pack: its creation stamp and "
                    f"{mismatched} of {compared} element digests do not match these bytes",
                )
            ],
        )


# -- the child: steps 3-5 ----------------------------------------------------------------------


def _merge(report: VerifyReport, result: dict[str, Any], quick: bool) -> None:
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


def _examine(
    path: str, manifest: dict[str, Any] | None, file_size: int, quick: bool, deep: bool
) -> dict[str, Any]:
    """Steps 3-5, run in the sandboxed child. Returns plain JSON-able data."""
    import h5py

    ex = _Examiner(manifest, file_size, deep)
    out: dict[str, Any] = {"structure": [], "digests": [], "invariants": []}
    try:
        h = h5py.File(path, "r", locking=False)
    except Exception as e:
        out["structure"] = [_f("hdf5-unreadable", "/", f"HDF5 cannot open it: {_one_line(e)}")]
        out["stopped"] = "HDF5 cannot open the file"
    else:
        with h:
            ex.run(h, quick, out)
    out["stats"] = ex.stats
    out["no_manifest"] = manifest is None
    out["compared"], out["mismatched"] = ex.compared, len(ex.mismatched_keys)
    out["mismatched_keys"], out["stamp_differs"] = ex.mismatched_keys, ex.stamp_differs
    return out


def _f(code: str, path: str, detail: str) -> dict[str, str]:
    return {"code": code, "path": path, "detail": detail}


class _Digest(StreamDigest):
    """``StreamDigest`` with numeric blocks hashed in place (no ``tobytes`` copy): verify hashes
    every byte of the vectors, and a copy of each block costs as much as hashing it."""

    def numeric(self, block: np.ndarray) -> None:
        le = np.ascontiguousarray(block.astype(block.dtype.newbyteorder("<"), copy=False))
        self._h.update(memoryview(le).cast("B"))  # type: ignore[arg-type]


class _Examiner:
    def __init__(self, manifest: dict[str, Any] | None, file_size: int, deep: bool) -> None:
        self.manifest = manifest
        self.counts: dict[str, int] = dict(manifest["counts"]) if manifest else {}
        self.elements: dict[str, str] = dict(manifest["elements"]) if manifest else {}
        self.file_size = file_size
        self.deep = deep
        self.findings: list[dict[str, str]] = []
        self.stats: dict[str, int] = {}
        self.compared = 0
        self.mismatched_keys: list[str] = []
        self.stamp_differs = False  # manifest "created" differs from the root attribute
        self.readable: set[str] = set()  # elements safe to read
        self.num: dict[str, np.ndarray] = {}
        self.raw: dict[str, list[bytes]] = {}
        self.attrs: dict[str, dict[str, Any]] = {}
        self.vec_bad: dict[str, list[int]] = {"nonfinite": [], "norm": []}
        self.vec_counts = {"nonfinite": 0, "norm": 0}
        self.gguf_sha: str | None = None
        self._texts: dict[int, str | None] = {}

    def add(self, code: str, path: str, detail: str) -> None:
        self.findings.append(_f(code, path, detail))

    # -- orchestration ---------------------------------------------------------------------
    def run(self, h: Any, quick: bool, out: dict[str, Any]) -> None:
        from kbpack.pack.structure import check_structure

        try:
            structure = check_structure(h, self.counts, self.file_size)
            hard = _hard_paths(h)
        except Exception as e:
            out["structure"] = [_f("hdf5-unreadable", "/", _one_line(e))]
            out["stopped"] = "HDF5 metadata cannot be read"
            return
        out["structure"] = [f.as_dict() for f in structure]
        unsafe = {f.path for f in structure if f.code in UNSAFE_TO_READ}
        self.readable = {
            p for p in hard if p in F.ELEMENT_BY_PATH and not any(_within(p, u) for u in unsafe)
        }
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
                    self.add("element-unreadable", F.VEC_DATA, _one_line(e))
                out["digests"] += self._take()
            self._step(self.late_invariants, h)
            out["invariants"] += self._take()
        finally:
            if pool is not None:
                pool.shutdown(wait=True)

    def _take(self) -> list[dict[str, str]]:
        taken, self.findings = self.findings, []
        return taken

    def _vector_pass(self, h: Any) -> str:
        d = _Digest()
        self._vector_digest(h[F.VEC_DATA], d)
        return d.hexdigest()

    def _step(self, fn: Callable[[Any], None], h: Any) -> None:
        try:
            fn(h)
        except MemoryError:
            self.add("memory-limit", "/", "the pack needs more memory than the verify limit")
        except Exception as e:  # a crafted file can make any read fail: one finding, go on
            self.add("element-unreadable", "/", _one_line(e))

    # -- step 4: digests ---------------------------------------------------------------------
    def digests(self, h: Any) -> None:
        self._compare("/@attrs", self._attrs_digest(h, "/"))
        for el in F.ELEMENTS:
            if el.path not in self.readable:
                continue
            try:
                self._compare(el.path + "@attrs", self._attrs_digest(h, el.path))
                if el.dtype and el.path != F.VEC_DATA:  # the vectors: see run()
                    self._compare(el.path, self._data_digest(h[el.path], el))
            except MemoryError:
                raise
            except Exception as e:
                self.add("element-unreadable", el.path, _one_line(e))
        present = self.readable | {"/"}
        for key in sorted(self.elements):
            base = key.removesuffix("@attrs")
            if base not in present and base in F.ELEMENT_BY_PATH:
                continue  # missing, or refused: the structure step said so already
            if base not in present:
                self.add("digest-orphan", key, "the manifest lists a digest for no element")

    def _compare(self, key: str, actual: str) -> None:
        want = self.elements.get(key)
        if want is None:
            if self.manifest is not None:
                self.add("digest-missing", key, "the manifest has no digest for this element")
            return
        self.compared += 1
        if want != actual:
            self.mismatched_keys.append(key)
            what = "attributes" if key.endswith("@attrs") else "data"
            self.add(
                "digest-mismatch",
                key.removesuffix("@attrs"),
                f"{what} digest {actual[:16]}… differs from the manifest's {want[:16]}…: "
                "this element is damaged",
            )

    def _attrs_digest(self, h: Any, path: str) -> str:
        from kbpack.pack.digest import plain

        obj = h[path] if path != "/" else h
        values = {k: obj.attrs[k] for k in obj.attrs}
        self.attrs[path] = {k: plain(v) for k, v in values.items()}
        return attrs_digest(values)

    def _data_digest(self, ds: Any, el: F.Element) -> str:
        d = _Digest()
        if el.dtype == "str":
            items: list[bytes] = []
            for block in _blocks(ds, rows=256 if el.path == F.DOC_TEXT else 65536):
                raw = [x if isinstance(x, bytes) else str(x).encode() for x in block.tolist()]
                d.strings(raw)
                items.extend(raw)
            self.raw[el.path] = items
            return d.hexdigest()
        parts = []
        row_bytes = max(1, ds.dtype.itemsize * int(np.prod(ds.shape[1:], dtype=np.int64)))
        for block in _blocks(ds, rows=max(1, READ_BLOCK_BYTES // row_bytes)):
            d.numeric(block)
            if el.path != F.MODEL_GGUF:
                parts.append(block)
        digest = d.hexdigest()
        if el.path == F.MODEL_GGUF:
            self.gguf_sha = digest  # u1 values: the digest is the SHA-256 of the GGUF file
        else:
            self.num[el.path] = np.concatenate(parts) if parts else np.zeros(0, ds.dtype)
        return digest

    def _vector_digest(self, ds: Any, d: _Digest) -> None:
        """One pass over the vectors: digest, finiteness and unit norm, block by block."""
        self.stats["vector_rows"], self.stats["vector_dims"] = int(ds.shape[0]), int(ds.shape[1])
        rows = max(1, READ_BLOCK_BYTES // max(1, ds.dtype.itemsize * ds.shape[1]))
        at = 0
        for block in _blocks(ds, rows=rows):
            d.numeric(block)
            v = block.astype(np.float32)
            # a NaN or inf component makes the sum of squares non-finite; finite float16
            # values cannot overflow it in float32
            norms = np.sqrt(np.einsum("ij,ij->i", v, v))
            finite = np.isfinite(norms)
            bad_norm = finite & (np.abs(norms - 1.0) > NORM_TOLERANCE)
            for kind, mask in (("nonfinite", ~finite), ("norm", bad_norm)):
                idx = np.flatnonzero(mask)
                self.vec_counts[kind] += len(idx)
                room = MAX_ROWS_SHOWN - len(self.vec_bad[kind])
                if room > 0:
                    self.vec_bad[kind].extend(int(i) + at for i in idx[:room])
                if kind == "norm" and len(idx):
                    self.stats.setdefault("first_bad_norm_x1000", int(norms[idx[0]] * 1000))
            at += len(block)

    # -- step 5: invariants ------------------------------------------------------------------
    def invariants(self, h: Any) -> None:
        self._run_checks(
            self._check_manifest_vs_root,
            self._check_documents,
            self._check_sections,
            self._check_pages,
            self._check_chunks,
            self._check_bm25,
        )

    def late_invariants(self, h: Any) -> None:
        """Checks that need the vector pass finished."""
        self._run_checks(self._check_vectors, self._check_counts)

    def _run_checks(self, *checks: Callable[[], None]) -> None:
        for check in checks:
            try:
                check()
            except MemoryError:
                raise
            except Exception as e:
                self.add("check-failed", "/", f"{check.__name__[7:]}: {_one_line(e)}")

    def _col(self, path: str) -> np.ndarray | None:
        return self.num.get(path)

    def _strs(self, path: str) -> list[str] | None:
        raw = self.raw.get(path)
        if raw is None:
            return None
        return [b.decode("utf-8", "replace") for b in raw]

    def _rows(self, code: str, path: str, mask: np.ndarray, what: Callable[[int], str]) -> bool:
        """One finding for all rows in ``mask``: how many, and the first few explained."""
        idx = np.flatnonzero(mask)
        if len(idx) == 0:
            return False
        shown = "; ".join(f"row {int(i)}: {what(int(i))}" for i in idx[:MAX_ROWS_SHOWN])
        more = f" (and {len(idx) - MAX_ROWS_SHOWN} more rows)" if len(idx) > MAX_ROWS_SHOWN else ""
        self.add(code, path, shown + more)
        return True

    def _same_length(self, group: str, paths: list[str]) -> list[np.ndarray] | None:
        cols = [self._col(p) for p in paths]
        if any(c is None for c in cols):
            return None  # missing or refused: already a finding
        arrays = [c for c in cols if c is not None]
        lengths = {len(c) for c in arrays}
        if len(lengths) > 1:
            self.add("column-lengths", group, f"columns have different lengths {sorted(lengths)}")
            return None
        return arrays

    def _check_manifest_vs_root(self) -> None:
        root = self.attrs.get("/")
        if self.manifest is None or root is None:
            return
        pairs = (
            ("created", F.R_CREATED),
            ("kbpack_version", F.R_KBPACK_VERSION),
            ("format_version", F.R_FORMAT_VERSION),
        )
        for key, attr in pairs:
            if self.manifest[key] != root.get(attr):
                self.stamp_differs = self.stamp_differs or key == "created"
                self.add(
                    "manifest-mismatch",
                    HEADER,
                    f"manifest {key} {self.manifest[key]!r} differs from the root attribute "
                    f"{attr} {root.get(attr)!r}",
                )
        if root.get(F.R_VECTORS) not in ("dense", "none"):
            self.add("attribute-invalid", "/", f"{F.R_VECTORS} must be 'dense' or 'none'")

    # documents -----------------------------------------------------------------------------
    def _doc_chars(self) -> np.ndarray | None:
        if "doc_chars" in self.num:
            return self.num["doc_chars"]
        return None

    def _check_documents(self) -> None:
        names = self._strs(F.DOC_NAME)
        status = self._strs(F.DOC_STATUS)
        reasons = self._strs(F.DOC_REASON)
        texts = self.raw.get(F.DOC_TEXT)
        shas = self._strs(F.DOC_TEXT_SHA256)
        present = [c for c in (names, status, texts) if c is not None]
        n = len(present[0]) if present else None
        self.stats["documents"] = n or 0
        for path in (F.DOC_STATUS, F.DOC_REASON, F.DOC_TEXT, F.DOC_TEXT_SHA256):
            col = self.raw.get(path)
            if col is not None and n is not None and len(col) != n:
                self.add("column-lengths", path, f"{len(col)} rows, /documents/name has {n}")
                return
        if names is not None and len(set(names)) != len(names):
            dup = next(x for x, c in Counter(names).items() if c > 1)
            self.add("duplicate-name", F.DOC_NAME, f"{dup!r} appears more than once")
        if status is not None:
            st = np.array(status, dtype=object)
            self._rows(
                "status-invalid",
                F.DOC_STATUS,
                ~np.isin(st, F.STATUSES),
                lambda i: f"{status[i]!r} is not ok, failed or skipped",
            )
            if reasons is not None:
                no_reason = np.array(
                    [
                        s in ("failed", "skipped") and not r.strip()
                        for s, r in zip(status, reasons, strict=True)
                    ],
                    dtype=bool,
                )
                self._rows(
                    "failed-without-reason",
                    F.DOC_REASON,
                    no_reason,
                    lambda i: f"{names[i] if names else i} is {status[i]} but gives no reason",
                )
        if texts is not None:
            chars = np.zeros(len(texts), dtype=np.int64)
            bad_utf8 = np.zeros(len(texts), dtype=bool)
            bad_sha = np.zeros(len(texts), dtype=bool)
            for i, raw in enumerate(texts):
                try:
                    chars[i] = len(raw.decode("utf-8"))
                except UnicodeDecodeError:
                    bad_utf8[i] = True
                if shas is not None and hashlib.sha256(raw).hexdigest() != shas[i]:
                    bad_sha[i] = True
            self.num["doc_chars"] = chars
            self._rows("text-encoding", F.DOC_TEXT, bad_utf8, lambda i: "not valid UTF-8")
            self._rows(
                "text-digest-mismatch",
                F.DOC_TEXT_SHA256,
                bad_sha,
                lambda i: "SHA-256 of the canonical text differs from the stored one",
            )
        warnings = self._strs(F.DOC_WARNINGS)
        if warnings is not None:
            self._rows(
                "warnings-invalid",
                F.DOC_WARNINGS,
                np.array([not _json_str_list(w) for w in warnings], dtype=bool),
                lambda i: "not a JSON array of strings",
            )

    def _text(self, doc: int) -> str | None:
        if doc not in self._texts:
            raw = self.raw.get(F.DOC_TEXT)
            try:
                self._texts[doc] = raw[doc].decode("utf-8") if raw is not None else None
            except UnicodeDecodeError:
                self._texts[doc] = None
        return self._texts[doc]

    def _offsets(
        self, path: str, doc: np.ndarray, start: np.ndarray, end: np.ndarray, to_path: str
    ) -> np.ndarray:
        """Rows whose [from, to) is not inside their document's canonical text."""
        chars = self._doc_chars()
        n_docs = self.stats.get("documents", 0)
        bad_doc = (doc < 0) | (doc >= n_docs)
        self._rows(
            "reference-out-of-range",
            path,
            bad_doc,
            lambda i: f"document {int(doc[i])} of {n_docs}",
        )
        if chars is None or len(chars) != n_docs:
            return bad_doc
        limit = np.where(bad_doc, 0, chars[np.clip(doc, 0, max(n_docs - 1, 0))]) if n_docs else doc
        bad = ~bad_doc & ((start < 0) | (start > end) | (end > limit))
        self._rows(
            "offset-out-of-range",
            to_path,
            bad,
            lambda i: f"[{int(start[i])}, {int(end[i])}) not inside [0, {int(limit[i])}]",
        )
        return bad_doc | bad

    # sections ------------------------------------------------------------------------------
    def _check_sections(self) -> None:
        cols = self._same_length(
            F.SECTIONS, [F.SEC_DOCUMENT, F.SEC_PARENT, F.SEC_LEVEL, F.SEC_FROM, F.SEC_TO]
        )
        if cols is None:
            return
        doc, parent, level, start, end = (c.astype(np.int64) for c in cols)
        n = len(doc)
        bad = self._offsets(F.SECTIONS, doc, start, end, F.SEC_TO)
        self._rows(
            "section-order",
            F.SEC_DOCUMENT,
            np.r_[False, np.diff(doc) < 0] if n else np.zeros(0, bool),
            lambda i: f"document {int(doc[i])} after {int(doc[i - 1])}",
        )
        rows = np.arange(n)
        root = parent == -1
        bad_parent = ~root & ((parent < 0) | (parent >= rows))
        self._rows(
            "section-parent",
            F.SEC_PARENT,
            bad_parent,
            lambda i: f"parent {int(parent[i])} must be -1 or an earlier row",
        )
        p = np.where(root | bad_parent, 0, parent)
        ok = ~root & ~bad_parent & ~bad
        if n:
            ok &= ~bad[p]
        self._rows(
            "section-parent",
            F.SEC_PARENT,
            ok & (doc[p] != doc),
            lambda i: f"parent {int(parent[i])} belongs to another document",
        )
        ok &= doc[p] == doc
        self._rows(
            "section-nesting",
            F.SEC_FROM,
            ok & ((start < start[p]) | (end > end[p])),
            lambda i: (
                f"[{int(start[i])}, {int(end[i])}) is outside its parent "
                f"[{int(start[p[i]])}, {int(end[p[i]])})"
            ),
        )
        self._rows(
            "section-level",
            F.SEC_LEVEL,
            (root & (level != 0))
            | (~root & ((level < 1) | (level > 9)))
            | (ok & (level <= level[p])),
            lambda i: f"level {int(level[i])} (root 0, headings 1..9 below their parent)",
        )
        n_docs = self.stats.get("documents", 0)
        good_doc = (doc >= 0) & (doc < n_docs)
        roots = np.bincount(doc[root & good_doc], minlength=n_docs)
        self._rows(
            "section-root",
            F.SEC_PARENT,
            roots != 1,
            lambda i: f"document {i} has {int(roots[i])} root sections, needs exactly 1",
        )
        first = np.r_[True, doc[1:] != doc[:-1]] if n else np.zeros(0, bool)
        self._rows(
            "section-root",
            F.SEC_PARENT,
            first & ~root,
            lambda i: f"the first section of document {int(doc[i])} is not its root",
        )
        self.stats["sections"] = n

    # pages ---------------------------------------------------------------------------------
    def _check_pages(self) -> None:
        cols = self._same_length(F.PAGES, [F.PAGE_DOCUMENT, F.PAGE_NUMBER, F.PAGE_FROM, F.PAGE_TO])
        if cols is None:
            return
        doc, number, start, end = (c.astype(np.int64) for c in cols)
        self._offsets(F.PAGES, doc, start, end, F.PAGE_TO)
        self._rows("page-number", F.PAGE_NUMBER, number < 1, lambda i: f"{int(number[i])} < 1")
        if len(doc) > 1:
            same = doc[1:] == doc[:-1]
            bad = np.r_[
                False,
                (doc[1:] < doc[:-1])
                | (same & ((number[1:] <= number[:-1]) | (start[1:] < end[:-1]))),
            ]
            self._rows(
                "page-order",
                F.PAGE_NUMBER,
                bad,
                lambda i: (
                    f"page {int(number[i])} [{int(start[i])}, {int(end[i])}) after page "
                    f"{int(number[i - 1])} [{int(start[i - 1])}, {int(end[i - 1])})"
                ),
            )

    # chunks --------------------------------------------------------------------------------
    def _check_chunks(self) -> None:
        cols = self._same_length(
            F.CHUNKS,
            [
                F.CHUNK_DOCUMENT,
                F.CHUNK_SECTION,
                F.CHUNK_FROM,
                F.CHUNK_TO,
                F.CHUNK_PAGE,
                F.CHUNK_TOKENS,
            ],
        )
        if cols is None:
            return
        doc, sec, start, end, page, tokens = (c.astype(np.int64) for c in cols)
        n = len(doc)
        self.stats["chunks"] = n
        bad = self._offsets(F.CHUNKS, doc, start, end, F.CHUNK_TO)
        if n > 1:
            order = (doc[1:] < doc[:-1]) | ((doc[1:] == doc[:-1]) & (start[1:] < start[:-1]))
            self._rows(
                "chunk-order",
                F.CHUNK_FROM,
                np.r_[False, order],
                lambda i: (
                    f"starts at {int(start[i])}, before the chunk above ({int(start[i - 1])})"
                ),
            )
        self._rows("chunk-tokens", F.CHUNK_TOKENS, tokens < 0, lambda i: f"{int(tokens[i])} < 0")
        status = self._strs(F.DOC_STATUS)
        n_docs = self.stats.get("documents", 0)
        if status is not None and len(status) == n_docs and n_docs:
            not_ok = np.array([s != "ok" for s in status], dtype=bool)
            d = np.clip(doc, 0, n_docs - 1)
            self._rows(
                "chunk-of-failed-document",
                F.CHUNK_DOCUMENT,
                ~bad & not_ok[d],
                lambda i: f"document {int(doc[i])} is {status[int(doc[i])]}",
            )
        sec_cols = self._same_length(F.SECTIONS, [F.SEC_DOCUMENT, F.SEC_FROM, F.SEC_TO])
        if sec_cols is not None:
            s_doc, s_from, s_to = (c.astype(np.int64) for c in sec_cols)
            m = len(s_doc)
            out = (sec < 0) | (sec >= m)
            self._rows(
                "chunk-section", F.CHUNK_SECTION, out, lambda i: f"section {int(sec[i])} of {m}"
            )
            s = np.where(out, 0, sec)
            ok = ~out & ~bad
            if m:
                self._rows(
                    "chunk-section",
                    F.CHUNK_SECTION,
                    ok & ((s_doc[s] != doc) | (start < s_from[s]) | (end > s_to[s])),
                    lambda i: (
                        f"[{int(start[i])}, {int(end[i])}) of document {int(doc[i])} is not "
                        f"inside section {int(sec[i])}"
                    ),
                )
        page_cols = self._same_length(F.PAGES, [F.PAGE_DOCUMENT, F.PAGE_NUMBER])
        if page_cols is not None:
            p_doc, p_num = (c.astype(np.int64) for c in page_cols)
            paged = np.isin(doc, p_doc)
            known = np.isin(doc * 2**32 + page, p_doc * 2**32 + p_num)
            self._rows(
                "chunk-page",
                F.CHUNK_PAGE,
                ~bad & np.where(paged, ~known, page != 0),
                lambda i: f"page {int(page[i])} is not a page of document {int(doc[i])}",
            )

    # vectors -------------------------------------------------------------------------------
    def _check_vectors(self) -> None:
        root = self.attrs.get("/", {})
        dense = root.get(F.R_VECTORS) == "dense"
        has = F.VEC_DATA in self.readable
        n_chunks = self.stats.get("chunks", self.counts.get("chunks", 0))
        if dense and F.MODEL not in self.readable:
            self.add("model-stamp", F.MODEL, "a dense pack must stamp its model")
        if not dense:
            if has or F.MODEL in self.readable:
                self.add("vectors-unexpected", F.VECTORS, "the root says the pack has no vectors")
            return
        model = self.attrs.get(F.MODEL, {})
        missing = [k for k in F.MODEL_ATTRS if k not in model]
        if missing:
            self.add("model-stamp", F.MODEL, f"lacks attribute {missing[0]!r}")
        dims = model.get(F.M_DIMS)
        sha = model.get(F.M_SHA256)
        if not isinstance(dims, int) or isinstance(dims, bool) or dims <= 0:
            self.add("model-stamp", F.MODEL, f"dims {dims!r} is not a positive integer")
            dims = None
        if not (
            isinstance(sha, str) and len(sha) == 64 and all(c in "0123456789abcdef" for c in sha)
        ):
            self.add("model-stamp", F.MODEL, "sha256 is not 64 lowercase hex digits")
        if self.gguf_sha is not None and sha != self.gguf_sha:
            self.add(
                "model-file-mismatch",
                F.MODEL_GGUF,
                f"SHA-256 of the stored GGUF {self.gguf_sha[:16]}… differs from the stamp's",
            )
        vattrs = self.attrs.get(F.VECTORS, {})
        if dims is not None and vattrs.get("dims", dims) != dims:
            self.add(
                "dims-mismatch",
                F.VECTORS,
                f"/vectors says dims {vattrs.get('dims')}, the model stamp says {dims}",
            )
        if not has:
            return
        shape = self.stats.get("vector_rows", -1), self.stats.get("vector_dims", -1)
        self.stats["vectors"] = shape[0]
        if dims is not None and shape[1] != dims:
            self.add(
                "dims-mismatch",
                F.VEC_DATA,
                f"vectors have {shape[1]} dims, the model stamp says {dims}",
            )
        if shape[0] != n_chunks:
            self.add("vector-count", F.VEC_DATA, f"{shape[0]} vectors for {n_chunks} chunks")
        if self.vec_counts["nonfinite"]:
            self.add(
                "vector-not-finite",
                F.VEC_DATA,
                "NaN or infinite component: " + self._vec_rows("nonfinite"),
            )
        if self.vec_counts["norm"]:
            self.add(
                "vector-norm",
                F.VEC_DATA,
                f"norm differs from 1 by more than {NORM_TOLERANCE}: " + self._vec_rows("norm"),
            )

    def _vec_rows(self, kind: str) -> str:
        count, shown = self.vec_counts[kind], self.vec_bad[kind]
        more = f" (and {count - len(shown)} more)" if count > len(shown) else ""
        return "rows " + ", ".join(str(r) for r in shown) + more

    # bm25 ----------------------------------------------------------------------------------
    def _check_bm25(self) -> None:
        a = self.attrs.get(F.BM25)
        if a is not None:
            k1: Any = a.get(F.BM25_K1)
            b: Any = a.get(F.BM25_B)
            if not (_num(k1) and _num(b) and k1 > 0 and 0 <= b <= 1):
                self.add("bm25-params", F.BM25, f"k1={k1!r}, b={b!r}: need k1 > 0, 0 <= b <= 1")
            if a.get(F.BM25_TOKENIZER) != F.TOKENIZER_ID:
                self.add(
                    "bm25-tokenizer",
                    F.BM25,
                    f"tokenizer {a.get(F.BM25_TOKENIZER)!r} is not {F.TOKENIZER_ID}; "
                    "this kbpack cannot check the postings",
                )
                return
        blob, offsets = self._col(F.BM25_TERMS_BLOB), self._col(F.BM25_TERMS_OFFSETS)
        indptr, chunk, tf = self._col(F.BM25_INDPTR), self._col(F.BM25_CHUNK), self._col(F.BM25_TF)
        doc_len = self._col(F.BM25_DOC_LEN)
        if any(x is None for x in (blob, offsets, indptr, chunk, tf, doc_len)):
            return
        assert blob is not None and offsets is not None and indptr is not None
        assert chunk is not None and tf is not None and doc_len is not None
        terms = self._check_terms(blob, offsets.astype(np.int64))
        n_terms = len(offsets) - 1
        indptr = indptr.astype(np.int64)
        n_chunks = self.stats.get("chunks", len(doc_len))
        if len(indptr) != n_terms + 1 or len(chunk) != len(tf):
            self.add(
                "bm25-postings",
                F.BM25_INDPTR,
                f"{len(indptr)} indptr entries for {n_terms} terms, {len(chunk)} chunk ids, {len(tf)} tf",
            )
            return
        if len(indptr) == 0 or indptr[0] != 0 or indptr[-1] != len(chunk):
            self.add(
                "bm25-postings", F.BM25_INDPTR, "must start at 0 and end at the postings count"
            )
            return
        steps = np.diff(indptr)
        if self._rows(
            "bm25-postings",
            F.BM25_INDPTR,
            steps <= 0,
            lambda i: "a term with no postings (indptr must increase)",
        ):
            return
        if self._rows(
            "bm25-postings",
            F.BM25_CHUNK,
            (chunk < 0) | (chunk >= n_chunks),
            lambda i: f"chunk {int(chunk[i])} of {n_chunks}",
        ):
            return
        starts = np.zeros(len(chunk), dtype=bool)
        starts[indptr[:-1]] = True
        self._rows(
            "bm25-postings",
            F.BM25_CHUNK,
            np.r_[False, np.diff(chunk) <= 0] & ~starts if len(chunk) else starts,
            lambda i: "chunk ids must ascend within a term",
        )
        self._rows("bm25-postings", F.BM25_TF, tf < 1, lambda i: f"tf {int(tf[i])} < 1")
        if len(doc_len) != n_chunks:
            self.add(
                "bm25-doc-len", F.BM25_DOC_LEN, f"{len(doc_len)} lengths for {n_chunks} chunks"
            )
            return
        total = np.bincount(chunk, weights=tf, minlength=n_chunks).astype(np.int64)
        if self._rows(
            "bm25-doc-len",
            F.BM25_DOC_LEN,
            total != doc_len,
            lambda i: f"{int(doc_len[i])} tokens, but its postings sum to {int(total[i])}",
        ):
            return
        self._retokenise(terms, indptr, chunk, tf, doc_len)

    def _check_terms(self, blob: np.ndarray, offsets: np.ndarray) -> list[bytes] | None:
        path = F.BM25_TERMS_OFFSETS
        if len(offsets) == 0 or offsets[0] != 0 or offsets[-1] != len(blob):
            self.add("bm25-terms", path, f"offsets must run from 0 to {len(blob)}")
            return None
        if self._rows(
            "bm25-terms",
            path,
            np.r_[False, np.diff(offsets) <= 0],
            lambda i: "empty or decreasing term",
        ):
            return None
        data = blob.tobytes()
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as e:
            self.add("bm25-terms", F.BM25_TERMS_BLOB, f"not valid UTF-8 at byte {e.start}")
            return None
        cut = (blob[offsets[:-1]] & 0xC0) == 0x80
        if self._rows("bm25-terms", path, cut, lambda i: "starts inside a UTF-8 character"):
            return None
        off = offsets.tolist()
        terms = [data[off[i] : off[i + 1]] for i in range(len(off) - 1)]
        unsorted = np.array([a >= b for a, b in itertools.pairwise(terms)], dtype=bool)
        if self._rows(
            "bm25-terms",
            F.BM25_TERMS_BLOB,
            np.r_[False, unsorted],
            lambda i: f"term {terms[i]!r} is not after {terms[i - 1]!r}",
        ):
            return None
        self.stats["terms"] = len(terms)
        return terms

    def _retokenise(
        self,
        terms: list[bytes] | None,
        indptr: np.ndarray,
        chunk: np.ndarray,
        tf: np.ndarray,
        doc_len: np.ndarray,
    ) -> None:
        """Postings of (a sample of) chunks equal the tokenizer's counts of their content."""
        from kbpack.lexical import tokenize

        cols = self._same_length(F.CHUNKS, [F.CHUNK_DOCUMENT, F.CHUNK_FROM, F.CHUNK_TO])
        if terms is None or cols is None:
            return
        doc, start, end = cols
        n = len(doc)
        if self.deep or n <= BM25_SAMPLE:
            sample = np.arange(n)
        else:
            rng = np.random.default_rng(secrets.randbits(64))
            sample = np.sort(rng.choice(n, BM25_SAMPLE, replace=False))
        if len(sample) == n:
            sel = np.argsort(chunk, kind="stable")  # every posting, grouped by chunk
        else:  # only the sample's postings: no sort of all of them
            mark = np.zeros(n, dtype=bool)
            mark[sample] = True
            sel = np.flatnonzero(mark[chunk])
            sel = sel[np.argsort(chunk[sel], kind="stable")]
        sel_chunk = chunk[sel]
        term_of = np.searchsorted(indptr, sel, side="right") - 1
        tf_of = tf[sel]
        first = np.searchsorted(sel_chunk, sample, side="left")
        last = np.searchsorted(sel_chunk, sample, side="right")
        bad: list[str] = []
        n_bad = 0
        for c, lo, hi in zip(sample.tolist(), first.tolist(), last.tolist(), strict=True):
            text = self._text(int(doc[c]))
            if text is None:
                continue
            tokens = tokenize(text[int(start[c]) : int(end[c])])
            stored = {
                terms[t].decode("utf-8"): f
                for t, f in zip(term_of[lo:hi].tolist(), tf_of[lo:hi].tolist(), strict=True)
            }
            counted = dict(Counter(tokens))
            if len(tokens) != doc_len[c] or stored != counted:
                n_bad += 1
                if len(bad) < MAX_ROWS_SHOWN:
                    diff = sorted(set(stored.items()) ^ set(counted.items()))[:1]
                    bad.append(
                        f"chunk {c}: {len(tokens)} tokens (stored {int(doc_len[c])})"
                        + (f", term {diff[0][0]!r}" if diff else "")
                    )
        self.stats["bm25_retokenised"] = len(sample)
        if n_bad:
            more = f" (and {n_bad - len(bad)} more)" if n_bad > len(bad) else ""
            self.add(
                "bm25-content-mismatch",
                F.BM25_CHUNK,
                "postings differ from the re-tokenised chunk content: " + "; ".join(bad) + more,
            )

    # counts --------------------------------------------------------------------------------
    def _check_counts(self) -> None:
        if self.manifest is None:
            return
        c = self.counts
        status = self._strs(F.DOC_STATUS)
        actual: dict[str, int] = {}
        if status is not None:
            for s in F.STATUSES:
                actual[f"documents_{s}"] = status.count(s)
        root = self.attrs.get("/", {})
        if root.get(F.R_VECTORS) == "none":
            actual["vectors"] = 0
        elif "vector_rows" in self.stats:
            actual["vectors"] = self.stats["vector_rows"]
        if F.MODEL_GGUF not in self.readable and F.MODEL_GGUF not in self.elements:
            actual["model_bytes"] = 0
        if "terms" in c and "terms_plus_one" in c and c["terms"] + 1 != c["terms_plus_one"]:
            self.add("count-mismatch", f"{HEADER}/counts/terms", "terms + 1 != terms_plus_one")
        if "terms" in self.stats:
            actual["terms"] = self.stats["terms"]
        for key, value in actual.items():
            if key in c and c[key] != value:
                self.add(
                    "count-mismatch",
                    f"{HEADER}/counts/{key}",
                    f"the manifest says {c[key]}, the data holds {value}",
                )


def _json_str_list(s: str) -> bool:
    try:
        v = json.loads(s)
    except ValueError:
        return False
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _num(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and bool(np.isfinite(x))


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


def _blocks(ds: Any, rows: int) -> Iterator[np.ndarray]:
    n = ds.shape[0] if ds.shape else 0
    for at in range(0, n, rows):
        yield ds[at : at + rows]


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"


# -- the sandbox -------------------------------------------------------------------------------


class SandboxFailure(Exception):
    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


class Isolated:
    """``fn(*args)`` in a forked child with an address-space limit, a wall-clock timeout, no
    core dumps, no right to write files, and stdio on /dev/null.

    The child runs ``preload`` at once, then waits for ``result()`` to release it, so slow
    imports overlap the parent's work while nothing is parsed before the parent says so.
    ``result()`` returns fn's JSON-able value; a crash, hang or memory blow-up raises
    SandboxFailure with a one-line detail. ``cancel()`` is safe to call at any time.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        limits: Limits,
        preload: Callable[[], None] | None = None,
    ) -> None:
        self.limits = limits
        r, w = os.pipe()
        gate_r, gate_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            os.close(r)
            os.close(gate_w)
            payload: dict[str, Any] = {}
            try:
                _confine(limits)
                if preload is not None:
                    preload()
                if os.read(gate_r, 1) != b"g":
                    os._exit(0)  # cancelled
                payload = {"ok": fn(*args)}
            except MemoryError:
                payload = {"error": "sandbox-memory", "detail": "over the verify memory limit"}
            except BaseException as e:
                payload = {"error": "hdf5-unreadable", "detail": _one_line(e)}
            try:
                view = memoryview(json.dumps(payload).encode())
                while view:
                    view = view[os.write(w, view) :]
            finally:
                os._exit(0)
        os.close(w)
        os.close(gate_r)
        self.pid: int | None = pid
        self.out = r
        self.gate: int | None = gate_w

    def result(self) -> Any:
        assert self.pid is not None and self.gate is not None
        os.write(self.gate, b"g")
        os.close(self.gate)
        self.gate = None
        chunks: list[bytes] = []
        deadline = time.monotonic() + self.limits.timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise SandboxFailure(
                    "sandbox-timeout",
                    f"HDF5 parsing took longer than {self.limits.timeout_s:g} s and was stopped",
                )
            ready, _, _ = select.select([self.out], [], [], left)
            if ready:
                data = os.read(self.out, 1 << 20)
                if not data:
                    break
                chunks.append(data)
        _, status = os.waitpid(self.pid, 0)
        self.pid = None
        if os.WIFSIGNALED(status) and not chunks:
            sig = os.WTERMSIG(status)
            name = signal.Signals(sig).name if sig in set(signal.Signals) else sig
            raise SandboxFailure("sandbox-crash", f"HDF5 parsing crashed the reader ({name})")
        try:
            payload = json.loads(b"".join(chunks))
        except ValueError as e:
            raise SandboxFailure("sandbox-crash", "the reader died before reporting") from e
        if "error" in payload:
            raise SandboxFailure(payload["error"], payload["detail"])
        return payload["ok"]

    def cancel(self) -> None:
        if self.gate is not None:
            os.close(self.gate)  # the child reads EOF at its gate and leaves
            self.gate = None
        if self.pid is not None:
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                os.waitpid(self.pid, 0)
            self.pid = None
        if self.out >= 0:
            with contextlib.suppress(OSError):
                os.close(self.out)
            self.out = -1


def run_isolated(fn: Callable[..., Any], args: tuple[Any, ...], limits: Limits) -> Any:
    """``Isolated(fn, args, limits).result()``, always cleaned up."""
    child = Isolated(fn, args, limits)
    try:
        return child.result()
    finally:
        child.cancel()


def _confine(limits: Limits) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and kills us
    faulthandler.disable()  # a crash is reported by the parent, in one line
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/statm") as f:
            used = int(f.read().split()[0]) * resource.getpagesize()
        cap = used + limits.memory_bytes
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


__all__ = [
    "BM25_SAMPLE",
    "STEPS",
    "Isolated",
    "Limits",
    "SandboxFailure",
    "VerifyReport",
    "run_isolated",
    "verify_pack",
]
