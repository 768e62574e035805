"""kbpack serve: the real command on a free port, exercised with a real HTTP client.

The packs are built by ``kbpack build`` from a hostile Markdown document (script tags and an
attribute break-out in its name and text), a plain one, and a real PDF from fixtures/docs, with
a tiny llama.cpp model, so dense search, the reader's page view and escaping all run for real.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from tests.paths import REPO_ROOT

httpx = pytest.importorskip("httpx", reason="the serve extra is not installed")
pytest.importorskip("starlette", reason="the serve extra is not installed")

from click.testing import CliRunner  # noqa: E402

from kbpack.cli.main import cli  # noqa: E402

ROOT = REPO_ROOT
HOSTILE_NAME = '"><img src=x onerror=alert(1)>.md'
HOSTILE_TEXT = """# Pump <script>alert(1)</script> manual

## Priming

Open the bleed valve <script>alert(1)</script> and prime the centrifugal pump until water flows.
The attribute "><img src=x onerror=alert(2)> must show as text.

## Seals

Replace the mechanical seal every 4000 hours of operation.
"""
PLAIN = """# Boiler

## Pressure

Keep the boiler pressure below 12 bar; the relief valve opens at 13 bar.
"""
PDF = ROOT / "fixtures" / "docs" / "reportlab" / "reportlab-userguide-ch7-tables.pdf"


def run(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return r.exit_code, r.stdout


@pytest.fixture(scope="module")
def model(wide_model: Path) -> Path:
    return wide_model  # conftest: built once per session


@pytest.fixture(scope="module")
def packs(tmp_path_factory: pytest.TempPathFactory, model: Path) -> dict[str, Path]:
    src = tmp_path_factory.mktemp("serve-docs")
    (src / HOSTILE_NAME).write_text(HOSTILE_TEXT)
    (src / "boiler.md").write_text(PLAIN)
    shutil.copy(PDF, src / "tables.pdf")
    out = tmp_path_factory.mktemp("serve-packs")
    manuals = out / "manuals.kbpack"
    code, _ = run("build", str(src), "-o", str(manuals), "--model", str(model), "--quiet")
    assert code == 0
    # the same pack with a threshold nothing passes: every meaning-only question is refused
    import kbpack

    strict = out / "strict.kbpack"
    with kbpack.open(manuals, load_model=False) as p:
        p.store_calibration(strict, {"threshold": 0.0})
    return {"manuals": manuals, "strict": strict}


class Server:
    """``kbpack serve ... --port 0 --json`` in a subprocess; stopped with SIGINT (Ctrl-C), which
    exits 130 like every interrupted kbpack command."""

    def __init__(self, *args: str) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kbpack", "serve", "--port", "0", "--json", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line:
            err = self.proc.stderr.read() if self.proc.stderr else ""
            self.proc.wait(timeout=60)
            raise AssertionError(f"kbpack serve did not start: {err}")
        self.info: dict[str, Any] = json.loads(line)
        self.base = f"http://127.0.0.1:{self.info['port']}"
        self.client = httpx.Client(base_url=self.base, timeout=60)

    def stop(self) -> int:
        self.client.close()
        self.proc.send_signal(2)
        try:
            return self.proc.wait(timeout=60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()


@pytest.fixture(scope="module")
def server(packs: dict[str, Path], model: Path) -> Iterator[Server]:
    s = Server(str(packs["manuals"]), str(packs["strict"]), "--model", str(model))
    yield s
    assert s.stop() == 130


def export(pack: Path, what: str) -> list[dict[str, Any]]:
    code, out = run("export", str(pack), "--what", what)
    assert code == 0
    return [json.loads(line) for line in out.splitlines() if line.strip()]


# -- the API ---------------------------------------------------------------------------------
def test_api_search_matches_query_json(server: Server, packs: dict[str, Path], model: Path) -> None:
    for mode, q in [
        ("bm25", "centrifugal pump"),
        ("hybrid", "relief valve bar"),
        ("dense", "seal"),
    ]:
        r = server.client.get("/api/search", params={"q": q, "mode": mode, "pack": "manuals"})
        assert r.status_code == 200
        got = r.json()
        assert got.pop("pack") == "manuals"
        code, out = run(
            "query", str(packs["manuals"]), q, "--mode", mode, "--model", str(model), "--json"
        )
        assert code in (0, 3)
        cli_json = json.loads(out)
        assert (cli_json["schema"], cli_json["command"]) == (1, "query")  # the envelope, too
        assert got == cli_json, mode


def test_api_search_without_a_pack_searches_all_as_one(
    server: Server, packs: dict[str, Path], model: Path
) -> None:
    both = [str(packs["manuals"]), str(packs["strict"])]
    for mode, q in [("bm25", "centrifugal pump"), ("hybrid", "relief valve bar")]:
        r = server.client.get("/api/search", params={"q": q, "mode": mode, "k": 6})
        assert r.status_code == 200
        got = r.json()
        assert got.pop("pack") is None
        code, out = run(
            "query", *both, q, "--mode", mode, "-k", "6", "--model", str(model), "--json"
        )
        assert code in (0, 3)
        assert got == json.loads(out), mode
        assert {x["pack"] for x in got["results"]} <= {"manuals.kbpack", "strict.kbpack"}
    # the page links each result to the reader of the pack it came from
    q = {"q": "centrifugal pump", "mode": "bm25", "k": 6}
    html = server.client.get("/", params=q).text
    results = server.client.get("/api/search", params=q).json()["results"]
    assert results
    for x in results:
        name = x["pack"].removesuffix(".kbpack")
        assert f"pack={name}&amp;from={x['from']}&amp;to={x['to']}#hit" in html
    assert server.client.get("/api/search", params={"q": "pump", "pack": "nope"}).status_code == 404


def test_api_bounds_query_length_k_and_mode(server: Server) -> None:
    base = {"pack": "manuals"}
    for params, needle in [
        ({"q": "x" * 1001}, "limit is 1000"),
        ({"q": "pump", "k": "51"}, "k must be between 1 and 50"),
        ({"q": "pump", "k": "0"}, "k must be between 1 and 50"),
        ({"q": "pump", "k": "many"}, "whole number"),
        ({"q": "pump", "mode": "grep"}, "mode must be one of"),
        ({"q": "  "}, "the query is empty"),
    ]:
        r = server.client.get("/api/search", params={**base, **params})
        assert r.status_code == 400, params
        assert needle in r.json()["error"]


def test_api_doc_returns_canonical_text_at_the_offsets(
    server: Server, packs: dict[str, Path]
) -> None:
    chunks = export(packs["manuals"], "chunks")
    docs = {d["name"]: d for d in export(packs["manuals"], "documents")}
    assert HOSTILE_NAME in docs
    for c in chunks[:8]:
        r = server.client.get(
            f"/api/doc/{quote(c['doc'], safe='/')}",
            params={"pack": "manuals", "from": c["from"], "to": c["to"]},
        )
        assert r.status_code == 200
        body = r.json()
        assert body["text"] == c["content"]
        assert (body["from"], body["to"]) == (c["from"], c["to"])
    whole = server.client.get(f"/api/doc/{quote(HOSTILE_NAME)}", params={"pack": "manuals"}).json()
    assert whole["text"] == HOSTILE_TEXT.strip()
    assert [s["title"] for s in whole["sections"] if s["level"] == 2] == ["Priming", "Seals"]


def test_api_inspect_and_packs(server: Server, packs: dict[str, Path]) -> None:
    packs_paths = packs
    packs = server.client.get("/api/packs").json()["packs"]
    assert [p["name"] for p in packs] == ["manuals", "strict"]
    assert all(p["verify"]["checked"] and p["dense"] for p in packs)
    info = server.client.get("/api/inspect", params={"pack": "strict"}).json()
    code, out = run("inspect", str(packs_paths["strict"]), "--json")
    assert code == 0
    want = json.loads(out)
    assert {k: info[k] for k in want} == want  # the keys and values of inspect --json
    assert info["search"]["max_distance"] == 0.0
    assert info["counts"]["documents"] == 3


# -- the pages -------------------------------------------------------------------------------
def test_search_page_shows_cited_results_with_terms_marked(server: Server) -> None:
    r = server.client.get("/", params={"q": "centrifugal pump", "mode": "bm25", "pack": "manuals"})
    assert r.status_code == 200
    html = r.text
    assert "<mark>centrifugal</mark>" in html
    assert "<mark>pump</mark>" in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    link = re.search(r'href="(/doc/[^"]+#hit)"', html)
    assert link is not None
    assert "pack=manuals" in link.group(1)
    assert "autofocus" in html


def test_did_you_mean_links_to_the_corrected_query(server: Server) -> None:
    html = server.client.get("/", params={"q": "centrifgal pump", "pack": "manuals"}).text
    assert "Did you mean" in html
    link = re.search(
        r'<p class="suggest">Did you mean <a href="([^"]+)">centrifugal pump</a>', html
    )
    assert link is not None
    fixed = server.client.get(link.group(1).replace("&amp;", "&")).text
    assert "<mark>centrifugal</mark>" in fixed


def test_nothing_from_a_document_becomes_markup(server: Server) -> None:
    pages = [
        server.client.get("/", params={"q": "prime the pump", "mode": "bm25"}).text,
        server.client.get("/", params={"q": "<script>alert(1)</script>"}).text,
        server.client.get(f"/doc/{quote(HOSTILE_NAME)}", params={"pack": "manuals"}).text,
    ]
    for html in pages:
        assert "<script" not in html.lower()
        assert "<img" not in html.lower()
        assert "&lt;img" in html or "&lt;script&gt;" in html
    assert "&#34;&gt;&lt;img src=x onerror=alert(1)&gt;.md" in pages[2]


def test_reader_highlights_the_cited_passage(server: Server, packs: dict[str, Path]) -> None:
    chunk = next(c for c in export(packs["manuals"], "chunks") if "mechanical" in c["content"])
    r = server.client.get(
        f"/doc/{quote(chunk['doc'])}",
        params={"pack": "manuals", "from": chunk["from"], "to": chunk["to"]},
    )
    assert r.status_code == 200
    marked = re.search(r"<mark id=hit>(.*?)</mark>", r.text, re.S)
    assert marked is not None
    import html as html_lib

    assert html_lib.unescape(marked.group(1)) == chunk["content"]
    assert 'href="#s' in r.text  # outline and breadcrumb link to section anchors
    assert "Seals</a>" in r.text.split("</nav>")[0]  # the breadcrumb names the section
    assert "Priming</a>" not in r.text.split("</nav>")[0]


def test_pdf_result_opens_its_page(server: Server, packs: dict[str, Path]) -> None:
    r = server.client.get(
        "/api/search",
        params={"q": "TableStyle", "mode": "bm25", "pack": "manuals", "type": "pdf", "k": 3},
    )
    results = r.json()["results"]
    assert results and all(x["doc"] == "tables.pdf" and x["page"] for x in results)
    hit = results[-1]
    assert hit["locator"].startswith(f"tables.pdf#page={hit['page']}&char=")
    page = server.client.get(
        "/doc/tables.pdf", params={"pack": "manuals", "from": hit["from"], "to": hit["to"]}
    ).text
    pages = server.client.get("/api/doc/tables.pdf", params={"pack": "manuals"}).json()["pages"]
    assert f"page {hit['page']} of {len(pages)}" in page
    this = next(p for p in pages if p["number"] == hit["page"])
    text = server.client.get("/api/doc/tables.pdf", params={"pack": "manuals"}).json()["text"]
    # the page view holds this page's text and not the whole document
    import html as html_lib

    body = html_lib.unescape(re.sub(r"<[^>]+>", "", page.split('<article class="text">')[1]))
    # a PDF's line breaks inside a paragraph read as spaces there (the JSON keeps the text as is)
    words = " ".join(text[this["from"] : this["to"]].split()[:30])
    assert words in " ".join(body.split())
    assert len(body) < len(text)


def test_refused_query_says_no_answer_and_offers_the_nearest(server: Server) -> None:
    q = {"q": "what colour is the sky", "pack": "strict", "mode": "dense"}
    html = server.client.get("/", params=q).text
    assert "No answer in this pack." in html
    assert "<ol" in html and 'class="result"' not in html
    anyway = re.search(r'href="(/\?[^"]*anyway=1[^"]*)"', html)
    assert anyway is not None
    shown = server.client.get(anyway.group(1).replace("&amp;", "&")).text
    assert 'class="result"' in shown and "Nearest passages" in shown
    api = server.client.get("/api/search", params=q).json()
    assert api["answered"] is False and api["results"] == []


def test_words_the_pack_never_mentions_are_said_on_the_page_and_in_the_api(
    server: Server,
) -> None:
    q = {"q": "how do I prime the pump with zorblax", "pack": "manuals", "mode": "bm25"}
    html = server.client.get("/", params=q).text
    assert "Not in this pack: zorblax" in html
    assert server.client.get("/api/search", params=q).json()["not_in_pack"] == ["zorblax"]


def test_every_response_carries_a_strict_csp(server: Server) -> None:
    for path in [
        "/",
        "/?q=pump",
        "/doc/boiler.md?pack=manuals",
        "/api/packs",
        "/nope",
        "/static/kbpack.css",
    ]:
        r = server.client.get(path)
        csp = r.headers["content-security-policy"]
        assert "default-src 'none'" in csp and "script-src" not in csp
        assert r.headers["x-content-type-options"] == "nosniff"


# -- what must not be reachable --------------------------------------------------------------
@pytest.mark.parametrize(
    "path",
    [
        "/doc/..%2f..%2fetc%2fpasswd",
        "/doc/../../etc/passwd",
        "/doc/%2e%2e/%2e%2e/etc/passwd",
        "/api/doc/..%2f..%2fetc%2fpasswd",
        "/static/",
        "/static/..%2f__init__.py",
        "/doc/",
    ],
)
def test_no_path_reaches_the_file_system(server: Server, path: str) -> None:
    r = server.client.get(path, params={"pack": "manuals"})
    assert r.status_code in (404, 400)
    assert "root:" not in r.text and "import" not in r.text


def test_foreign_host_header_is_refused_on_loopback(server: Server) -> None:
    r = server.client.get("/api/packs", headers={"host": "attacker.example"})
    assert r.status_code == 421


def test_concurrent_requests_agree_with_serial_ones(server: Server) -> None:
    queries = ["centrifugal pump", "relief valve", "TableStyle", "seal hours", "boiler pressure"]

    def ask(q: str) -> dict[str, Any]:
        r = server.client.get("/api/search", params={"q": q, "pack": "manuals"})
        assert r.status_code == 200
        return dict(r.json())

    want = {q: ask(q) for q in queries}
    got: list[tuple[str, dict[str, Any]]] = []
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            for j in range(6):
                q = queries[(i + j) % len(queries)]
                got.append((q, ask(q)))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors
    assert len(got) == 48
    for q, body in got:
        assert body == want[q]


# -- the token -------------------------------------------------------------------------------
def test_non_loopback_bind_requires_the_token(packs: dict[str, Path]) -> None:
    s = Server(str(packs["manuals"]), "--host", "0.0.0.0", "--no-verify")
    try:
        token = s.info["token"]
        assert token and len(token) >= 24
        assert s.info["url"].endswith(f"?token={token}")
        assert s.client.get("/api/packs").status_code == 401
        assert s.client.get("/").status_code == 401
        bad = s.client.get("/api/packs", headers={"authorization": "Bearer nope"})
        assert bad.status_code == 401
        ok = s.client.get("/api/packs", headers={"authorization": f"Bearer {token}"})
        assert ok.status_code == 200
        assert ok.json()["packs"][0]["verify"]["checked"] is False
        # a browser opens the printed URL: the token becomes a cookie and leaves the URL
        first = s.client.get("/", params={"token": token, "q": "pump"})
        assert first.status_code == 303
        assert first.headers["location"] == "/?q=pump"
        assert "HttpOnly" in first.headers["set-cookie"]
        assert s.client.get("/?q=pump").status_code == 200  # the client kept the cookie
    finally:
        assert s.stop() == 130


def test_a_given_token_is_used(packs: dict[str, Path]) -> None:
    s = Server(
        str(packs["manuals"]), "--host", "0.0.0.0", "--token", "s3cret-token-value", "--no-verify"
    )
    try:
        assert s.info["token"] == "s3cret-token-value"
        r = s.client.get("/api/packs", headers={"authorization": "Bearer s3cret-token-value"})
        assert r.status_code == 200
    finally:
        assert s.stop() == 130


# -- refusing to serve -----------------------------------------------------------------------
def test_a_damaged_pack_is_refused_unless_no_verify(packs: dict[str, Path], tmp_path: Path) -> None:
    bad = tmp_path / "bad.kbpack"
    data = bytearray(packs["manuals"].read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte in the middle: digests differ
    bad.write_bytes(bytes(data))
    r = subprocess.run(
        [sys.executable, "-m", "kbpack", "serve", str(bad), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 1
    assert f"{bad}: refused: verify found" in r.stderr
    assert "--no-verify" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1  # piped: no progress, the error alone


def test_a_port_in_use_is_a_usage_error(server: Server, packs: dict[str, Path]) -> None:
    code = subprocess.run(
        [
            sys.executable,
            "-m",
            "kbpack",
            "serve",
            str(packs["manuals"]),
            "--no-verify",
            "--port",
            str(server.info["port"]),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert code.returncode == 2
    assert "choose another --port" in code.stderr


# -- a real browser --------------------------------------------------------------------------
def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def test_in_headless_chromium(server: Server, packs: dict[str, Path], tmp_path: Path) -> None:
    """Type a query with the keyboard, read the results, open the reader at the passage."""
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="playwright is not installed (make install adds it)"
    )
    exe = chromium_path()
    if exe is None:
        pytest.skip("no chromium on PATH (.ci/run installs Debian's chromium when root)")
    chunk = next(
        c for c in export(packs["manuals"], "chunks") if c["content"] == "centrifugal pump"
    )
    problems: list[str] = []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=exe, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1000, "height": 700})
            page.on("dialog", lambda d: problems.append(f"dialog: {d.message}"))
            page.on("console", lambda m: problems.append(f"console: {m.text}"))
            page.on("requestfailed", lambda r: problems.append(f"failed: {r.url}"))
            page.goto(server.base + "/")
            assert page.evaluate("document.activeElement.id") == "q"  # focus starts in the box
            page.keyboard.type("centrifugal pump")
            page.select_option("select[name=mode]", "bm25")
            page.select_option("select[name=pack]", "manuals")
            page.focus("#q")
            with page.expect_navigation():
                page.keyboard.press("Enter")
            results = page.locator("li.result")
            assert results.count() >= 1
            first = results.nth(0)
            assert first.locator("mark").first.inner_text() in ("centrifugal", "pump")
            assert "&lt;" not in first.inner_text()  # escaped once, shown as text
            # Tab from the box reaches the first citation link
            page.focus("#q")
            for _ in range(12):
                page.keyboard.press("Tab")
                if page.evaluate("document.activeElement.className") == "cite":
                    break
            assert page.evaluate("document.activeElement.className") == "cite"
            page.screenshot(path=str(tmp_path / "results.png"))
            link = page.locator(f'a.cite[href*="from={chunk["from"]}&to={chunk["to"]}"]').first
            with page.expect_navigation():
                link.click()
            hit = page.locator("mark#hit")
            assert hit.inner_text() == chunk["content"]
            assert hit.is_visible() and hit_in_viewport(page)
            assert page.locator("nav.crumbs").inner_text().endswith("Priming")
            # the hostile document's script is text on the page, and never ran
            assert "<script>alert(1)</script>" in page.locator("article.text").inner_text()
            # a small screen: nothing wider than the viewport
            page.set_viewport_size({"width": 360, "height": 640})
            page.goto(server.base + "/?q=pump&mode=bm25&pack=manuals")
            assert page.evaluate("document.scrollingElement.scrollWidth") <= 360
        finally:
            browser.close()
    assert problems == []


def hit_in_viewport(page: Any) -> bool:
    box = page.locator("mark#hit").bounding_box()
    height = page.viewport_size["height"]
    return box is not None and 0 <= box["y"] < height


def test_the_page_names_the_signer(packs: dict[str, Path], tmp_path: Path) -> None:
    signed = tmp_path / "signed.kbpack"
    shutil.copy(packs["manuals"], signed)
    keys = tmp_path / "trusted"
    keys.mkdir()
    code, out = run("keygen", "-o", str(keys / "team"), "--json")
    assert code == 0
    key_id = json.loads(out)["key_id"]
    assert run("sign", str(signed), "--key", str(keys / "team.key"))[0] == 0
    (keys / "team.key").unlink()  # only the public key is trusted
    old = os.environ.get("KBPACK_TRUSTED_KEYS")
    os.environ["KBPACK_TRUSTED_KEYS"] = str(keys)
    try:
        s = Server(str(signed), "--no-verify")
        try:
            assert "not verified" in s.client.get("/").text
        finally:
            s.stop()
        s = Server(str(signed))
        try:
            html = s.client.get("/").text
            assert f"signed by {key_id}" in html
            sig = s.client.get("/api/packs").json()["packs"][0]["verify"]["signature"]
            assert sig["status"] == "valid" and sig["key_id"] == key_id
        finally:
            s.stop()
    finally:
        if old is None:
            os.environ.pop("KBPACK_TRUSTED_KEYS")
        else:
            os.environ["KBPACK_TRUSTED_KEYS"] = old
