"""``kbpack merge``: several packs into one, reusing their text and vectors."""

from __future__ import annotations

from pathlib import Path

import click

from kbpack.cli.commands.common import human_size, say, show_progress, summary_wanted, table
from kbpack.cli.options import (
    force_option,
    json_option,
    output_option,
    packs_argument,
    quiet_option,
)
from kbpack.errors import Exit


@click.command()
@packs_argument()
@output_option("The pack to write.", required=True)
@click.option(
    "--prefer",
    type=click.Choice(["first", "last"]),
    help="A document name in two packs: keep the copy of the first or the last pack "
    "(default: an error).",
)
@force_option()
@json_option()
@quiet_option()
def merge(
    packs: tuple[Path, ...], out: Path, prefer: str | None, force: bool, as_json: bool, quiet: bool
) -> int:
    """Merge PACKS into one pack: no re-extraction, no re-embedding.

    The packs must share the model (GGUF SHA-256), the pipeline version and the chunking
    settings. Documents are written in build order (skipped first, then by name), so merging
    the shards of a build (build --shard I/N) gives the single build's pack. BM25 postings are
    rebuilt; the manifest's merged_from names every source pack with its digest. Exit 0 on
    success, 2 on usage errors (a duplicate name without --prefer, packs that do not match),
    130 when interrupted (the output path is left as it was).
    """
    from kbpack.ops.merge import merge_packs
    from kbpack.ops.outpath import check_output
    from kbpack.runtime.progress import Progress

    # before any work; SIGTERM is Ctrl-C (kbpack.cli.main.main): the writer removes its temp file
    out = check_output(out, inputs=packs, force=force)
    report = merge_packs(
        list(packs),
        out,
        prefer=prefer,  # type: ignore[arg-type]
        progress=Progress(show_progress(quiet, as_json)),
    )
    if not summary_wanted(report.as_dict(), as_json, quiet):
        return Exit.OK
    c = report.counts
    rows = [
        ("pack", f"{report.path} ({human_size(report.size)})"),
        ("merged", ", ".join(f"{s['file']} ({s['documents']} documents)" for s in report.sources)),
        (
            "documents",
            f"{c['documents_ok']} ok, {c['documents_failed']} failed, {c['documents_skipped']} skipped",
        ),
        ("chunks", c["chunks"]),
        ("vectors", c["vectors"]),
        ("terms", c["terms"]),
        ("time", f"{report.seconds:.1f}s"),
        ("peak memory", f"{report.peak_rss_mb:.0f} MB"),
    ]
    lines = [table(rows)]
    lines.extend(
        f"  dropped  {d['name']} of {d['dropped']} (kept {d['kept']})" for d in report.dropped
    )
    lines.extend(f"  note     {n}" for n in report.notes)
    say("\n".join(lines))
    return Exit.OK
