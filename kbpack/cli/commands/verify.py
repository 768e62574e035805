"""``kbpack verify``, ``kbpack keygen`` and ``kbpack sign``."""

from __future__ import annotations

from pathlib import Path

import click

from kbpack.cli.commands.common import emit_json, json_option, output_option, table

_MARK = {"ok": "ok", "failed": "FAILED", "skipped": "-"}


@click.command()
@click.argument("pack", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--key",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Trust only this public key (.pub) and require a signature by it.",
)
@click.option(
    "--require-signature",
    is_flag=True,
    help="Fail unless a trusted key signed the pack. Trusted: --key, else *.pub in "
    "$KBPACK_TRUSTED_KEYS or ~/.config/kbpack/trusted-keys.",
)
@click.option(
    "--allow-unsigned",
    is_flag=True,
    help="Pass an unsigned pack (or one signed by an unknown key) though trusted keys are "
    "configured.",
)
@click.option("--quick", is_flag=True, help="Stop after bytes, signature and structure.")
@click.option(
    "--deep",
    is_flag=True,
    help="Re-tokenise every chunk for the BM25 check (default: a random sample of 1,000).",
)
@json_option
def verify(
    pack: Path,
    key: Path | None,
    require_signature: bool,
    allow_unsigned: bool,
    quick: bool,
    deep: bool,
    as_json: bool,
) -> int:
    """Check PACK before trusting it: bytes, signature, structure, digests, invariants.

    Exit 0 when intact, 1 with findings, 2 on a usage error.
    """
    from kbpack.pack.verified import identity, remember_verified
    from kbpack.verify.pipeline import STEPS, verify_pack

    before = identity(pack)  # the pack as it is now: a pass is remembered for this one only
    report = verify_pack(
        pack,
        key=key,
        require_signature=require_signature,
        allow_unsigned=allow_unsigned,
        quick=quick,
        deep=deep,
    )
    if report.intact and not quick:
        remember_verified(pack, before)  # so that query stops suggesting verify
    if as_json:
        emit_json(report.as_dict())
        return 0 if report.intact else 1
    rows = []
    for step in STEPS:
        status = report.status.get(step, "skipped")
        rows.append((step, f"{_MARK[status]:<6}  {report.summary.get(step, '')}".rstrip()))
    click.echo(f"{pack}")
    click.echo(table(rows, indent=2))
    for note in report.notes:
        click.echo(f"  note: {note}")
    findings = report.findings
    if not findings:
        click.echo("intact" + (" (quick: digests and invariants not checked)" if quick else ""))
        return 0
    click.echo(f"{len(findings)} finding{'s' if len(findings) != 1 else ''}:")
    for f in findings:
        click.echo(f"  {f}")
    return 1


@click.command()
@output_option("Writes STEM.key (secret, mode 0600) and STEM.pub.", dest="stem", required=True)
@json_option
def keygen(stem: Path, as_json: bool) -> int:
    """Make an Ed25519 key pair for signing packs."""
    from kbpack.ops.outpath import check_output
    from kbpack.pack.sign import keygen as make_keys

    for suffix in (".key", ".pub"):  # a key is never replaced: a lost secret key cannot be undone
        check_output(stem.with_name(stem.name + suffix), pack=False)

    secret, public, kid = make_keys(stem)
    if as_json:
        emit_json({"secret_key": str(secret), "public_key": str(public), "key_id": kid})
        return 0
    click.echo(
        table(
            [("secret key", f"{secret} (keep it private)"), ("public key", public), ("key id", kid)]
        )
    )
    click.echo(f"Give {public.name} to whoever verifies: kbpack verify PACK --key {public.name}")
    return 0


@click.command()
@click.argument("pack", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--key",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Secret key (.key) from kbpack keygen.",
)
@json_option
def sign(pack: Path, key: Path, as_json: bool) -> int:
    """Sign PACK's manifest in place; the HDF5 bytes are not touched."""
    from kbpack.errors import UsageError
    from kbpack.pack.manifest import refuse_non_regular
    from kbpack.pack.sign import sign_pack

    if not pack.exists():
        raise UsageError(f"{pack}: no such file")
    refuse_non_regular(pack, pack.stat().st_mode)
    kid = sign_pack(pack, key)
    if as_json:
        emit_json({"path": str(pack), "key_id": kid})
    else:
        click.echo(f"{pack}: signed by key {kid}")
    return 0
