"""Issue 30, item 4: no control byte from a pack or a file name reaches a terminal.

A file named ``bad\\x1b]0;OWNED\\x07\\x1b[2J.md`` retitled the window and cleared the screen
through ``query --format prompt``, ``diff``, ``inspect``, the build summary and ``merge``'s
error. Here files whose names and text hold ESC, BEL, CSI, OSC, C1 controls and bidi
overrides go through every command that prints text for a person, as a child process (the
build under a pseudo-terminal, so that its progress lines run too), and each output must hold
none of them raw; ``--json`` keeps the exact strings (escaped by JSON).
"""

from __future__ import annotations

import json
import os
import pty
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

OSC_TITLE = "\x1b]0;OWNED\x07"
CLEAR = "\x1b[2J"
NAMES = [
    f"bad{OSC_TITLE}{CLEAR}.md",  # the name
    "c1\x9bcsi.md",  # a one-byte CSI (C1)
    "evil\u202egnp.md",  # a right-to-left override: shows as 'evilmd.png'
    "iso\u2066late\u2069.md",
    "bell\x07\x7f.md",
]
FAILED = f"broken{CLEAR}\u202e.pdf"  # not a PDF: a failed document, listed by name
TEXT = (
    f"# Pump {OSC_TITLE}\n\nThe pump seal alarm {CLEAR}is cleared\x9b31m by holding reset"
    " \u202eesrever\u202c.\x07\x1b[0m\n"
)

# what may reach a terminal: printable text, newline and tab (no CR: progress lines are
# checked apart)
BAD = {*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F, *range(0x80, 0xA0)}
BAD |= {0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)}


def raw_controls(out: bytes, allow: str = "") -> list[str]:
    """The control and bidi characters in ``out`` (UTF-8: a lone C1 byte fails to decode)."""
    text = out.decode("utf-8")
    return sorted({f"U+{ord(c):04X}" for c in text if ord(c) in BAD and c not in allow})


def env(cache: Path) -> dict[str, str]:
    return {"KBPACK_CACHE_DIR": str(cache), "PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"}


def kb(*args: str, cache: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "kbpack", *args], capture_output=True, timeout=300, env=env(cache)
    )


def clean(r: subprocess.CompletedProcess[bytes]) -> None:
    for stream in (r.stdout, r.stderr):
        assert raw_controls(stream) == [], stream.decode()[-3000:]


@pytest.fixture(scope="module")
def packs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("escapes")
    plain, hostile = root / "plain", root / "hostile"
    plain.mkdir()
    (plain / "ok.md").write_text("# Ok\n\nThe pump seal alarm is cleared by holding reset.\n")
    shutil.copytree(plain, hostile)
    for i, name in enumerate(NAMES):
        # one paragraph per file (not copies, and not a block repeated across the folder,
        # which a build drops as a banner: kbpack/extract/repeated.py)
        (hostile / name).write_text(f"{TEXT.rstrip()} Valve {i} of the pump.\n")
    (hostile / FAILED).write_bytes(b"not a pdf at all")
    return {"root": root, "plain": plain, "src": hostile, "cache": root / "cache"}


def test_every_human_output_escapes_controls(packs: dict[str, Path]) -> None:
    root, cache = packs["root"], packs["cache"]
    old, new = root / "old.kbpack", root / "new.kbpack"
    r = kb("build", str(packs["plain"]), "-o", str(old), "--no-vectors", cache=cache)
    assert r.returncode == 0, r.stderr
    r = kb("build", str(packs["src"]), "-o", str(new), "--no-vectors", cache=cache)
    assert r.returncode == 0, r.stderr
    clean(r)
    assert b"broken\\x1b[2J\\u202e.pdf" in r.stdout  # escaped, visibly
    twin = shutil.copyfile(new, root / "twin.kbpack")  # every name in both: merge refuses
    for args in (
        ("update", str(new), str(packs["src"]), "-o", str(root / "up.kbpack"), "--no-vectors"),
        ("query", str(new), "--", "pump seal alarm"),
        ("query", str(new), "--full", "--", "pump seal alarm"),
        ("query", str(new), "--format", "prompt", "--", "pump seal alarm"),
        ("inspect", str(new)),
        ("diff", str(old), str(new)),
        ("verify", str(new)),
        ("export", str(new)),
        ("export", str(new), "--what", "documents"),
        ("merge", str(new), str(twin), "-o", str(root / "m.kbpack")),  # duplicate names
        ("query", str(root / f"no{CLEAR}such\u202e.kbpack"), "--", "x"),  # kbpack's error
        ("inspect", str(root / f"no{OSC_TITLE}such.kbpack")),  # click's error
    ):
        r = kb(*args, cache=cache)
        assert "Traceback" not in r.stderr.decode(), (args, r.stderr)
        clean(r)
    q = kb("query", str(new), "--format", "prompt", "--", "pump seal alarm", cache=cache)
    assert q.returncode == 0 and b"\\x1b]0;OWNED\\x07" in q.stdout  # the text, escaped
    m = kb("merge", str(new), str(twin), "-o", str(root / "m.kbpack"), cache=cache)
    assert m.returncode != 0 and b"bad\\x1b]0;OWNED" in m.stderr, m.stderr


def test_json_keeps_the_exact_strings(packs: dict[str, Path]) -> None:
    cache, new = packs["cache"], packs["root"] / "j.kbpack"
    r = kb("build", str(packs["src"]), "-o", str(new), "--no-vectors", "--json", cache=cache)
    assert r.returncode == 0
    clean(r)  # JSON escapes C0 itself; DEL, C1 and bidi are written as \\u escapes
    assert [f["name"] for f in json.loads(r.stdout)["failed"]] == [FAILED]
    r = kb("query", str(new), "--json", "-k", "10", "--", "pump seal alarm", cache=cache)
    clean(r)
    results = json.loads(r.stdout)["results"]
    also = {a.rsplit("#char=", 1)[0] for x in results for a in x["also"]}  # copies fold
    assert {x["doc"] for x in results} | also >= set(NAMES)
    assert all(x["content"].startswith(TEXT.rstrip("\n")) for x in results if x["doc"] in NAMES)
    r = kb("export", str(new), "--what", "documents", cache=cache)
    clean(r)
    names = {json.loads(line)["name"] for line in r.stdout.decode().splitlines()}
    assert names >= {*NAMES, FAILED}


def test_the_build_under_a_terminal_shows_progress_without_raw_controls(
    packs: dict[str, Path],
) -> None:
    """On a terminal the build draws progress lines ("\\r" redraws): they pass through the same
    escaping; only the carriage returns of the redraw itself remain."""
    main, child = pty.openpty()
    out = packs["root"] / "tty.kbpack"
    p = subprocess.Popen(
        [sys.executable, "-m", "kbpack", "build", str(packs["src"]), "-o", str(out),
         "--no-vectors"],
        stdin=child, stdout=child, stderr=child, env=env(packs["cache"]),
    )  # fmt: skip
    os.close(child)
    seen = b""
    while True:
        try:
            data = os.read(main, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        seen += data
    assert p.wait(timeout=300) == 0, seen.decode()[-2000:]
    os.close(main)
    assert b"broken\\x1b[2J" in seen
    assert raw_controls(seen, allow="\r") == [], seen.decode()[-3000:]
