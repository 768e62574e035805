"""The first open's pre-flight (kbpack/pack/preflight.py) is skipped for a pack this kbpack has
just written or a full verify found intact, and only for the file as it was then."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from cli_run import run

import kbpack.runtime.sandbox as sandbox
from kbpack.errors import PackError
from kbpack.pack.manifest import read_header
from kbpack.pack.preflight import _memo, memo_key
from kbpack.pack.read import PackReader
from tests.fixture_pack import GOLDEN, stall_heap


def remembered(pack: Path) -> bool:
    return _memo(memo_key(pack, read_header(pack))).exists()


def test_a_pack_built_here_opens_without_the_preflight(
    tmp_path: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KBPACK_CACHE_DIR", str(tmp_path / "cache"))
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.md").write_text("# Pumps\n\nThe seal of pump P-101 is checked every 500 hours.\n")
    pack = tmp_path / "p.kbpack"
    code, _, err = run("build", str(src), "-o", str(pack), "--model", str(tiny_model), "-q")
    assert code == 0, err
    assert remembered(pack)

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a pre-flight child was started")

    monkeypatch.setattr(sandbox, "Isolated", refuse)
    PackReader(pack).close()
    monkeypatch.undo()
    monkeypatch.setenv("KBPACK_CACHE_DIR", str(tmp_path / "cache"))
    # the same file changed afterwards is checked again, and a crafted heap refused
    stall_heap(pack)
    assert not remembered(pack)
    with pytest.raises(PackError, match="global heap collection"):
        PackReader(pack)


def test_only_a_full_intact_verify_is_remembered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KBPACK_CACHE_DIR", str(tmp_path / "cache"))
    pack = Path(shutil.copy(GOLDEN, tmp_path / "p.kbpack"))
    assert not remembered(pack)  # copied here: unknown
    assert run("verify", "--quick", str(pack))[0] == 0
    assert not remembered(pack)  # --quick reads no data
    assert run("verify", str(pack))[0] == 0
    assert remembered(pack)
    damaged = Path(shutil.copy(GOLDEN, tmp_path / "d.kbpack"))
    stall_heap(damaged)
    assert run("verify", str(damaged))[0] == 1
    assert not remembered(damaged)
