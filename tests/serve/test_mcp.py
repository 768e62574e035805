"""kbpack mcp: the SDK's own stdio client starts the real command, lists the tools, searches
and reads."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the serve extra is not installed")

import anyio

from tests.packs import SAMPLE, markdown_doc, write_pack


@pytest.fixture(scope="module")
def pack(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("mcp") / "logs.kbpack"
    write_pack(out, [markdown_doc("logs.md", SAMPLE)])
    return out


def session_run(pack: Path, steps: Any) -> Any:
    """Start ``kbpack mcp PACK`` through the SDK's stdio client and run ``steps(session)``."""
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, args=["-m", "kbpack", "mcp", str(pack)])

    async def main() -> Any:
        with anyio.fail_after(300):
            async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
                await s.initialize()
                return await steps(s)

    return anyio.run(main)


def test_tools_search_and_read(pack: Path) -> None:
    async def steps(s: Any) -> Any:
        tools = await s.list_tools()
        found = await s.call_tool("search", {"query": "0x80070005", "k": 2, "mode": "bm25"})
        hit = found.structured_content["results"][0]
        read = await s.call_tool("read", {"doc": hit["doc"], "from": hit["from"], "to": hit["to"]})
        return tools, found, read

    tools, found, read = session_run(pack, steps)
    by_name = {t.name: t for t in tools.tools}
    assert set(by_name) == {"search", "read", "ask"}
    assert set(by_name["read"].input_schema["properties"]) == {"doc", "from", "to", "pack"}
    assert not found.is_error
    body = json.loads(found.content[0].text)
    assert body == found.structured_content
    assert body["pack"] == "logs" and body["mode"] == "bm25"
    hit = body["results"][0]
    assert hit["doc"] == "logs.md" and "0x80070005" in hit["content"]
    assert hit["locator"] == f"logs.md#char={hit['from']},{hit['to']}"
    got = read.structured_content
    assert got["text"] == hit["content"] == SAMPLE[hit["from"] : hit["to"]]
    assert got["section"] == "Rotating logs > Troubleshooting"
    assert got["locator"] == hit["locator"]


def test_tool_errors_are_results_not_crashes(pack: Path) -> None:
    async def steps(s: Any) -> Any:
        return (
            await s.call_tool("read", {"doc": "../../etc/passwd"}),
            await s.call_tool("read", {"doc": "logs.md", "from": 5, "to": 10**6}),
            await s.call_tool("search", {"query": "unheard-of words", "mode": "bm25"}),
        )

    missing, outside, refused = session_run(pack, steps)
    assert missing.is_error and "no document named '../../etc/passwd'" in missing.content[0].text
    assert outside.is_error and "outside the text" in outside.content[0].text
    assert not refused.is_error
    assert refused.structured_content["answered"] is False


def test_read_follows_a_search_over_several_packs(
    pack: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    other = tmp_path_factory.mktemp("mcp2") / "boiler.kbpack"
    write_pack(other, [markdown_doc("boiler.md", "# Boiler\n\nKeep the pressure below 12 bar.\n")])
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    args = ["-m", "kbpack", "mcp", str(pack), str(other)]
    params = StdioServerParameters(command=sys.executable, args=args)

    async def main() -> Any:
        with anyio.fail_after(300):
            async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
                await s.initialize()
                found = await s.call_tool("search", {"query": "pressure bar", "mode": "bm25"})
                hit = found.structured_content["results"][0]
                by_file = await s.call_tool(
                    "read",
                    {"doc": hit["doc"], "from": hit["from"], "to": hit["to"], "pack": hit["pack"]},
                )
                no_pack = await s.call_tool("read", {"doc": hit["doc"]})
                return found, hit, by_file, no_pack

    found, hit, by_file, no_pack = anyio.run(main)
    assert found.structured_content["pack"] is None  # both packs, searched as one
    assert (hit["doc"], hit["pack"]) == ("boiler.md", "boiler.kbpack")
    assert by_file.structured_content["text"] == hit["content"]
    assert no_pack.structured_content["pack"] == "boiler"
