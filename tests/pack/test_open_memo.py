"""The first open of a pack lets a sandboxed child parse it and check its structure
(kbpack/pack/preflight.py); the reader then relies on that check instead of running the
structure allowlist a second time, for that very file state only."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

import kbpack.pack.read as read_module
from kbpack.pack.manifest import read_header
from kbpack.pack.preflight import MEMO_FOLDER, memo_key
from kbpack.pack.read import PackReader
from tests.paths import REPO_ROOT

GOLDEN = REPO_ROOT / "fixtures" / "golden" / "v2.kbpack"


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    calls: list[Any] = []
    real = read_module.check_structure

    def counted(*args: Any) -> Any:
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(read_module, "check_structure", counted)
    return calls


def test_a_state_the_child_found_clean_is_not_checked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KBPACK_CACHE_DIR", str(tmp_path / "cache"))
    pack = Path(shutil.copy(GOLDEN, tmp_path / "p.kbpack"))
    calls = _counting(monkeypatch)
    with PackReader(pack) as r:  # first open: the child checks (structure included), clean
        first = r.counts
    assert calls == []
    assert [m for m in (tmp_path / "cache" / MEMO_FOLDER).rglob("*") if m.is_file()]
    with PackReader(pack) as r:  # remembered: neither the child nor the allowlist runs again
        assert r.counts == first
    assert calls == []
    # without the preflight (check_structure_=False) nothing is checked, as before
    with PackReader(pack, check_structure_=False):
        pass
    assert calls == []


def test_a_reset_modification_time_is_another_state(tmp_path: Path) -> None:
    """``touch -d`` can put a rewritten file's mtime back; its ctime it cannot."""
    pack = Path(shutil.copy(GOLDEN, tmp_path / "p.kbpack"))
    header = read_header(pack)
    before = memo_key(pack, header)
    st = pack.stat()
    time.sleep(0.01)
    os.utime(pack, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert pack.stat().st_mtime_ns == st.st_mtime_ns
    assert memo_key(pack, header) != before


def test_a_state_the_child_survived_but_refused_skips_the_child_not_the_allowlist(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An object the spec does not name: the child parses the pack safely and its allowlist
    refuses it. The next open of that state forks no child but still refuses, in-process,
    with the same line; a new state (the file rewritten) is checked in the child again."""
    import h5py
    import numpy as np

    import kbpack.runtime.sandbox as sandbox
    from kbpack.errors import PackError
    from kbpack.testing.fuzz.pack_mutations import restamp

    monkeypatch.setenv("KBPACK_CACHE_DIR", str(tmp_path / "cache"))
    pack = Path(shutil.copy(GOLDEN, tmp_path / "p.kbpack"))
    with h5py.File(pack, "r+") as h:
        h.create_dataset("/chunks/payload", data=np.arange(3))
    restamp(pack, "bytes")  # size and hash agree: the reader reaches HDF5
    children: list[Any] = []
    real = sandbox.Isolated

    def counted(*args: Any, **kw: Any) -> Any:
        children.append(args)
        return real(*args, **kw)

    monkeypatch.setattr(sandbox, "Isolated", counted)
    calls = _counting(monkeypatch)
    errors = []
    for _ in range(3):
        with pytest.raises(PackError) as e:
            PackReader(pack)
        errors.append(str(e.value))
    assert "refused: unknown-object /chunks/payload" in errors[0]
    assert errors == [errors[0]] * 3
    assert len(children) == 1  # the first open only
    assert len(calls) == 3  # the allowlist refuses it in-process at every open
    pack.write_bytes(pack.read_bytes())  # the same bytes, another state (ctime, maybe inode)
    with pytest.raises(PackError):
        PackReader(pack)
    assert len(children) == 2
