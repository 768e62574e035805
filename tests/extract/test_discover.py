"""Real-world trees: symlinks in and out of the tree, loops, unreadable folders, compressed
documents, filters that are not documents, and builds that yield nothing."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from cli_run import run

from kbpack.errors import UsageError
from kbpack.extract import Limits, discover, extract_file

PAGE = "<html><body><h1>Guide</h1><p>The frobnicator resets the widget.</p></body></html>"


def write(path: Path, data: bytes | str = "text\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


@pytest.fixture
def debian_like(tmp_path: Path) -> Path:
    """Debian's layout: a doc folder of links to files elsewhere, and a link to a folder."""
    real = tmp_path / "usr" / "share" / "R" / "doc" / "manual"
    write(real / "R-intro.html", PAGE)
    write(real / "R-admin.html", PAGE.replace("Guide", "Admin"))
    shelf = tmp_path / "usr" / "share" / "doc" / "r-doc-html" / "manual"
    shelf.mkdir(parents=True)
    for name in ("R-intro.html", "R-admin.html"):
        os.symlink(Path("../../../R/doc/manual") / name, shelf / name)
    write(tmp_path / "usr" / "share" / "devref" / "index.html", PAGE.replace("Guide", "Dev"))
    os.symlink(tmp_path / "usr" / "share" / "devref", shelf / "docs")
    return shelf


def test_links_out_of_the_input_are_skipped_and_counted(debian_like: Path) -> None:
    found = discover([debian_like])
    assert found.candidates == []
    reasons = {d.name: d.reason for d in found.records}
    assert reasons == {
        "R-admin.html": "symlink to a file outside the input; --follow-symlinks reads it",
        "R-intro.html": "symlink to a file outside the input; --follow-symlinks reads it",
        "docs": "symlinked folder outside the input; --follow-symlinks reads it",
    }
    assert found.links_not_followed == 3 and found.links_followed == 0
    assert all(d.source_sha256 == "" for d in found.records)  # the targets were never read


def test_links_into_another_input_root_are_read(debian_like: Path) -> None:
    real = (debian_like / "R-intro.html").resolve().parent
    found = discover([debian_like, real])
    # each file read once (the same real file reached twice is read once)
    assert [c.name for c in found.candidates] == ["R-admin.html", "R-intro.html"]
    assert all(c.note == "" for c in found.candidates)
    assert [d.name for d in found.records] == ["docs"] and found.links_not_followed == 1


def test_follow_symlinks_reads_files_out_of_the_tree_with_a_note(debian_like: Path) -> None:
    found = discover([debian_like], follow_symlinks=True)
    target = (debian_like / "R-intro.html").resolve()
    assert found.candidates[1].note == f"read through a symlink to {target}, outside the input"
    assert found.links_followed == 2


def test_follow_symlinks_reads_linked_folders(debian_like: Path) -> None:
    found = discover([debian_like], follow_symlinks=True)
    assert [c.name for c in found.candidates] == ["R-admin.html", "R-intro.html", "docs/index.html"]
    assert found.records == [] and found.links_not_followed == 0


def test_loops_are_records_never_an_abort(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    write(root / "a.md", "# A\n")
    write(root / "sub" / "b.md", "# B\n")
    os.symlink(root, root / "sub" / "up")  # a folder link back to an ancestor
    os.symlink(root / "x.md", root / "y.md")  # x -> y -> x: never reaches a file
    os.symlink(root / "y.md", root / "x.md")
    outside = tmp_path / "outside"
    write(outside / "c.md", "# C\n")
    os.symlink(outside, root / "out")
    os.symlink(root, outside / "back")  # out/back leads into the tree again: a loop
    for follow in (False, True):
        found = discover([root], follow_symlinks=follow)
        reasons = {d.name: d.reason for d in found.records}
        assert reasons["x.md"] == reasons["y.md"] == "symlink loop: the link never reaches a file"
        assert reasons["sub/up"] == "symlink loop: the link points to an enclosing folder"
        names = [c.name for c in found.candidates]
        if follow:
            assert names == ["a.md", "out/c.md", "sub/b.md"]
            assert reasons["out/back"] == "symlink loop: the link points to an enclosing folder"
        else:
            assert names == ["a.md", "sub/b.md"]
            assert "out" in reasons


def _summary(tree: Path) -> dict[str, object]:
    found = discover([tree])
    return {
        "ok": [c.name for c in found.candidates],
        "records": [[d.name, d.status, d.reason] for d in found.records],
    }


def _listing_fails(tree: Path, locked: Path) -> dict[str, object]:
    """discover() over ``tree`` with ``locked`` unreadable; as root (who reads everything) the
    walk runs in a forked child that has become user nobody."""
    os.chmod(locked, 0)
    try:
        if os.geteuid() != 0:
            return _summary(tree)
        read, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: no exec, so kbpack is already imported
            try:
                os.setuid(65534)
                os.write(write_end, json.dumps(_summary(tree)).encode())
            finally:
                os._exit(0)
        os.close(write_end)
        with os.fdopen(read, "rb") as f:
            data = f.read()
        os.waitpid(pid, 0)
        return json.loads(data)
    finally:
        os.chmod(locked, 0o755)


def test_an_unreadable_folder_is_a_failed_record() -> None:
    with tempfile.TemporaryDirectory() as top:  # not under pytest's root-only temp folder
        os.chmod(top, 0o755)
        tree = Path(top) / "tree"
        write(tree / "a.md", "# A\n")
        write(tree / "private" / "b.md", "# B\n")
        for p in (tree, tree / "a.md", tree / "private" / "b.md"):
            os.chmod(p, 0o755)
        result = _listing_fails(tree, tree / "private")
    assert result == {
        "ok": ["a.md"],
        "records": [
            [
                "private",
                "failed",
                "cannot read the folder: Permission denied; its files are left out",
            ]
        ],
    }


def test_filters_are_counted_not_recorded(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    write(root / "a.md", "# A\n")
    write(root / "b.txt")
    write(root / "sub" / "c.md", "# C\n")
    write(root / "logo.png", b"\x89PNG")
    found = discover([root], include=["*.md", "*.png"], exclude=["sub/*"])
    assert [c.name for c in found.candidates] == ["a.md"]
    assert [(d.name, d.reason) for d in found.records] == [("logo.png", "unsupported type .png")]
    assert found.filtered == 2


def test_a_source_that_cannot_be_listed_is_a_usage_error(tmp_path: Path) -> None:
    os.symlink(tmp_path / "loop", tmp_path / "loop")
    with pytest.raises(UsageError, match="no such file or folder"):
        discover([tmp_path / "loop"])


@pytest.mark.parametrize(
    ("suffix", "pack"),
    [(".gz", gzip.compress), (".bz2", bz2.compress), (".xz", lzma.compress)],
)
def test_compressed_documents_are_typed_by_their_inner_name(
    tmp_path: Path, suffix: str, pack: object
) -> None:
    path = write(tmp_path / f"guide.html{suffix}", pack(PAGE.encode()))  # type: ignore[operator]
    found = discover([tmp_path])
    assert [(c.name, c.kind) for c in found.candidates] == [(f"guide.html{suffix}", "html")]
    doc = extract_file(path, path.name)
    assert doc.status == "ok", doc.reason
    assert doc.media_type == "text/html" and doc.title == "Guide"
    assert "The frobnicator resets the widget." in doc.text
    assert doc.decoding.startswith({".gz": "gzip", ".bz2": "bzip2", ".xz": "xz"}[suffix] + ", ")


def test_compressed_documents_fail_with_what_happened(tmp_path: Path) -> None:
    lying = write(tmp_path / "notes.txt.gz", b"plain text, not gzip")
    doc = extract_file(lying, lying.name)
    assert (doc.status, doc.stage) == ("failed", "detect")
    assert doc.reason == "not gzip data although the name ends in .gz"
    bomb = write(tmp_path / "bomb.txt.gz", gzip.compress(b"a" * 3_000_000))
    doc = extract_file(bomb, bomb.name, Limits(max_file_bytes=2**20))
    assert (doc.status, doc.stage) == ("failed", "limits")
    assert doc.reason == (
        "gzip stream inflates past 1.0 MiB, the file size limit; raise --max-file-mb to include it"
    )
    cut = write(tmp_path / "cut.txt.gz", gzip.compress(b"hello " * 1000)[:40])
    doc = extract_file(cut, cut.name)
    assert (doc.status, doc.stage) == ("failed", "read")
    assert doc.reason.startswith("damaged gzip stream: ")
    odd = write(tmp_path / "archive.tar.gz", gzip.compress(b"x"))
    assert discover([odd]).records[0].reason == "unsupported type .tar.gz"


def test_an_empty_build_exits_1_unless_allowed(debian_like: Path, tmp_path: Path) -> None:
    out = tmp_path / "empty.kbpack"
    only_linked_folder = tmp_path / "shelf"
    only_linked_folder.mkdir()
    os.symlink((debian_like / "docs").resolve(), only_linked_folder / "docs")
    code, _, err = run("build", str(only_linked_folder), "-o", str(out), "--no-vectors", "-q")
    assert code == 1
    assert err.strip() == (
        f"kbpack: error: {only_linked_folder}: no documents to pack (0 failed, 1 skipped); first: "
        "docs: symlinked folder outside the input; --follow-symlinks reads it; fix the "
        "sources or pass --allow-empty to write an empty pack"
    )
    assert not out.exists()  # nothing written
    code, _, _ = run(
        "build", str(only_linked_folder), "-o", str(out), "--no-vectors", "-q", "--allow-empty"
    )
    assert code == 0 and out.exists()
    code, stdout, _ = run(
        "build", str(only_linked_folder), "-o", str(out), "--no-vectors", "--follow-symlinks",
        "--json", "--strict",
    )  # fmt: skip
    report = json.loads(stdout)
    assert code == 0 and report["counts"]["documents_ok"] == 1, report


def test_strict_fails_on_skipped_documents_but_not_on_filters(
    debian_like: Path, tmp_path: Path
) -> None:
    out = tmp_path / "r.kbpack"
    args = ("build", str(debian_like), "-o", str(out), "--no-vectors", "--strict")
    code, stdout, _ = run(*args, "--follow-symlinks", "--exclude", "docs/*")
    assert code == 0  # the linked files and folder read
    assert "warning  R-intro.html: read through a symlink to" in stdout
    (debian_like / "own.md").write_text("# Own\n\nA file of the tree itself.\n")
    code, stdout, _ = run(*args)
    assert code == 1  # the links were skipped
    assert "left out     3 symlinks outside the input (--follow-symlinks reads them)" in stdout
    code, stdout, _ = run(*args, "--json", "--exclude", "R-*", "--exclude", "docs")
    report = json.loads(stdout)
    assert code == 0
    assert (report["filtered"], report["skipped"], report["counts"]["documents_ok"]) == (3, [], 1)
    code, stdout, _ = run(*args[:-1], "--json")
    assert json.loads(stdout)["outside_input"] == 3


def test_discover_is_the_function_whatever_was_imported_first() -> None:
    """kbpack.extract.worker imports the discover submodule; afterwards the package's name
    ``discover`` must still be the function (it was the module: builds failed with "'module'
    object is not callable" depending on test order)."""
    code = (
        "import kbpack.extract.worker\n"
        "from kbpack.extract import discover\n"
        "assert callable(discover), discover\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_strict_allows_files_of_unsupported_types_but_not_a_skip_kbpack_could_not_read(
    tmp_path: Path,
) -> None:
    """A Sphinx tree's _static/*.js, *.css and *.png are never read, so they do not fail
    --strict; a symlink loop in the same tree (an entry kbpack could not read) does."""
    src = tmp_path / "html"
    (src / "_static").mkdir(parents=True)
    (src / "index.html").write_text("<h1>Guide</h1><p>Orphaning a package is described here.</p>")
    (src / "_static" / "doctools.js").write_text("var x = 1;\n")
    (src / "_static" / "basic.css").write_text("body { margin: 0 }\n")
    (src / "_static" / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    out = tmp_path / "guide.kbpack"
    args = ["build", str(src), "-o", str(out), "--no-vectors", "--strict"]
    code, stdout, _ = run(*args, "--json")
    report = json.loads(stdout)
    assert code == 0, stdout
    assert (report["unsupported"], len(report["skipped"])) == (3, 3)
    code, stdout, _ = run(*args, "--force")
    assert code == 0 and "1 ok, 0 failed, 3 skipped (3 of unsupported types)" in stdout
    (src / "loop").symlink_to(src, target_is_directory=True)
    code, stdout, _ = run(*args, "--json", "--follow-symlinks")
    report = json.loads(stdout)
    assert code == 1, stdout
    assert report["unsupported"] == 3 and len(report["skipped"]) == 4


def test_a_link_to_a_secret_outside_the_input_never_reaches_the_pack(tmp_path: Path) -> None:
    """Issue 30, item 5: ``ln -s /etc/shadow docs/notes.txt`` was stored as an ok document."""
    secret = write(tmp_path / "home" / "shadow", "root:SECRET-HASH-41c9:19000:0:99999:7:::\n")
    write(tmp_path / "home" / "keys" / "id.md", "# Key\n\nSECRET-KEY-77ab\n")
    docs = tmp_path / "docs"
    write(docs / "guide.md", "# Guide\n\nReset the pump seal alarm.\n")
    os.symlink(secret, docs / "notes.txt")
    os.symlink(tmp_path / "home" / "keys", docs / "keys")
    out = tmp_path / "p.kbpack"
    code, stdout, _ = run("build", str(docs), "-o", str(out), "--no-vectors", "--json")
    report = json.loads(stdout)
    assert code == 0 and report["counts"]["documents_ok"] == 1
    assert report["outside_input"] == 2
    assert {s["name"] for s in report["skipped"]} == {"notes.txt", "keys"}
    data = out.read_bytes()
    assert b"SECRET-HASH" not in data and b"SECRET-KEY" not in data
    code, stdout, _ = run("build", str(docs), "-o", str(out), "--no-vectors", "--force")
    assert "left out     2 symlinks outside the input (--follow-symlinks reads them)" in stdout
    code, stdout, _ = run(
        "build", str(docs), "-o", str(out), "--no-vectors", "--json", "--force",
        "--follow-symlinks",
    )  # fmt: skip
    report = json.loads(stdout)
    assert report["counts"]["documents_ok"] == 3 and report["outside_input"] == 0
    assert b"SECRET-HASH" in out.read_bytes()  # the user asked for it
