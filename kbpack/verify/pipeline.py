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

This module runs the steps in order; each lives in its own module of ``kbpack.verify``:
``file_bytes`` (1), ``signature`` (2), ``examine`` (3-5 in the child: ``kbpack.pack.structure``,
``digests``, ``invariants.text``, ``invariants.vectors``, ``invariants.pieces``,
``invariants.bm25``), ``sandbox`` (the child) and ``report`` (the report).
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection
from pathlib import Path
from typing import Any

from kbpack.errors import UsageError
from kbpack.pack.manifest import refuse_non_regular
from kbpack.pack.preflight import h5py_lock, memo_key, release_inherited_lock, remember_parsed
from kbpack.pack.structure import Finding
from kbpack.runtime.sandbox import Isolated, Limits, SandboxFailure, run_isolated
from kbpack.verify.digests import NORM_TOLERANCE
from kbpack.verify.examine import examine, manifest_dict, merge, preload_hdf5
from kbpack.verify.file_bytes import check_bytes, read_user_block
from kbpack.verify.report import STEPS, VerifyReport
from kbpack.verify.signature import classify_foreign_manifest, verify_signature

BM25_SAMPLE = 1000  # chunks re-tokenised by default

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
    "checksum-missing": "a numeric dataset of format 2 or later without the Fletcher-32 filter",
    "filter-pipeline": "filters out of the spec's order, or a shuffle HDF5 would misapply",
    "chunk-index": "a chunk index that does not hold exactly one entry per chunk of rows",
    "count-mismatch": "a row count differs from the manifest's counts",
    "size-out-of-range": "a dataset declares more bytes than the file can hold",
    "hdf5-unreadable": "HDF5 cannot open or walk the file",
    "heap-malformed": "a global heap collection (strings) that HDF5 would loop on or overrun",
    "sandbox-crash": "the HDF5 parser crashed (in the child; the CLI survives)",
    "sandbox-timeout": "the HDF5 parser ran past its time limit",
    "sandbox-memory": "the HDF5 parser ran past its memory limit",
    # 4 digests
    "digest-mismatch": "an element's data or attributes differ from the manifest's digest",
    "digest-missing": "the manifest has no digest for an element present in the pack",
    "digest-orphan": "the manifest has a digest for no element",
    "element-unreadable": "an element's data cannot be read (format 2: a checksum failed)",
    "memory-limit": "an element needs more memory than the verify limit",
    # 5 invariants
    "manifest-mismatch": "manifest created/version differ from the root attributes",
    "attribute-invalid": "an attribute (root, /search, an element's kind) has a value the spec does not allow",
    "attribute-missing": "an element lacks kbpack:kind, kbpack:version, description or an attribute its section of the spec requires",
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
    "model-invalid": "the stored GGUF's hyperparameters are out of range or disagree with its "
    "tensors (llama.cpp would abort on it)",
    "vectors-unexpected": "vectors in a pack whose root says it has none",
    "dims-mismatch": "vector dims differ from the model stamp",
    "vector-count": "not one vector per chunk",
    "vector-not-finite": "a vector with NaN or infinite components",
    "vector-norm": f"a vector whose norm differs from 1 by more than {NORM_TOLERANCE}",
    "pieces-unexpected": "sentence pieces in a pack whose root says it has no vectors",
    "piece-count": "not one vector per piece",
    "piece-chunk": "a piece naming a chunk row that does not exist",
    "piece-outside-chunk": "a piece not inside its chunk (or empty)",
    "piece-order": "pieces not in (chunk, from) order, or overlapping",
    "piece-single": "a chunk with exactly one piece (none or at least two)",
    "piece-whitespace": "a piece that starts or ends with whitespace",
    "copy-chunk": "a copy group naming a chunk row that does not exist, or one chunk twice",
    "copy-order": "copy groups not numbered 0, 1, ..., chunks not ascending, or a lone member",
    "copy-exact": "a copy group member whose exact flag differs from its normalised words",
    "row-digests": "a string row's stored digest differs from its bytes, or some are missing",
    "bm25-params": "k1 or b out of range",
    "bm25-tokenizer": "a tokenizer this kbpack cannot re-run",
    "bm25-terms": "vocabulary not valid UTF-8, empty, or not strictly sorted",
    "bm25-postings": "indptr, chunk ids or tf out of range or order",
    "bm25-doc-len": "document lengths differ from the postings' term counts",
    "bm25-dense": "the common terms' dense tf rows differ from the postings or the rule",
    "bm25-content-mismatch": "postings differ from the re-tokenised chunk content",
    "bm25-fields": "postings that count the chunks' headers (or not) as /bm25 fields does not say",
    "check-failed": "an invariant check could not run on this data",
    "set-invalid": "a pack set member whose manifest 'set' is malformed",
    "set-misnamed": "a pack set member not named STEM-NNN after its index",
    "set-member-missing": "another member of the pack set is not beside this one",
    "set-member-unreadable": "another member of the pack set has no readable header",
    "set-member-foreign": "a file named as a member of the set belongs to another set",
    "set-member-damaged": "another member of the pack set is truncated, or its bytes differ "
    "from its manifest's SHA-256",
    "set-publish-unfinished": "a member of the set was replaced by a publish that was cut short "
    "(the set's own member waits in a hidden backup beside it)",
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
    checked_apart: Collection[Path] = (),
    shown: Path | None = None,
    allow_unsigned: bool = False,
) -> VerifyReport:
    """Run the five steps on ``path``. Raises UsageError only for what the user must fix
    (no such file, a bad key file); everything wrong with the pack is a finding.

    ``key``: trust only this public key (and require a signature). ``locate_damage=False``
    skips steps 3-5 when step 1 already failed (bulk damage tests); the report still fails.
    A set member's siblings get the byte check (size only when ``quick``), except those in
    ``checked_apart``: the same run verifies them in full.
    ``shown``: the pack's own path when ``path`` names an open file (``PackReader.held_path``,
    so that the file checked is the file a reader holds): the report names ``shown``, and the
    other members of a pack set are looked for beside it.
    """
    path = Path(path)
    shown = Path(shown) if shown is not None else path
    from kbpack.pack.sign import SignaturePolicy

    # trusted keys configured: a signature is required unless allow_unsigned (issue 30)
    policy = SignaturePolicy(key, require_signature, allow_unsigned)
    required = policy.required(policy.keys())
    if not path.exists():
        raise UsageError(f"{path}: no such file")
    if path.is_dir():
        if (path / "SHA256SUMS").is_file() and (path / "install.sh").is_file():
            raise UsageError(
                f"{path}: is a bundle folder; check it with kbpack bundle --check {path}"
            )
        raise UsageError(f"{path}: is a directory, not a pack")
    refuse_non_regular(path, path.stat().st_mode)  # a FIFO or a device would block or never end
    report = VerifyReport(str(shown))
    header, actual_size = read_user_block(path, report)
    seen = ""
    if header is not None:  # the file's state as verify begins (preflight.py remembers it)
        with contextlib.suppress(OSError):
            seen = memo_key(path, header)
    if limits is None:  # generous: a stuck parser is what the limit is for, not a big pack
        limits = Limits(timeout_s=max(600.0, actual_size / (1e6 if deep else 10e6)))
    if header is None and report.findings_by_step["bytes"][0].code == "not-a-pack":
        for s in STEPS[1:]:
            report.skip(s, "not a kbpack pack")
        return report
    bm25_sample = None if deep else BM25_SAMPLE  # looked up per call: the default can be changed
    child = None
    if locate_damage:
        # forked now so that it loads h5py while we hash; it parses nothing until released
        args = (str(path), manifest_dict(header), actual_size, quick, bm25_sample)
        # forked holding h5py's lock: serve checks a changed pack while request threads read
        with h5py_lock():
            child = Isolated(examine, args, limits, preload=_preload)
    try:
        if header is not None:
            check_bytes(path, header, actual_size, report)
        verify_signature(header, key, required, report)
        if child is None and report.status["bytes"] != "ok":
            for s in STEPS[2:]:
                report.skip(s, "bytes already damaged; not located")
            return report
        if child is None:
            args = (str(path), manifest_dict(header), actual_size, quick, bm25_sample)
            with h5py_lock():
                child = Isolated(examine, args, limits, preload=release_inherited_lock)
        result = child.result()
    except SandboxFailure as e:
        report.add("structure", [Finding(e.code, "/", e.detail)])
        for s in STEPS[3:]:
            report.skip(s, "HDF5 could not be examined")
        return report
    finally:
        if child is not None:
            child.cancel()
    merge(report, result, quick)
    if header is not None and report.status["bytes"] != "ok":
        classify_foreign_manifest(report, result)
    if header is not None:
        _check_set(shown, header.manifest.extra, report, quick, checked_apart)
    if header is not None and not quick and report.intact:
        # the child read everything the first open's pre-flight reads: remember it
        remember_parsed(path, header, seen)
    return report


def _preload() -> None:
    release_inherited_lock()  # the child's own threads read HDF5 too
    preload_hdf5()


def _check_set(
    path: Path,
    extra: dict[str, Any],
    report: VerifyReport,
    quick: bool,
    checked_apart: Collection[Path],
) -> None:
    """A member of a pack set (``build --split-size``): the other members must be beside it,
    and whole (a member saying intact beside a truncated sibling would mislead)."""
    from kbpack.pack.set_publish import set_findings

    found, note = set_findings(path, extra, hash_members=not quick, checked_apart=checked_apart)
    if found:
        report.add("invariants", found)
    if note:
        report.notes.append(note)


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
