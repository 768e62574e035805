"""discover() over real folder trees, and extract_all() in its worker process: same results
as in-process extraction, in order, and a parser that hangs is stopped and recorded."""

from __future__ import annotations

import hashlib
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from kbpack.errors import UsageError
from kbpack.extract import Candidate, Limits, discover, extract_all, extract_file
from tests.paths import REPO_ROOT

ROOT = REPO_ROOT / "fixtures"


def write(path: Path, data: bytes | str = "text\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    write(root / "b.md", "# B\n")
    write(root / "a.txt")
    write(root / "sub" / "deep" / "c.html", "<h1>C</h1>")
    write(root / "sub" / "image.png", b"\x89PNG")
    write(root / ".hidden.md")
    write(root / ".git" / "config.txt")
    write(root / "sub" / "notes.log", "log\n")
    outside = write(tmp_path / "outside" / "secret.md", "# secret\n")
    os.symlink(outside, root / "link-out.md")
    os.symlink(root / "b.md", root / "link-in.md")
    os.symlink(outside.parent, root / "dir-out")
    os.symlink(tmp_path / "missing.md", root / "broken.md")
    return root


def test_discover_walks_sorted_skips_hidden_and_records_the_rest(tree: Path) -> None:
    found = discover([tree])
    candidates, skipped = found.candidates, found.records
    assert [(c.name, c.kind) for c in candidates] == [
        ("a.txt", "txt"),
        ("b.md", "md"),
        ("sub/deep/c.html", "html"),
    ]
    # link-in.md points at b.md, which is read once under its own name.
    assert {d.name: d.reason for d in skipped} == {
        "broken.md": "broken symlink",
        "dir-out": "symlinked folder outside the input; --follow-symlinks reads it",
        "link-out.md": "symlink to a file outside the input; --follow-symlinks reads it",
        "sub/image.png": "unsupported type .png",
        "sub/notes.log": "unsupported type .log",
    }
    assert all(d.status == "skipped" for d in skipped)
    png = next(d for d in skipped if d.name == "sub/image.png")
    assert png.source_sha256 == hashlib.sha256(b"\x89PNG").hexdigest()
    broken = next(d for d in skipped if d.name == "broken.md")
    assert broken.source_sha256 == ""  # nothing to read


def test_discover_globs_and_single_files(tree: Path) -> None:
    found = discover([tree], include=["*.md", "*.html"], exclude=["sub/*", "link-*"])
    assert [c.name for c in found.candidates] == ["b.md"]
    # the filters' choices are counted, not recorded: a.txt, sub/* (3), link-* (2); the
    # folder link is no file for --include to judge
    assert {d.name for d in found.records} == {"broken.md", "dir-out"}
    assert found.filtered == 6
    single = discover([tree / "sub" / "deep" / "c.html"])
    assert single.candidates == [Candidate(tree / "sub" / "deep" / "c.html", "c.html", "html")]
    assert single.records == []


def test_discover_errors_name_the_path(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as missing:
        discover([tmp_path / "nope"])
    assert str(missing.value) == f"{tmp_path / 'nope'}: no such file or folder; check the path"
    write(tmp_path / "one" / "x.md")
    write(tmp_path / "two" / "x.md")
    with pytest.raises(UsageError, match=r"^x\.md: comes from both .*one/x\.md and .*two/x\.md"):
        discover([tmp_path / "one", tmp_path / "two"])


def test_extract_all_matches_in_process_extraction_in_order() -> None:
    candidates = discover([ROOT / "hostile", ROOT / "docs" / "sqlite"]).candidates
    assert len(candidates) > 15
    in_worker = list(extract_all(candidates))
    assert [d.name for d in in_worker] == [c.name for c in candidates]
    for candidate, doc in zip(candidates, in_worker, strict=True):
        local = extract_file(candidate.path, candidate.name)
        assert (doc.status, doc.stage, doc.reason) == (local.status, local.stage, local.reason)
        assert (doc.text, doc.sections, doc.pages) == (local.text, local.sections, local.pages)
        assert doc.source_sha256 == local.source_sha256


def test_extract_all_of_nothing_starts_no_worker() -> None:
    assert list(extract_all([])) == []


def _slow_pdf(path: Path, pages: int) -> Path:
    """A real, valid PDF of ``pages`` pages that all draw one shared content stream of 120
    lines: seconds of CPU to extract, in a small file (a stand-in for a pathological
    document)."""
    content = b"BT /F1 5 Tf 6 TL 40 760 Td " + b"(some words on a line) ' " * 120 + b"ET"
    kids = b" ".join(b"%d 0 R" % (6 + i) for i in range(pages))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, pages),
        b"<< >>",  # unused
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content),
    ]
    objects += [
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 5 0 R "
        b"/Resources << /Font << /F1 4 0 R >> >> >>"
    ] * pages
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    n = len(objects) + 1
    out += b"xref\n0 %d\n0000000000 65535 f \n" % n
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (n, xref)
    path.write_bytes(bytes(out))
    return path


def test_a_hanging_parser_is_stopped_and_the_next_document_still_extracts(
    tmp_path: Path,
) -> None:
    slow = _slow_pdf(tmp_path / "slow.pdf", 2000)
    fine = ROOT / "docs" / "pypdf" / "README.md"
    candidates = [
        Candidate(slow, "slow.pdf", "pdf"),
        Candidate(fine, "README.md", "md"),
        Candidate(slow, "slow-again.pdf", "pdf"),
    ]
    docs = list(extract_all(candidates, Limits(timeout_s=0.5)))
    assert [d.name for d in docs] == ["slow.pdf", "README.md", "slow-again.pdf"]
    for doc in (docs[0], docs[2]):
        assert (doc.status, doc.stage) == ("failed", "timeout")
        assert doc.reason == (
            "extraction did not finish within 0.5 s of CPU time and was stopped; raise the "
            "time limit (--timeout) if the file is genuine"
        )
        assert doc.source_sha256 == hashlib.sha256(slow.read_bytes()).hexdigest()
    assert docs[1].status == "ok" and docs[1].title == "pypdf"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_a_worker_kept_off_the_cpu_is_not_timed_out(tmp_path: Path) -> None:
    """The limit counts the worker's CPU time: a worker that the machine gives no CPU for
    longer than the limit (here: stopped with SIGSTOP for 2 s, as on a heavily loaded machine)
    still extracts a genuine document."""
    from kbpack.extract.worker import _Worker

    fine = ROOT / "docs" / "pypdf" / "README.md"
    limits = Limits(timeout_s=0.5)
    worker = _Worker(limits)
    try:
        worker.send(Candidate(fine, "README.md", "md"), limits)
        os.kill(worker.process.pid, signal.SIGSTOP)
        resumed = threading.Event()

        def resume_worker() -> None:
            resumed.set()  # before SIGCONT: a stopped worker cannot answer until then
            os.kill(worker.process.pid, signal.SIGCONT)

        resume = threading.Timer(2.0, resume_worker)
        resume.start()
        doc = worker.wait(limits.timeout_s)
        assert resumed.is_set()  # it waited out the stop (no clock compared: that was flaky)
        resume.join()
        assert not isinstance(doc, str) and doc.status == "ok" and doc.title == "pypdf"
    finally:
        worker.stop()


def _worker_children() -> list[int]:
    """Live child processes of this test process running the extraction worker (Linux)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:"))
        if int(ppid) == os.getpid() and b"kbpack.extract.worker" in command:
            found.append(int(entry.name))
    return found


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
def test_abandoning_extract_all_stops_the_worker() -> None:
    candidates = discover([ROOT / "docs" / "sqlite"]).candidates
    documents = extract_all(candidates)
    assert next(documents).status == "ok"
    assert len(_worker_children()) == 1
    documents.close()  # a caller that stops early (Ctrl-C, error) leaves no worker behind
    assert _worker_children() == []


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
def test_a_worker_that_dies_costs_one_document(tmp_path: Path) -> None:
    """SIGKILL the worker while it is deep in a document (as the kernel's OOM killer would):
    that document is failed with stage 'crash', and a new worker extracts the next one."""
    slow = _slow_pdf(tmp_path / "slow.pdf", 2000)
    fine = ROOT / "docs" / "pypdf" / "README.md"
    killed: list[int] = []

    def kill_when_busy() -> None:
        for _ in range(1200):  # at most about two minutes
            for pid in _worker_children():
                # Start-up costs well under a CPU second; the slow PDF costs many.
                if _cpu_seconds(pid) >= 1.5:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                    return
            time.sleep(0.1)

    killer = threading.Thread(target=kill_when_busy)
    killer.start()
    candidates = [Candidate(slow, "slow.pdf", "pdf"), Candidate(fine, "README.md", "md")]
    docs = list(extract_all(candidates, Limits(timeout_s=600)))
    killer.join()
    assert killed
    assert (docs[0].status, docs[0].stage) == ("failed", "crash")
    assert docs[0].reason == (
        "the extractor process died (killed by SIGKILL); the file may be hostile"
    )
    assert docs[1].status == "ok" and docs[1].name == "README.md"
