"""``kbpack verify``: a pack's bytes, signature, structure, digests and invariants."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from kbpack.cli.commands.common import emit_json, grid, pick, say, table
from kbpack.cli.options import flag, json_option, packs_argument, signature_options
from kbpack.errors import Exit

_MARK = {"ok": "ok", "failed": "FAILED", "skipped": "-"}


@click.command()
@packs_argument(exists=False, dir_okay=True)
@signature_options(
    "Fail unless a trusted key signed the pack. Trusted: --key, else *.pub in "
    "$KBPACK_TRUSTED_KEYS or ~/.config/kbpack/trusted-keys.",
    "Pass an unsigned pack (or one signed by an unknown key) though trusted keys are configured.",
)
@flag("--quick", help="Stop after bytes, signature and structure.")
@flag(
    "--deep",
    help="Re-tokenise every chunk for the BM25 check (default: a random sample of 1,000).",
)
@json_option()
def verify(packs: tuple[Path, ...], as_json: bool, **how: Any) -> int:
    """Check PACKS before trusting them: bytes, signature, structure, digests, invariants.

    Several packs, or a whole set (kbpack verify docs-*.kbpack), give one summary table. A set
    member also checks that every other member beside it is present and whole: its size and
    the SHA-256 of its bytes (--quick: the size only; members given together are hashed once).
    Exit 0 when every pack is intact, 1 with findings, 2 on a usage error (the worst of the
    packs).
    """
    if len(packs) == 1:
        return _verify_one(packs[0], how, as_json)
    return _verify_many(packs, how, as_json)


def _check(pack: Path, how: dict[str, Any], apart: tuple[Path, ...]) -> Any:
    """verify_pack as the options say (``how``: the signature policy, --quick, --deep)."""
    from kbpack.pack.verified import identity, remember_verified
    from kbpack.verify.pipeline import verify_pack

    before = identity(pack)  # the pack as it is now: a pass is remembered for this one only
    policy = pick(how, "require_signature", "allow_unsigned", key="signature_key")
    report = verify_pack(pack, **policy, quick=how["quick"], deep=how["deep"], checked_apart=apart)
    if report.intact and not how["quick"]:
        remember_verified(pack, before)  # so that query stops suggesting verify
    return report


def _verify_one(pack: Path, how: dict[str, Any], as_json: bool) -> int:
    from kbpack.verify.pipeline import STEPS

    report = _check(pack, how, ())
    if as_json:
        emit_json(report.as_dict())
        return Exit.OK if report.intact else Exit.FAILURE
    rows = []
    for step in STEPS:
        status = report.status.get(step, "skipped")
        rows.append((step, f"{_MARK[status]:<6}  {report.summary.get(step, '')}".rstrip()))
    say(f"{pack}")
    say(table(rows, indent=2))
    for note in report.notes:
        say(f"  note: {note}")
    findings = report.findings
    if not findings:
        say("intact" + (" (quick: digests and invariants not checked)" if how["quick"] else ""))
        return Exit.OK
    say(f"{len(findings)} finding{'s' if len(findings) != 1 else ''}:")
    for f in findings:
        say(f"  {f}")
    return Exit.FAILURE


def _verify_many(
    packs: tuple[Path, ...],
    how: dict[str, Any],
    as_json: bool,
) -> int:
    """Every pack in turn (each set member's siblings given here are verified in full once, not
    also hashed as siblings); one row each, then the findings; exit status the worst."""
    from kbpack.errors import UsageError

    results: list[dict[str, Any]] = []
    worst = int(Exit.OK)
    for pack in packs:
        try:
            report = _check(pack, how, packs)
        except UsageError as e:  # this one cannot be checked; the others still are
            results.append({"path": str(pack), "intact": False, "error": str(e)})
            worst = max(worst, int(e.exit_code))
            continue
        results.append(report.as_dict())
        if not report.intact:
            worst = max(worst, int(Exit.FAILURE))
    intact = sum(1 for r in results if r["intact"])
    if as_json:
        emit_json({"intact": intact == len(results), "packs": results})
        return worst
    rows = [["pack", "result", "signature", "set"]]
    for r in results:
        if "error" in r:
            rows.append([r["path"], "ERROR", "-", "-"])
            continue
        n = len(r["findings"])
        result = "intact" if r["intact"] else f"FAILED ({n} finding{'s' if n != 1 else ''})"
        sig = r["signature"]["status"] if r["signature"] else "-"
        member = next((x for x in r["notes"] if x.startswith("member ")), "-")
        rows.append([r["path"], result, sig, member.split(";")[0]])
    say("\n".join(grid(rows[0], rows[1:])))
    for r in results:
        if "error" in r:
            say(f"{r['path']}: {r['error'].removeprefix(r['path'] + ': ')}")
        for f in r.get("findings", []):
            say(f"{r['path']}: {f['code']} {f['path']}: {f['detail']}")
        for note in r.get("notes", []):
            if not note.startswith("member "):
                say(f"{r['path']}: note: {note}")
    quick_note = " (quick: digests and invariants not checked)" if how["quick"] else ""
    say(f"{intact} of {len(results)} packs intact{quick_note}")
    return worst
