"""A build's or update's report as the CLI prints it: the summary table, the failed, skipped
and warned documents, the members of a pack set, and what became of a signature."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kbpack.cli.plain_text import human_size, table
from kbpack.runtime.terminal import printable


def render_signature(path: Path, s: dict[str, Any]) -> str:
    if s["new"]:
        return f"signature    signed by key {s['new']}"
    return (
        f"signature    dropped: the old pack was signed by key {s['old']}; re-sign with "
        f"kbpack sign {path} --key NAME.key (or pass --key to update)"
    )


def left_out(report: Any) -> str:
    """What discovery left out on purpose, and the option that changes it."""
    parts = []
    if report.filtered:
        parts.append(f"{report.filtered} files by --include/--exclude")
    if report.links_not_followed:
        parts.append(
            f"{report.links_not_followed} symlinks outside the input (--follow-symlinks reads them)"
        )
    return "; ".join(parts)


def peak_memory(own: float, worker: float) -> str:
    """Both processes run at once, so their sum bounds what the build needed."""
    if not worker:
        return f"{own:.0f} MB"
    return f"{own + worker:.0f} MB (kbpack {own:.0f} MB + extraction worker {worker:.0f} MB)"


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'s' if n != 1 else ''}"


def render_report(report: Any) -> str:
    c = report.counts
    s = report.seconds
    stages = "  ".join(f"{k} {v:.1f}s" for k, v in s.items())
    rows = [
        ("pack", f"{report.path} ({human_size(report.size)})"),
        (
            "documents",
            f"{c['documents_ok']} ok, {c['documents_failed']} failed, {c['documents_skipped']} skipped"
            + (f" ({report.unsupported} of unsupported types)" if report.unsupported else ""),
        ),
        ("sections", c["sections"]),
        *(
            [("repeated", f"{report.repeated_blocks} blocks repeated across a folder, dropped")]
            if getattr(report, "repeated_blocks", 0)
            else []
        ),
        ("chunks", c["chunks"]),
        (
            "vectors",
            f"{c['vectors']}"
            + (
                f" ({report.model['name']}, {report.model['dims']} dims)"
                if report.model
                else " (BM25-only pack)"
            ),
        ),
        (
            "tokens",
            f"{report.tokens_embedded} embedded, {report.header_share:.0%} in headers"
            if report.model
            else "-",
        ),
        *([("pieces", f"{c['pieces']} piece vectors")] if "pieces" in c else []),
        ("terms", c["terms"]),
        ("time", stages),
        ("peak memory", peak_memory(report.peak_rss_mb, report.peak_rss_workers_mb)),
    ]
    if report.reused_documents:
        rows.insert(
            2,
            (
                "reused",
                f"{report.reused_documents} unchanged documents; "
                + _count(report.vectors_embedded, "chunk")
                + (
                    f" and {_count(report.pieces_embedded, 'piece')}"
                    if report.pieces_embedded
                    else ""
                )
                + " embedded",
            ),
        )
    if getattr(report, "embeddings_reused", 0):
        rows.insert(
            2,
            (
                "cache",
                f"reused {report.embeddings_reused:,} of {report.embeddings_total:,} embeddings "
                "from an earlier or interrupted build",
            ),
        )
    left = left_out(report)
    if left:
        rows.insert(2, ("left out", left))
    lines = [table(rows)]
    for f in report.failed:
        lines.append(f"  failed   {printable(f['name'])}: {f['reason']}")
    for f in report.skipped:
        lines.append(f"  skipped  {printable(f['name'])}: {f['reason']}")
    for w in report.warnings:
        lines.append(f"  warning  {printable(w['name'])}: {w['warning']}")
    for p in report.problems:
        lines.append(f"  chunking {printable(p['name'])}: {p['problem']}")
    if report.truncated:
        lines.append(
            f"  warning  {report.truncated} embedded texts were truncated to the model window"
        )
    return "\n".join(lines)


def render_dry_run(r: dict[str, Any]) -> str:
    """``build --dry-run``'s table: what the build would make, and the estimates."""
    from kbpack.runtime.progress import duration

    c = r["counts"]
    sample = r.get("sample") or {}
    rows: list[tuple[str, Any]] = [
        ("dry run", f"nothing written; estimates for {r['path']}"),
        (
            "documents",
            f"{c['documents_ok']} ok, {c['documents_failed']} failed, {c['documents_skipped']} skipped"
            + (f" ({r['unsupported']} of unsupported types)" if r["unsupported"] else ""),
        ),
        ("pages", f"{c.get('pages', 0):,}"),
        ("chunks", f"{c['chunks']:,}"),
        *([("pieces", f"{c['pieces']:,}")] if "pieces" in c else []),
    ]
    if r.get("model"):
        cached = r["cached_texts"]
        rows += [
            (
                "to embed",
                f"{r['texts']:,} texts, {r['tokens']:,} tokens"
                + (f" ({cached:,} texts already in the embedding cache)" if cached else ""),
            ),
            (
                "speed",
                f"{sample['tokens_per_s']:,.0f} tokens/s ({sample['texts']} texts sampled, "
                f"{r['model']['name']})",
            ),
            (
                "time",
                f"~{duration(r['estimated_seconds'])} (embedding ~"
                f"{duration(r['estimated_embed_seconds'])}, the rest "
                f"~{duration(r['estimated_other_seconds'])})",
            ),
        ]
    else:
        rows.append(("time", f"~{duration(r['estimated_seconds'])} (BM25-only: no embedding)"))
    rows.append(("pack size", f"~{human_size(r['estimated_size'])}"))
    return table(rows)


def render_set_members(members: Any) -> str:
    """The members of a pack set (``kbpack.ops.split.SplitReport``), one line each, and its notes."""
    lines = [
        f"  member   {m['path']} ({human_size(m['bytes'])}, {m['documents']} documents)"
        for m in members.members
    ]
    lines += [f"  note     {n}" for n in members.notes]
    return "\n".join(lines)
