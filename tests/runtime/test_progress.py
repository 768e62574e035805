"""Progress: on a terminal it moves at least every second and gives an ETA from tokens; piped
or --quiet it prints nothing; the build summary's peak memory counts the extraction worker."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

import kbpack.runtime.progress
from kbpack.cli.main import main
from kbpack.runtime.progress import Progress, duration


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def draws(stream: io.StringIO) -> list[str]:
    return [x.strip() for x in stream.getvalue().split("\r") if x.strip()]


def test_the_ticker_redraws_while_nothing_is_reported() -> None:
    term = Terminal()
    p = Progress(stream=term, tick_s=0.02)
    p.update("building", 1, 8, unit="documents")
    deadline = time.monotonic() + 30  # generous: only the count of redraws is asserted
    while len(draws(term)) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    p.done()
    assert len(draws(term)) >= 3 and all(
        d.startswith("building   1/8 documents") for d in draws(term)
    )
    assert term.getvalue().endswith("\r")  # the line is wiped at the end
    n = len(draws(term))
    time.sleep(0.1)
    assert len(draws(term)) == n  # the ticker stopped with done()


def test_eta_from_tokens_counts_down(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1000.0]  # the progress module's own clock, so a loaded machine cannot move it
    monkeypatch.setattr(
        kbpack.runtime.progress, "time", SimpleNamespace(monotonic=lambda: clock[0])
    )
    term = Terminal()
    p = Progress(stream=term, tick_s=3600)
    p.source_bytes_total = 1000
    p.building(1, 4, 250, chunks=0)
    p.embedding(texts=10, tokens=500)
    for _ in range(5):  # five decode batches of 50 tokens, one a second
        clock[0] += 1
        p.embedded(texts=1, tokens=50)
    p._last = 0.0  # past the redraw throttle (10 per second)
    p.embedded(texts=0, tokens=0)
    # inside the one call: half its texts' tokens are done, and the line says so
    assert "embedding 5/10 texts (250/500 tokens)" in draws(term)[-1]
    # left: 250 tokens of this call + 500 tokens per 250 bytes x 750 bytes, at 50 tokens/s
    assert "ETA ~35s" in draws(term)[-1], draws(term)[-1]
    for _ in range(5):
        clock[0] += 1
        p.embedded(texts=1, tokens=50)
    p._last = 0.0
    p.building(2, 4, 250, chunks=10)  # 500 tokens in 10 s, half the bytes read
    # the second document is read but none of its texts has gone to the model: the ratio is
    # still the first's, 500 tokens per 250 bytes, for the 750 bytes whose texts are to come
    last = draws(term)[-1]
    assert "10 chunks embedded (500 tokens)" in last and "ETA ~30s" in last, last
    p.done()


def test_eta_extrapolates_extracted_text_not_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A PDF holds few characters per byte, an HTML page many more markup than text: once
    the build says what it extracted, the tokens left follow the text, per file type."""
    clock = [1000.0]
    monkeypatch.setattr(
        kbpack.runtime.progress, "time", SimpleNamespace(monotonic=lambda: clock[0])
    )
    p = Progress(stream=Terminal(), tick_s=3600)
    p.source_bytes_total = 3000
    p.source_bytes_by_kind = {".pdf": 2000, ".html": 1000}
    p.extracted("a.pdf", 1000, 1000)  # 1 character per PDF byte
    p.extracted("b.html", 1000, 200)  # the page's text: 200 of its 1000 bytes
    p.building(1, 3, 1000, chunks=0, chars=1000)
    p.embedding(texts=10, tokens=250)  # 0.25 tokens per character
    for _ in range(5):  # 250 tokens in 5 s
        clock[0] += 1
        p.embedded(texts=2, tokens=50)
    # left: b.html's 200 characters and c.pdf's 1000 bytes x 1 per byte = 1200 characters
    # = 300 tokens, at 50 tokens/s (by bytes it would be 2000 bytes = 500 tokens: 10 s)
    assert p._eta() == pytest.approx(6.0)
    p.building(2, 3, 1000, chunks=3, chars=200)
    p.embedding(texts=2, tokens=50)
    p.embedded(texts=1, tokens=25, reused=True)  # from the cache: costs no model time
    clock[0] += 1
    p.embedded(texts=1, tokens=25)
    # the model read 275 of the 300 tokens announced for 1200 characters; 1000 are left
    assert p._eta() == pytest.approx(275 / 1200 * 1000 / (275 / 6), rel=0.01)
    p.done()


def test_a_builds_tokens_left_follow_its_text_not_its_bytes(
    tmp_path: Path, tiny_model: Path
) -> None:
    """A real build of a folder where one page is mostly markup: from the first embedding
    call on, the tokens the line expects are within 15% of those the model then reads (by
    source bytes the markup page alone would promise several times the build's tokens)."""
    from kbpack.ops.build import BuildOptions, build

    src = tmp_path / "docs"
    src.mkdir()

    def prose(name: str) -> str:  # distinct sentences (a block shared by all would be furniture)
        return " ".join(f"Step {i} of {name} keeps batch {i * 7} on disk." for i in range(60))

    (src / "a.md").write_text("# Alpha\n\n" + prose("alpha"))
    markup = "<div class='nav x y z'><span style='color:red'></span></div>\n" * 2000
    (src / "b.html").write_text(
        f"<html><body>{markup}<h1>Beta</h1><p>{prose('beta')}</p>{markup}</body></html>"
    )
    (src / "c.md").write_text("# Gamma\n\n" + prose("gamma"))
    seen: list[tuple[float | None, int]] = []  # (tokens expected, tokens of this call)

    class Watching(Progress):
        def embedding(self, texts: int, tokens: int) -> None:
            super().embedding(texts, tokens)
            seen.append((self.tokens_left(), tokens))

    build(
        BuildOptions(sources=[src], out=tmp_path / "p.kbpack", model=tiny_model, pieces=True),
        Watching(stream=Terminal(), tick_s=3600),
    )
    assert len(seen) >= 3, seen  # one call per document at least
    for k, (expected, _) in enumerate(seen):
        actual = sum(tokens for _, tokens in seen[k:])
        assert expected == pytest.approx(actual, rel=0.15), (k, seen)


def test_the_eta_follows_the_recent_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    """A build that slows down (longer texts, a busier machine) gets a longer ETA within
    a minute, instead of the whole run's average."""
    clock = [1000.0]
    monkeypatch.setattr(
        kbpack.runtime.progress, "time", SimpleNamespace(monotonic=lambda: clock[0])
    )
    p = Progress(stream=Terminal(), tick_s=3600)
    p.embedding(texts=1000, tokens=100_000)
    for _ in range(100):  # 100 tokens/s for 100 s
        clock[0] += 1
        p.embedded(texts=1, tokens=100)
    assert p.rate() == pytest.approx(100)
    for _ in range(120):  # then 10 tokens/s
        clock[0] += 1
        p.embedded(texts=1, tokens=10)
    assert p.rate() == pytest.approx(10, rel=0.05)
    p.done()


def test_tokens_from_the_cache_do_not_count_as_speed() -> None:
    p = Progress(stream=Terminal(), tick_s=3600)
    p.embedding(texts=10, tokens=1000)
    p._last = 0.0  # past the redraw throttle
    p.embedded(texts=10, tokens=1000, reused=True)
    assert p.rate() is None and "embedding 10/10 texts (1000/1000 tokens)" in p._line
    p.done()


def test_disabled_progress_writes_nothing() -> None:
    stream = io.StringIO()  # not a TTY: a pipe or a file
    p = Progress(stream=stream)
    p.update("building", 1, 2)
    p.embedding(3, 30)
    p.building(2, 2, 10, 3)
    p.done()
    assert stream.getvalue() == "" and p._ticker is None


def test_duration() -> None:
    assert [duration(s) for s in (0, 59.4, 61, 3599, 3720)] == [
        "0s",
        "59s",
        "1m01s",
        "59m59s",
        "1h02m",
    ]


def test_piped_build_is_quiet_and_reports_the_worker(
    capfd: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.md").write_text("# A\n\nsome text to index\n")
    out = tmp_path / "a.kbpack"
    with pytest.raises(SystemExit) as e:
        main(["build", str(src), "-o", str(out), "--no-vectors", "--json"])
    stdout, stderr = capfd.readouterr()
    assert e.value.code == 0 and stderr == ""  # stderr is not a terminal here: no progress
    report = json.loads(stdout)
    assert report["peak_rss_mb"] > 0 and report["peak_rss_workers_mb"] > 0


def _stderr_on_a_terminal(args: list[str]) -> tuple[int, str]:
    """Run kbpack with stderr on a pseudo-terminal (stdout piped); what the terminal got."""
    import os
    import pty
    import subprocess
    import sys

    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "kbpack", *args],
        stdout=subprocess.DEVNULL,
        stderr=slave,
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return proc.wait(timeout=120), b"".join(chunks).decode(errors="replace")


def test_progress_shows_on_a_terminal_unless_quiet(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.md").write_text("# A\n\nsome text to index\n")
    out = tmp_path / "a.kbpack"
    code, shown = _stderr_on_a_terminal(["build", str(src), "-o", str(out), "--no-vectors"])
    assert code == 0 and "building   1/1 documents" in shown
    queries = tmp_path / "q.txt"
    queries.write_text("index\ntext\n")
    batch = ["query", str(out), "--batch", str(queries), "--mode", "bm25"]
    code, shown = _stderr_on_a_terminal(batch)
    assert code == 0 and "lines  0 failed" in shown and shown.startswith("\rqueries ")
    code, shown = _stderr_on_a_terminal([*batch, "--quiet"])
    assert code == 0 and shown == ""
