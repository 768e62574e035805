"""The README's screenshots of ``kbpack serve``: the results page and the reader, taken by
headless Chromium (Debian's, driven by playwright) from the fixtures pack.

    kbpack build fixtures/docs -o out/fixtures.kbpack     # (make demo does this)
    python docs/make_screenshots.py                        # writes docs/serve*.png
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[1]
PACK = ROOT / "out" / "fixtures.kbpack"
QUERY = "How do I draw a grid of lines in a table?"


def main() -> int:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None or not PACK.exists():
        sys.exit("needs chromium on PATH and out/fixtures.kbpack (make demo)")
    server = subprocess.Popen(
        [sys.executable, "-m", "kbpack", "serve", str(PACK), "--port", "0", "--json"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        base = json.loads(server.stdout.readline())["url"].rstrip("/")
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=exe, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1100, "height": 820})
            page.goto(base + "/")
            page.keyboard.type(QUERY)
            with page.expect_navigation():
                page.keyboard.press("Enter")
            page.screenshot(path=str(ROOT / "docs" / "serve.png"))
            with page.expect_navigation():
                page.locator("a.cite").first.click()
            page.screenshot(path=str(ROOT / "docs" / "serve-reader.png"))
            browser.close()
    finally:
        server.send_signal(2)
        server.wait(timeout=30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
