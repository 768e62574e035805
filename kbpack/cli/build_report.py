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
                f"{report.reused_documents} unchanged documents; {report.vectors_embedded} chunks"
                + (f" and {report.pieces_embedded} pieces" if report.pieces_embedded else "")
                + " embedded",
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


def render_set_members(members: Any) -> str:
    """The members of a pack set (``kbpack.ops.split.SplitReport``), one line each, and its notes."""
    lines = [
        f"  member   {m['path']} ({human_size(m['bytes'])}, {m['documents']} documents)"
        for m in members.members
    ]
    lines += [f"  note     {n}" for n in members.notes]
    return "\n".join(lines)
