"""``kbpack inspect``: what a pack holds, or a row per pack of a set."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from kbpack.cli.commands.common import emit_json, grid, human_size, say, table
from kbpack.cli.options import flag, json_option, packs_argument
from kbpack.errors import Exit, KbpackError
from kbpack.ops.inspect import describe
from kbpack.runtime.terminal import printable


@click.command()
@packs_argument()
@flag("--sizes", help="Bytes per element.")
@json_option()
def inspect(packs: tuple[Path, ...], sizes: bool, as_json: bool) -> int:
    """Show what PACKS hold: format, counts, model stamp, sizes, failed documents.

    Several packs, or a whole set (kbpack inspect docs-*.kbpack): one row each and the total.
    """
    if len(packs) > 1:
        return _inspect_many(packs, as_json)
    pack = packs[0]
    info = describe(pack)
    if as_json:
        emit_json(info)
        return Exit.OK
    c = info["counts"]
    m = info["model"]
    rows = [
        ("pack", f"{info['path']} ({human_size(info['file_size'])})"),
        (
            "format",
            f"v{info['format_version']} (kbpack {info['kbpack_version']}, pipeline {info['pipeline_version']})",
        ),
        ("created", info["created"]),
        (
            "metadata",
            "HDF5 checksummed"
            if info["hdf5_metadata_checksummed"]
            else "no HDF5 checksums (older layout; kbpack migrate PACK -o NEW adds them)",
        ),
        (
            "signature",
            "present, not checked here (kbpack verify --key checks it)"
            if info["signed"]
            else "none",
        ),
        (
            "documents",
            f"{c['documents_ok']} ok, {c['documents_failed']} failed, {c['documents_skipped']} skipped",
        ),
        ("sections", c["sections"]),
        ("pages", c["pages"]),
        ("chunks", c["chunks"]),
        ("vectors", c["vectors"]),
        ("terms", c["terms"]),
        (
            "bm25",
            "over each chunk's header and content"
            if info["bm25"]["fields"] == "header+content"
            else "over content only (0.2.x; kbpack migrate PACK -o NEW indexes headers too)",
        ),
        (
            "model",
            f"{m['name']} {m['dims']}d {m['pooling']}, window {m['window']}, sha256 {m['sha256'][:16]}…"
            if m
            else "none (BM25-only pack)",
        ),
        ("model file", "stored in the pack" if info["embedded_model"] else "not stored"),
        (
            "prefixes",  # quoted: a prefix's trailing space matters
            f"query {m.get('query_prefix', '')!r}, document {m.get('doc_prefix', '')!r}"
            if m
            else "-",
        ),
        (
            "threshold",
            f"{info['search']['max_distance']:g} cosine distance"
            + (" (calibrated)" if "calibration" in info["search"] else " (default)"),
        ),
    ]
    if "links" in c:  # optional elements (spec §3.12, §3.13)
        rows.append(("links", f"{c['links']} between documents of the pack"))
    if "ivf_lists" in c:
        rows.append(
            ("ivf index", f"{c['ivf_lists']} lists (kbpack query --exact scans every vector)")
        )
    prov = info["provenance"]
    if "merged_from" in prov:
        rows.append(("merged from", ", ".join(s["file"] for s in prov["merged_from"])))
    if "shard" in prov:
        rows.append(("shard", f"{prov['shard']['index']} of {prov['shard']['count']}"))
    if "set" in prov:
        s = prov["set"]
        rows.append(("pack set", f"member {s['index']} of {s['count']} (set {s['id']})"))
    say(table(rows))
    if sizes:
        say("element bytes:")
        say(table([(k, human_size(v)) for k, v in sorted(info["element_bytes"].items())], indent=2))
    for f in info["failed"]:
        say(f"  failed   {printable(f['name'])} ({f['stage']}): {f['reason']}")
    for f in info["skipped"]:
        say(f"  skipped  {printable(f['name'])}: {f['reason']}")
    for st in info["stale"]:
        n = len(st["documents"])
        say(
            f"  stale    {st['stale']}: {st['detail']} ({n} document{'s' if n != 1 else ''}); fix: {st['fix']}"
        )
    return Exit.OK


def _inspect_many(packs: tuple[Path, ...], as_json: bool) -> int:
    """One row per pack and the total; a pack that cannot be read is a row of its own (its
    one-line error) and the exit status is the worst of them."""
    infos: list[dict[str, Any]] = []
    errors: dict[str, str] = {}
    worst = int(Exit.OK)
    for p in packs:
        try:
            infos.append(describe(p))
        except KbpackError as e:
            errors[str(p)] = str(e)
            worst = max(worst, int(e.exit_code))
    if as_json:
        emit_json({"packs": [*infos, *({"path": p, "error": m} for p, m in errors.items())]})
        return worst
    head = ["pack", "size", "documents", "chunks", "model", "signed", "set"]
    rows = []
    for info in infos:
        c, m, prov = info["counts"], info["model"], info["provenance"]
        member = prov.get("set")
        rows.append(
            [
                info["path"],
                human_size(info["file_size"]),
                str(c["documents"]),
                str(c["chunks"]),
                f"{m['name']} {m['sha256'][:12]}" if m else "none",
                "yes" if info["signed"] else "no",
                f"{member['index']} of {member['count']} ({member['id']})" if member else "-",
            ]
        )
    rows += [[p, "ERROR", "", "", "", "", ""] for p in errors]
    total = [
        f"total ({len(infos)} packs)",
        human_size(sum(i["file_size"] for i in infos)),
        str(sum(i["counts"]["documents"] for i in infos)),
        str(sum(i["counts"]["chunks"] for i in infos)),
        "",
        "",
        "",
    ]
    say("\n".join(grid(head, [*rows, total])))
    for message in errors.values():
        say(f"error: {message}")
    models = {i["model"]["sha256"] if i["model"] else None for i in infos}
    if len(models) > 1:
        say("note: the packs have different models: they cannot be searched as one")
    return worst
