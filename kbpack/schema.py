"""The version of the JSON shapes in spec/JSON.md, carried by every ``--json`` output, ``/api``
answer and MCP result. Bump it when a documented key changes meaning or goes away; adding a key
does not bump it. A leaf module: the CLI, serve and mcp all take it from here."""

SCHEMA = 1
