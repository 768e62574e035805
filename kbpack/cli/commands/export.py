"""``kbpack export``: a pack's chunks, sections or documents as JSON lines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from kbpack.cli.commands.common import emit_json
from kbpack.cli.options import chosen, force_option, json_option, output_option, pack_argument
from kbpack.errors import Exit
from kbpack.pack import format as F
from kbpack.runtime.terminal import json_printable


@click.command()
@pack_argument()
@chosen(
    "--what",
    choices=["chunks", "sections", "documents"],
    default="chunks",
    help="What to dump, one JSON object per line.",
)
@output_option(
    "Write the lines to this file (- for stdout), complete or not at all.",
    dest="output",
    dir_okay=False,
    allow_dash=True,
    default="-",
)
@force_option()
@json_option()
def export(pack: Path, what: str, output: Path, force: bool, as_json: bool) -> int:
    """Dump chunks, sections or documents of PACK as JSON lines.

    With --json: one JSON document (schema, command, pack, what, records) instead of lines.
    """
    from kbpack.ops.outpath import STDOUT, check_output, write_atomically
    from kbpack.pack.read import PackReader

    if output != STDOUT:
        output = check_output(output, inputs=[pack], force=force, pack=False)
    with PackReader(pack) as r:
        if as_json:
            emit_json({"pack": str(pack), "what": what, "records": list(iter_records(r, what))})
            return Exit.OK
        with write_atomically(output) as f:
            for rec in iter_records(r, what):
                f.write(json_printable(json.dumps(rec, ensure_ascii=False)) + "\n")
    return Exit.OK


def iter_records(r: Any, what: str) -> Any:
    names = r.strings(F.DOC_NAME)
    if what == "documents":
        cols = {k: r.strings(f"{F.DOCUMENTS}/{k}") for k in F.DOC_STRING_COLUMNS if k != "warnings"}
        nums = {k: r.column(f"{F.DOCUMENTS}/{k}") for k in F.DOC_INT_COLUMNS}
        for i in range(len(names)):
            rec = {k: v[i] for k, v in cols.items()}
            rec.update({k: int(v[i]) for k, v in nums.items()})
            rec["warnings"] = r.warnings(i)
            rec["chars"] = len(r.text(i))
            yield rec
    elif what == "sections":
        doc, parent, level = r.column(F.SEC_DOCUMENT), r.column(F.SEC_PARENT), r.column(F.SEC_LEVEL)
        start, end, titles = r.column(F.SEC_FROM), r.column(F.SEC_TO), r.strings(F.SEC_TITLE)
        for i in range(len(doc)):
            yield {
                "id": i,
                "doc": names[int(doc[i])],
                "parent": int(parent[i]),
                "level": int(level[i]),
                "title": titles[i],
                "path": " > ".join(r.section_path(i)),
                "from": int(start[i]),
                "to": int(end[i]),
            }
    else:
        doc, sec = r.column(F.CHUNK_DOCUMENT), r.column(F.CHUNK_SECTION)
        start, end = r.column(F.CHUNK_FROM), r.column(F.CHUNK_TO)
        page, tokens = r.column(F.CHUNK_PAGE), r.column(F.CHUNK_TOKENS)
        for i in range(len(doc)):
            d = int(doc[i])
            yield {
                "id": i,
                "doc": names[d],
                "section": " > ".join(r.section_path(int(sec[i]))),
                "from": int(start[i]),
                "to": int(end[i]),
                "page": int(page[i]) or None,
                "tokens": int(tokens[i]),
                "content": r.text(d)[int(start[i]) : int(end[i])],
            }
