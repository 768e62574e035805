"""``kbpack migrate``: a pack upgraded to the current format and pipeline, or re-embedded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from kbpack.cli.commands.common import emit_json, human_size, say, show_progress, table
from kbpack.cli.options import (
    dry_run_option,
    force_option,
    json_option,
    model_option,
    output_option,
    pack_argument,
    prefix_options,
    quiet_option,
    threads_option,
)
from kbpack.errors import Exit


@click.command()
@pack_argument(exists=False)
@output_option(
    "The new pack to write (never PACK itself). Required unless --dry-run.", dir_okay=False
)
@model_option(
    "Re-embed with this GGUF model (from the stored text; no sources needed).", exists=False
)
@prefix_options(
    "New query prefix (default: the pack's; another --model: its family's). Re-embeds.",
    "New document prefix ('' for none). A change re-embeds every chunk.",
)
@dry_run_option("Say what would change and how much work it is.")
@force_option()
@threads_option()
@json_option()
@quiet_option()
def migrate(
    pack: Path,
    out: Path | None,
    model: Path | None,
    query_prefix: str | None,
    doc_prefix: str | None,
    dry_run: bool,
    force: bool,
    threads: int | None,
    as_json: bool,
    quiet: bool,
) -> int:
    """Upgrade PACK to the current format and pipeline, or re-embed it with --model.

    Only what is stale is recomputed; migrating a migrated pack embeds nothing. The output is
    a new file, written atomically and verified; PACK is never modified. A pack from a newer
    kbpack is refused. Exit 0 on success, 1 on failure, 2 on usage errors.
    """
    from kbpack.ops.migrate import migrate_pack
    from kbpack.ops.outpath import check_output
    from kbpack.runtime.progress import Progress

    if out is None and not dry_run:
        raise click.UsageError("give -o OUT (migrate always writes a new file), or --dry-run")
    if out is not None and not dry_run:
        out = check_output(out, inputs=[pack], force=force)
    report = migrate_pack(  # SIGTERM is Ctrl-C (kbpack.cli.main.main): temp files are removed
        pack,
        out,
        model=model,
        query_prefix=query_prefix,
        doc_prefix=doc_prefix,
        dry_run=dry_run,
        threads=threads,
        progress=Progress(show_progress(quiet, as_json)),
    )
    if as_json:
        emit_json(report.as_dict())
    elif not quiet:
        say(render_migration(report.as_dict()))
    return Exit.OK


def render_migration(r: dict[str, Any]) -> str:
    fmt, pipe, model = r["format"], r["pipeline"], r["model"]
    docs, chunks = r["documents"], r["chunks"]

    def model_label(m: dict[str, Any] | None) -> str:
        return (
            f"{m['name']} ({m['sha256'][:12]}, {m['dims']}d, window {m['window']})" if m else "none"
        )

    other = docs["total"] - docs["kept"] - docs["reembedded"] - docs["rechunked"]
    rows = [
        ("source", r["source"]),
        (
            "format",
            f"{fmt['from']} -> {fmt['to']}"
            + (f" ({', '.join(fmt['steps'])})" if fmt["steps"] else ""),
        ),
        ("pipeline", f"{pipe['from']} -> {pipe['to']}"),
        (
            "model",
            f"{model_label(model['from'])} -> {model_label(model['to'])}"
            if model["changed"]
            else f"{model_label(model['from'])} (unchanged)",
        ),
        (
            "documents",
            f"{docs['total']}: {docs['kept']} kept, {docs['reembedded']} re-embedded, "
            f"{docs['rechunked']} re-chunked, {other} failed or skipped (copied)",
        ),
        (
            "chunks",
            f"{chunks['before']} -> {chunks['after']}; {chunks['to_embed']} to embed, "
            f"{chunks['vectors_reused']} vectors reused",
        ),
    ]
    if r["dry_run"]:
        idle = not (r["needs_work"] or fmt["steps"])
        rows.append(("dry run", "nothing written" + ("; nothing to do" if idle else "")))
    else:
        rows.append(("output", f"{r['output']} ({human_size(r['size'])})"))
        rows.append(("embedded", f"{r['vectors_embedded']} chunks"))
        rows.append(("verified", r["verified"]))
    lines = [table(rows)]
    lines.extend(f"  note  {n}" for n in r["notes"])
    return "\n".join(lines)
