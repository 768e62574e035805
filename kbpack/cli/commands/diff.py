"""``kbpack diff`` and ``kbpack migrate``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from kbpack.cli.commands.common import (
    emit_json,
    force_option,
    human_size,
    json_option,
    output_option,
    quiet_option,
    say,
    show_progress,
    table,
    threads_option,
)
from kbpack.runtime.terminal import printable

PREVIEW = 72  # characters of a chunk shown per line
MAX_PASSAGES = 20  # changed passages shown per document; the rest are counted
# the counts a reader of the summary cares about (terms_plus_one, terms_bytes, postings, ... are
# the format's bookkeeping: in --json, not here)
SHOWN_COUNTS = (  # "documents" is the line above them
    "documents_ok",
    "documents_failed",
    "documents_skipped",
    "sections",
    "pages",
    "chunks",
    "vectors",
    "pieces",
    "terms",
)


@click.command()
@click.argument("old", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("new", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--chunks/--no-chunks",
    default=True,
    help="Show what changed inside changed documents: the changed passages as a word diff "
    "([-old-]{+new+}, with context), or the chunks added and removed when only the chunking "
    "changed.",
)
@json_option
def diff(old: Path, new: Path, chunks: bool, as_json: bool) -> int:
    """Show what changed from OLD to NEW: documents, chunks, model, pipeline, format, sizes.

    Build times, source paths as typed, the kbpack and llama.cpp version strings and float
    noise in vectors are not differences. Exit 0 when the packs hold the same content,
    1 when they differ, 2 on usage errors.
    """
    from kbpack.ops.diff import diff_packs

    d = diff_packs(old, new, passages=chunks and not as_json)
    if as_json:
        emit_json(d.as_dict())
    else:
        say(render_diff(d.as_dict(), chunks, d.passages))
    return 0 if d.same_content else 1


def _pack_line(info: dict[str, Any]) -> str:
    m = info["model"]
    model = f"{m['name']} sha256 {m['sha256'][:12]}" if m else "no vectors"
    c = info["counts"]
    return (
        f"{info['path']} ({human_size(info['file_size'])}; format {info['format_version']}, "
        f"pipeline {info['pipeline_version']}; {model}; {c.get('documents', 0)} documents, "
        f"{c.get('chunks', 0)} chunks)"
    )


def _preview(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= PREVIEW else flat[: PREVIEW - 1] + "…"


def render_diff(
    d: dict[str, Any],
    show_chunks: bool = True,
    passages: dict[str, list[dict[str, Any]]] | None = None,
) -> str:
    docs = d["documents"]
    rows = [
        ("old", _pack_line(d["old"])),
        ("new", _pack_line(d["new"])),
        (
            "documents",
            f"{len(docs['added'])} added, {len(docs['removed'])} removed, "
            f"{len(docs['changed'])} changed, {docs['unchanged']} unchanged",
        ),
    ]
    for key in ("model", "pipeline", "format", "extractors"):
        change = d[key]
        if change["changed"]:
            old, new = change["old"], change["new"]
            if key == "model":
                old = f"{old['name']} ({old['sha256'][:12]}, {old['dims']}d)" if old else "none"
                new = f"{new['name']} ({new['sha256'][:12]}, {new['dims']}d)" if new else "none"
            elif key == "extractors":
                old, new = ", ".join(old), ", ".join(new)
            rows.append((key, f"{old} -> {new}"))
    for key, change in d["counts"].items():
        if key in SHOWN_COUNTS:
            rows.append((key, f"{change['old']} -> {change['new']}"))
    rows.append(
        ("size", f"{human_size(d['size']['old'])} -> {human_size(d['size']['new'])}"),
    )
    v = d["vectors"]
    if v.get("compared"):
        rows.append(
            ("vector drift", f"max cosine distance {v['max_distance']} over {v['compared']} chunks")
        )
    lines = [table(rows)]
    for name in docs["added"]:
        lines.append(f"  + {printable(name)}")
    for name in docs["removed"]:
        lines.append(f"  - {printable(name)}")
    for c in d["changes"]:
        lines.append(
            f"  ~ {printable(c['name'])}: {', '.join(c['what'])} "
            f"({c['old']['chunks']} -> {c['new']['chunks']} chunks; "
            f"+{len(c['chunks_added'])} -{len(c['chunks_removed'])})"
        )
        changed = (passages or {}).get(c["name"])
        if show_chunks and changed:
            for p in changed[:MAX_PASSAGES]:
                if p["section"]:
                    lines.append(f"      @@ {p['section']} @@")
                lines.append(f"      {p['text']}")
            if len(changed) > MAX_PASSAGES:
                lines.append(f"      ... {len(changed) - MAX_PASSAGES} more changed passages")
        elif show_chunks:  # the same text cut differently: the chunks say how
            lines.extend(f"      + {_preview(t)}" for t in c["chunks_added"])
            lines.extend(f"      - {_preview(t)}" for t in c["chunks_removed"])
    if d["same_content"]:
        lines.append("same content")
    else:
        lines.append("differ: " + "; ".join(d["differences"]))
    return "\n".join(lines)


@click.command()
@click.argument("pack", type=click.Path(dir_okay=False, path_type=Path))
@output_option(
    "The new pack to write (never PACK itself). Required unless --dry-run.", dir_okay=False
)
@click.option(
    "--model",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Re-embed with this GGUF model (from the stored text; no sources needed).",
)
@click.option(
    "--query-prefix",
    metavar="TEXT",
    help="New query prefix (default: the pack's; another --model: its family's). Re-embeds.",
)
@click.option(
    "--doc-prefix",
    metavar="TEXT",
    help="New document prefix ('' for none). A change re-embeds every chunk.",
)
@click.option("--dry-run", is_flag=True, help="Say what would change and how much work it is.")
@force_option
@threads_option
@json_option
@quiet_option
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
    return 0


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
