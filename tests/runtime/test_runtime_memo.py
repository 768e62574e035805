"""This machine's memos (kbpack/runtime/memo.py): what one process found out, the next reads
back; a changed file, a corrupt memo or a cache that cannot be written costs only time, never
an error or a stale answer."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbpack.runtime.memo import FileMemo, FileState, Memo, digest
from tests.paths import REPO_ROOT


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("KBPACK_CACHE_DIR", str(folder))
    return folder


def test_a_memo_is_read_back_and_leaves_no_temp_file(cache: Path) -> None:
    memo = Memo("facts", fan_out=True)
    key = digest("a pack", 123, 456)
    assert memo.read_json(key) is None and not memo.has(key)
    assert memo.write_json(key, {"sha256": "ab" * 32})
    assert memo.has(key) and memo.read_json(key) == {"sha256": "ab" * 32}
    assert memo.path(key) == cache / "facts" / key[:2] / key
    assert [p.name for p in (cache / "facts").rglob("*") if p.is_file()] == [key]


def test_a_corrupt_memo_reads_as_none(cache: Path) -> None:
    memo = Memo("facts")
    memo.write(digest(1), b"{not json")
    assert memo.read_json(digest(1)) is None
    assert memo.read(digest(1)) == b"{not json"


def test_a_cache_that_cannot_be_written_is_not_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a file"
    blocker.write_bytes(b"")
    monkeypatch.setenv("KBPACK_CACHE_DIR", str(blocker / "cache"))  # no folder can be made
    memo = Memo("facts")
    assert memo.write_json(digest(1), [1]) is False
    assert memo.read_json(digest(1)) is None and not memo.has(digest(1))
    assert FileMemo("sums").remember(FileState.of(blocker), "x") is False


def test_a_file_memo_forgets_a_changed_file(tmp_path: Path) -> None:
    f = tmp_path / "model.gguf"
    f.write_bytes(b"first")
    memo = FileMemo("sums")
    first = FileState.of(f)
    assert memo.recall(first) is None
    assert memo.remember(first, "one")
    assert memo.recall(FileState.of(f)) == "one"
    f.write_bytes(b"second, longer")  # another size: another state
    assert memo.recall(FileState.of(f)) is None
    assert memo.recall(first) == "one"  # (the memo itself is only replaced by a new fact)
    memo.remember(FileState.of(f), "two")
    assert memo.recall(first) is None  # one memo per file: the new state replaced the old
    assert memo.recall(FileState.of(f)) == "two"


def test_the_memos_of_kbpack_live_in_the_one_module() -> None:
    """No module but kbpack/runtime/memo.py writes into the cache folder by hand (a temp file
    renamed over a memo): the memos named in its docstring go through it."""
    root = REPO_ROOT / "kbpack"
    by_hand = []
    for p in root.rglob("*.py"):
        text = p.read_text(encoding="utf-8")
        if "cache_dir()" in text and "os.replace(" in text:
            by_hand.append(str(p.relative_to(root)))
    allowed = {
        "runtime/memo.py",
        "model/convert.py",  # writes a converted model, not a memo
        "model/cache.py",
        "model/resolve.py",  # extracts a pack's model file, not a memo
        "model/embed_cache.py",  # a journal of embeddings, not a memo
    }
    assert set(by_hand) <= allowed, sorted(set(by_hand) - allowed)
