"""The reader in a real browser (issue 33): Debian's headless Chromium follows a link of an HTML
manual to the place in another document it leads to, reads a code block as code, and sees the
refused page and the page of a damaged pack. Every view is saved as a screenshot in a folder
the test prints (``$KBPACK_SCREENSHOTS`` when set, else under pytest's tmp path)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_run import run

pytest.importorskip("starlette", reason="the serve extra is not installed")
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed (make install adds it)"
)

from test_serve import Server, chromium_path  # noqa: E402

INDEX = """<html><head><title>Pump manual</title></head><body>
<h1>Pump manual</h1>
<p>Read the <a href="sub/seals.html#replace">seal replacement steps</a> before you start, and
the <a href="#priming">priming section</a> below. The vendor's site,
<a href="https://example.com/">example.com</a>, is not part of the pack.</p>
<h2 id="priming">Priming</h2>
<p>Open the bleed valve and prime the pump until water flows.</p>
<pre>
valve open --bleed
pump prime --until water
</pre>
<p>Then close the bleed valve.</p>
</body></html>
"""
FILLER = "".join(
    f"<p>Gasket note {i}: inspect the o-ring seat and the flange faces for scoring.</p>\n"
    for i in range(60)
)
SEALS = f"""<html><head><title>Seals</title></head><body>
<h1>Seals</h1>
<p>Seals wear out. Go <a href="../index.html">back to the manual</a>.</p>
{FILLER}
<h2><a name="replace"></a>Replacing a seal</h2>
<p>Replace the mechanical seal every 4000 hours of operation.</p>
</body></html>
"""


@pytest.fixture(scope="module")
def packs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    src = tmp_path_factory.mktemp("manual")
    (src / "sub").mkdir()
    (src / "index.html").write_text(INDEX)
    (src / "sub" / "seals.html").write_text(SEALS)
    out = tmp_path_factory.mktemp("reader-packs")
    manual = out / "manual.kbpack"
    code, _, err = run("build", str(src), "-o", str(manual), "--no-vectors", "-q")
    assert code == 0, err
    # a copy with one bit flipped in a document's canonical text (HDF5's global heap, where
    # no checksum filter reaches): only reading that text finds it
    damaged = out / "damaged.kbpack"
    data = bytearray(manual.read_bytes())
    at = data.find(b"Replace the mechanical seal every 4000 hours")
    assert at > 0
    data[at + 8] ^= 0x04
    damaged.write_bytes(bytes(data))
    return {"manual": manual, "damaged": damaged}


@pytest.fixture(scope="module")
def server(packs: dict[str, Path]) -> Iterator[Server]:
    # --no-verify: with the check at start, serve refuses the damaged pack outright
    s = Server(str(packs["manual"]), str(packs["damaged"]), "--no-verify")
    yield s
    assert s.stop() == 130


@pytest.fixture(scope="module")
def shots_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = Path(os.environ.get("KBPACK_SCREENSHOTS") or tmp_path_factory.mktemp("screenshots"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def shots(shots_dir: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    with capsys.disabled():
        print(f"\nreader screenshots: {shots_dir}")
    return shots_dir


@pytest.fixture
def page(server: Server) -> Iterator[Any]:
    exe = chromium_path()
    if exe is None:
        pytest.skip("no chromium on PATH (make chromium installs Debian's chromium when root)")
    problems: list[str] = []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=exe, args=["--no-sandbox"])
        try:
            p = browser.new_page(viewport={"width": 1000, "height": 700})
            p.on("dialog", lambda d: problems.append(f"dialog: {d.message}"))
            p.on("console", lambda m: problems.append(f"console: {m.text}"))
            yield p
        finally:
            browser.close()
    # the damaged pack's page answers 500 on purpose: the browser logs that one load
    assert [m for m in problems if "status of 500" not in m] == []


def text_after(page: Any, selector: str, n: int) -> str:
    """The first ``n`` characters of the reader's text after the element ``selector``."""
    return str(
        page.evaluate(
            """([sel, n]) => { const r = document.createRange();
               r.setStartAfter(document.querySelector(sel));
               r.setEndAfter(document.querySelector('article.text'));
               return r.toString().slice(0, n); }""",
            [selector, n],
        )
    )


def in_viewport(page: Any, selector: str) -> bool:
    box = page.locator(selector).bounding_box()
    return box is not None and 0 <= box["y"] < page.viewport_size["height"]


def test_a_link_of_the_manual_leads_to_its_place_in_another_document(
    server: Server, page: Any, shots: Path
) -> None:
    page.goto(server.base + "/doc/index.html?pack=manual")
    links = page.locator("article.text a.xref")
    assert links.all_inner_texts() == ["seal replacement steps", "priming section"]
    assert "example.com" not in " ".join(links.all_inner_texts())  # another site: text only
    page.screenshot(path=str(shots / "reader-links.png"), full_page=True)
    with page.expect_navigation():
        links.nth(0).click()
    assert "/doc/sub/seals.html" in page.url and "at=" in page.url
    assert page.locator("h1").inner_text() == "Seals"
    # the place the link leads to is the anchored heading, scrolled into view
    assert text_after(page, "#at", 16) == "Replacing a seal"
    assert in_viewport(page, "#at")
    assert page.evaluate("window.scrollY") > 0  # the heading is far down the page
    page.screenshot(path=str(shots / "link-followed.png"))
    # and back: a link to a document without a fragment opens it at its start
    with page.expect_navigation():
        page.locator("a.xref", has_text="back to the manual").click()
    assert page.locator("h1").inner_text() == "Pump manual"
    # a link to a place further down the same page
    with page.expect_navigation():
        page.locator("a.xref", has_text="priming section").click()
    assert text_after(page, "#at", 7) == "Priming"


def test_a_code_block_reads_as_code(server: Server, page: Any, shots: Path) -> None:
    page.goto(server.base + "/doc/index.html?pack=manual")
    code = page.locator("article.text code.block")
    assert code.count() == 1
    assert code.inner_text().strip() == "valve open --bleed\npump prime --until water"
    font = page.evaluate(
        "getComputedStyle(document.querySelector('article.text code.block')).fontFamily"
    )
    assert "monospace" in font
    assert "```" not in page.locator("article.text").inner_text()  # the fences are not shown
    code.scroll_into_view_if_needed()
    page.screenshot(path=str(shots / "code-block.png"))


def test_the_refused_page_reads_as_sentences(server: Server, page: Any, shots: Path) -> None:
    page.goto(server.base + "/?q=zorblax+quux&mode=bm25&pack=manual")
    refused = page.locator("p.refused")
    assert refused.is_visible()
    lines = [line.strip() for line in refused.inner_text().splitlines() if line.strip()]
    assert lines[0].startswith("No answer in this pack.")
    assert lines[-1] == "Show the nearest passages anyway"  # a line of its own, not glued on
    page.screenshot(path=str(shots / "refused.png"))
    with page.expect_navigation():
        refused.locator("a").click()
    assert "anyway=1" in page.url


def test_a_damaged_pack_gets_a_page_saying_what_is_wrong_and_what_to_do(
    server: Server, packs: dict[str, Path], page: Any, shots: Path
) -> None:
    response = page.goto(server.base + "/doc/sub/seals.html?pack=damaged")
    assert response is not None and response.status == 500
    assert page.locator("h1").inner_text() == "This pack is damaged"
    body = page.locator("section.damaged").inner_text()
    assert "/documents/text is damaged" in body
    assert f"kbpack verify {packs['damaged']}" in body
    assert "--no-verify" in body  # why this server showed it at all
    assert "Traceback" not in page.content()
    # the sound pack is still served, one link away
    page.screenshot(path=str(shots / "damaged.png"), full_page=True)
    with page.expect_navigation():
        page.locator("section.damaged a", has_text="manual").click()
    assert page.locator("form.search").is_visible()


def test_a_changed_file_that_fails_its_check_is_said_on_every_page(
    packs: dict[str, Path], page: Any, shots: Path, tmp_path: Path
) -> None:
    served = tmp_path / "changing.kbpack"
    shutil.copyfile(packs["manual"], served)
    s = Server(str(served))  # checked at start (bytes, signature, structure)
    try:
        page.goto(s.base + "/")
        assert page.locator("section.changed").count() == 0
        swap = tmp_path / "swap.kbpack"
        shutil.copyfile(packs["damaged"], swap)
        os.replace(swap, served)  # a new file at the path, one bit off
        for _ in range(600):  # the new file is checked in the background: ask until it is done
            page.goto(s.base + "/")
            if page.locator("section.changed").count():
                break
            page.wait_for_timeout(100)
        note = page.locator("section.changed")
        assert note.is_visible()
        text = note.inner_text()
        assert "changed and the new file failed its check" in text
        assert "differs" in text or "SHA-256" in text  # what is wrong, in verify's words
        assert f"kbpack verify {served}" in text
        page.screenshot(path=str(shots / "changed-refused.png"))
        # the checked file is still what is served
        page.goto(s.base + "/doc/sub/seals.html?pack=changing")
        assert "Replace the mechanical seal" in page.locator("article.text").inner_text()
    finally:
        assert s.stop() == 130


def test_screenshots_were_written(shots: Path) -> None:
    """Run last (file order): every view above left its picture in the one folder printed."""
    if chromium_path() is None:
        pytest.skip("no chromium on PATH")
    names = {p.name for p in shots.iterdir() if p.stat().st_size > 0}
    want = {"reader-links.png", "link-followed.png", "code-block.png", "refused.png", "damaged.png"}
    want.add("changed-refused.png")
    assert want <= names
