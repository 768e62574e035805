"""``kbpack diff``: what changed between two packs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from kbpack.cli.commands.common import emit_json, human_size, say, table
from kbpack.cli.options import file_path, json_option
from kbpack.errors import Exit
from kbpack.pack import format as F
from kbpack.runtime.terminal import printable

PREVIEW = 72  # characters of a chunk shown per line
MAX_PASSAGES = 20  # changed passages shown per document; the rest are counted
# the counts a reader of the summary cares about: the format's counts less its bookkeeping (in
# --json, not here) and "documents" (the line above them), and of the optional counts, pieces
BOOKKEEPING_COUNTS = {"documents", "terms_plus_one", "terms_bytes", "postings", "model_bytes"}
SHOWN_COUNTS = frozenset(F.COUNT_KEYS) - BOOKKEEPING_COUNTS | {"pieces"}


@click.command()
@click.argument("old", type=file_path())
@click.argument("new", type=file_path())
@click.option(
    "--chunks/--no-chunks",
    default=True,
    help="Show what changed inside changed documents: the changed passages as a word diff "
    "([-old-]{+new+}, with context), or the chunks added and removed when only the chunking "
    "changed.",
)
@json_option()
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
    return Exit.OK if d.same_content else Exit.FAILURE


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
