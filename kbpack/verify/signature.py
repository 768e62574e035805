"""Verify step 2, **signature**: checked against keys the user trusts (never the pack's), and a
header copied from another pack told apart from damage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kbpack.pack.manifest import Header
from kbpack.pack.structure import Finding
from kbpack.verify.report import HEADER, VerifyReport


def verify_signature(
    header: Header | None, key: Path | None, required: bool, report: VerifyReport
) -> None:
    """Check the signature when there is one or ``required``; an untrusted key is a note
    unless a signature is required."""
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
    skipped: list[str] = []
    keys = sign.trusted_keys(key, skipped) if (header.signature is not None or key) else []
    report.notes.extend(skipped)
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


def classify_foreign_manifest(report: VerifyReport, result: dict[str, Any]) -> None:
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
