"""``kbpack query --batch``: one query per line, text or JSON ``{"id": ..., "query": ...}``."""

from __future__ import annotations

import json
from typing import Any


def parse_batch_line(raw: bytes, n: int) -> tuple[Any, str | None, str | None]:
    """(id, query, error) of one --batch line; (n, None, None) for a blank line."""
    try:
        line = raw.decode("utf-8").strip()
    except UnicodeDecodeError as e:
        return n, None, f"line {n}: not UTF-8 (byte {e.start}); save the file as UTF-8"
    if not line:
        return n, None, None
    qid: Any = n
    q: Any = line
    if line.startswith("{"):
        try:
            obj = json.loads(line)
        except ValueError as e:
            return (
                n,
                None,
                f'line {n}: not valid JSON ({e}); give text or {{"id": ..., "query": ...}}',
            )
        if not isinstance(obj, dict) or not isinstance(obj.get("query"), str):
            return n, None, f'line {n}: a JSON line needs a "query" string'
        q, qid = obj["query"], obj.get("id", n)
        if not isinstance(qid, (str, int)) or isinstance(qid, bool):
            return n, None, f'line {n}: "id" must be a string or an integer'
    if any("\ud800" <= ch <= "\udfff" for ch in q):
        return (
            qid,
            None,
            f"line {n}: the query holds a lone surrogate escape; fix the line's encoding",
        )
    if not q.strip():
        return qid, None, f"line {n}: empty query"
    return qid, q, None
