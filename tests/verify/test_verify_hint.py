"""`query` on a pack never verified on this machine suggests `kbpack verify`, once per run, on
stderr only; a pass of `verify` is remembered in the user cache, keyed by the pack's path,
size, mtime and manifest digest; an unwritable cache never fails a command."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_run import run

from kbpack.pack.verified import identity
from tests.paths import REPO_ROOT

REPO = REPO_ROOT
DOC = REPO / "fixtures" / "docs" / "pypdf" / "README.md"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    folder = tmp_path / "cache"
    monkeypatch.setenv("KBPACK_CACHE_DIR", str(folder))
    yield folder


@pytest.fixture
def built(tmp_path: Path, cache: Path) -> Path:
    out = tmp_path / "built.kbpack"
    code, _, err = run("build", str(DOC), "-o", str(out), "--no-vectors", "-q")
    assert code == 0, err
    return out


@pytest.fixture
def pack(built: Path, tmp_path: Path) -> Path:
    """The built pack as it arrives on another machine: copied (times kept), never verified."""
    return Path(shutil.copy2(built, tmp_path / "p.kbpack"))


def test_a_pack_built_here_needs_no_hint_but_a_copy_of_it_does(built: Path, pack: Path) -> None:
    """Its bytes came from this machine's own build, not over a copy: the hint right after a
    build (the quickstart's build + query) was noise. The copy is another file."""
    code, _, err = run("query", str(built), "pypdf", "--mode", "bm25")
    assert code == 0 and err == ""
    code, _, err = run("query", str(pack), "pypdf", "--mode", "bm25")
    assert code == 0 and err.splitlines() == [hint_line(pack)]


def hint_line(pack: Path) -> str:
    return (
        f"note: {pack} has not been verified on this machine; run kbpack verify {pack} "
        "(a pass is remembered)"
    )


def test_query_hints_until_verify_passes(pack: Path, cache: Path) -> None:
    code, out, err = run("query", str(pack), "pypdf", "--mode", "bm25")
    assert code == 0 and err.splitlines() == [hint_line(pack)]
    assert "pypdf" in out.lower()  # the answer itself is unchanged
    code, _, err = run("verify", str(pack))
    assert code == 0, err
    # one marker more (the build's own is there), named by the key
    assert len(list((cache / "verified").iterdir())) == 2
    code, _, err = run("query", str(pack), "pypdf", "--mode", "bm25")
    assert code == 0 and err == ""


def test_json_stdout_stays_pure_and_quiet_silences_the_hint(pack: Path, cache: Path) -> None:
    code, out, err = run("query", str(pack), "pypdf", "--mode", "bm25", "--json")
    assert code == 0 and err.splitlines() == [hint_line(pack)]
    json.loads(out)  # stdout is one JSON document, the hint is not in it
    code, _, err = run("query", str(pack), "pypdf", "--mode", "bm25", "-q")
    assert code == 0 and err == ""


def test_a_changed_pack_is_not_verified_any_more(pack: Path, cache: Path) -> None:
    assert run("verify", str(pack))[0] == 0
    st = pack.stat()
    os.utime(pack, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # touched (or replaced)
    code, _, err = run("query", str(pack), "pypdf", "--mode", "bm25")
    assert code == 0 and err.splitlines() == [hint_line(pack)]


def test_a_failed_verify_is_not_remembered(pack: Path, cache: Path) -> None:
    data = bytearray(pack.read_bytes())
    data[-100] ^= 0x01  # one bit of the HDF5 bytes: the SHA-256 check fails
    pack.write_bytes(bytes(data))
    before = sorted((cache / "verified").iterdir())  # the build's own marker
    assert run("verify", str(pack))[0] == 1
    assert sorted((cache / "verified").iterdir()) == before


def test_an_unwritable_cache_fails_nothing(
    pack: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    monkeypatch.setenv("KBPACK_CACHE_DIR", str(blocker))
    code, _, err = run("verify", str(pack))
    assert code == 0, err
    code, _, err = run("query", str(pack), "pypdf", "--mode", "bm25")
    assert code == 0 and err.splitlines() == [hint_line(pack)]  # not remembered, not an error


def test_the_key_is_path_size_mtime_and_digest(pack: Path, tmp_path: Path) -> None:
    key = identity(pack)
    assert key is not None and identity(pack) == key
    copy = tmp_path / "copy.kbpack"
    copy.write_bytes(pack.read_bytes())
    os.utime(copy, ns=(pack.stat().st_atime_ns, pack.stat().st_mtime_ns))
    assert identity(copy) != key  # same bytes and mtime, another path
    assert identity(tmp_path / "missing.kbpack") is None
