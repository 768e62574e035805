"""``kbpack mcp``: the packs as three Model Context Protocol tools over stdio.

``search(query, k, mode, pack)`` returns what ``/api/search`` returns (the fields of
``kbpack query --json``, plus ``pack``): results with locators an agent can cite.
``read(doc, from, to, pack)`` returns the canonical text between two offsets, with the section
path and page there, so the agent can quote the passage in context.
``ask(question, k, pack)`` returns what ``/api/ask`` returns (``kbpack ask --json``'s keys): the
answer with every sentence checked against the passage it cites, or quoted from the pack when
no chat model is loaded or none of its sentences holds up; a refused question generates nothing.

Built on the SDK's low-level server with the tools' JSON schemas written out: the tool's
argument is called ``from`` (as in every locator), a Python keyword that a decorated function
cannot take as a parameter name.
"""

from __future__ import annotations

import json
from typing import Any

import anyio

from kbpack.errors import KbpackError, UsageError
from kbpack.schema import SCHEMA
from kbpack.search.searcher import MODES, locator
from kbpack.serve.asking import Asker, answer_json
from kbpack.serve.library import MAX_K, MAX_QUERY_CHARS, Library
from kbpack.version import __version__

MAX_READ_CHARS = 20_000  # one read returns at most this much text: agents page through


def _arguments(required: str, **properties: dict[str, Any]) -> dict[str, Any]:
    """A tool's JSON schema: an object of these properties, ``required`` among them, no other."""
    return {
        "type": "object",
        "properties": properties,
        "required": [required],
        "additionalProperties": False,
    }


def tool_schemas(library: Library) -> dict[str, dict[str, Any]]:
    names = ", ".join(library.packs)
    pack = {
        "type": "string",
        "description": f"One pack ({names}; a result's pack file name works too). "
        "Default: search every pack as one; read finds the pack holding the document.",
    }
    text = {"type": "string", "minLength": 1, "maxLength": MAX_QUERY_CHARS}
    k = {"type": "integer", "minimum": 1, "maximum": MAX_K, "default": 5}
    return {
        "search": {
            "description": (
                "Search the knowledge packs. Returns passages with citations: doc, section, "
                "locator (doc#char=from,to, PDFs #page=N&char=...), distance, content. "
                "'answered' is false when nothing is close enough: then say the packs do not say. "
                "'not_in_pack' lists query words (names, products) the packs never mention."
            ),
            "schema": _arguments(
                "query",
                query=text,
                k=k,
                mode={"type": "string", "enum": list(MODES), "default": "hybrid"},
                pack=pack,
            ),
        },
        "ask": {
            "description": (
                "Answer a question from the knowledge packs. Returns 'answer' and its "
                "'sentences' (each with the [n] it cites and 'supported': checked against that "
                "passage) and 'citations' (n -> doc, locator). 'refused' true: the packs do not "
                "answer it (nothing was generated). 'fallback' true: the answer is quoted from "
                "the packs, not written by a model."
            ),
            "schema": _arguments("question", question=text, k=k, pack=pack),
        },
        "read": {
            "description": (
                "Read a document's canonical text between two character offsets (a search "
                "result's from/to, or wider for context). At most "
                f"{MAX_READ_CHARS} characters per call."
            ),
            "schema": _arguments(
                "doc",
                doc={"type": "string", "description": "The document name from a result."},
                **{"from": {"type": "integer", "minimum": 0, "default": 0}},
                to={"type": "integer", "minimum": 0},
                pack=pack,
            ),
        },
    }


def search_tool(library: Library, args: dict[str, Any]) -> dict[str, Any]:
    name = args.get("pack")
    resp = library.search(
        name, str(args["query"]), k=int(args.get("k", 5)), mode=str(args.get("mode", "hybrid"))
    )
    served = name or (None if library.federated else library.get(None).name)
    return {"schema": SCHEMA, "command": "query", "pack": served, **resp.as_dict()}


def read_tool(library: Library, args: dict[str, Any]) -> dict[str, Any]:
    doc = library.document(args.get("pack"), str(args["doc"]))
    n = len(doc.text)
    start = int(args.get("from", 0))
    end = int(args["to"]) if args.get("to") is not None else min(n, start + MAX_READ_CHARS)
    if not 0 <= start <= end <= n:
        raise UsageError(f"{doc.name}: from={start}, to={end} is outside the text (0..{n})")
    if end - start > MAX_READ_CHARS:
        raise UsageError(
            f"{doc.name}: {end - start} characters asked; read at most {MAX_READ_CHARS} per call"
        )
    page = doc.page_at(start) if doc.pages else None
    number = page.number if page else None
    return {
        "pack": doc.pack,
        "doc": doc.name,
        "title": doc.title,
        "from": start,
        "to": end,
        "length": n,
        "section": " > ".join(s.title for s in doc.section_at(start) if s.level > 0),
        "page": number,
        "locator": locator(doc.name, start, end, number),
        "text": doc.text[start:end],
    }


def ask_tool(asker: Asker, library: Library, args: dict[str, Any]) -> dict[str, Any]:
    name = args.get("pack")
    a = asker.answer(str(args["question"]), name, k=int(args.get("k", 5)))
    served = name or (None if library.federated else library.get(None).name)
    return answer_json(a, served)


TOOLS = {"search": search_tool, "read": read_tool}


def build_server(library: Library, asker: Asker | None = None) -> Any:
    from mcp import types
    from mcp.server.lowlevel import Server

    answers = asker or Asker(library)
    fns = {**TOOLS, "ask": lambda lib, args: ask_tool(answers, lib, args)}
    schemas = tool_schemas(library)
    tools = [
        types.Tool(name=name, description=s["description"], input_schema=s["schema"])
        for name, s in schemas.items()
    ]

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: Any) -> types.CallToolResult:
        fn = fns.get(params.name)
        if fn is None:
            return error(f"no tool named {params.name!r}; the tools are search, read and ask")
        try:
            library.refresh()  # a pack file changed at its path: checked before it is used
            # the library blocks (HDF5, llama.cpp): off the event loop
            out = await anyio.to_thread.run_sync(fn, library, dict(params.arguments or {}))
        except KbpackError as e:
            return error(str(e))
        return types.CallToolResult(
            content=[types.TextContent(text=json.dumps(out, ensure_ascii=False))],
            structured_content=out,
        )

    def error(message: str) -> types.CallToolResult:
        return types.CallToolResult(content=[types.TextContent(text=message)], is_error=True)

    return Server(
        "kbpack",
        version=__version__,
        instructions=(
            "Offline knowledge packs. Call search first; cite results by their locator; "
            "call read for more context around a result. If search returns answered false, the "
            "packs do not answer the question. ask returns a checked answer with citations."
        ),
        get_tool_input_schema=lambda name: schemas[name]["schema"] if name in schemas else None,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def run_stdio(library: Library, asker: Asker | None = None) -> None:
    """Serve until the client closes stdin."""
    from mcp.server.stdio import stdio_server

    server = build_server(library, asker)

    async def main() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(main)
