"""The version of the JSON shapes in spec/JSON.md, carried by every ``--json`` output, ``/api``
answer and MCP result. Bump it when a documented key changes meaning or goes away; adding a key
does not bump it. A leaf module: the CLI, serve and mcp all take it from here, and the result
types their JSON shapes' plain keys (``fields_of``)."""

from typing import Any

SCHEMA = 1


def fields_of(obj: object, *names: str) -> dict[str, Any]:
    """``{name: obj.name}`` for each of ``names``, in that order: the keys of a JSON shape that
    are the object's own attributes, unchanged."""
    return {name: getattr(obj, name) for name in names}
