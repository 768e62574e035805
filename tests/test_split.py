"""Pack sets (build --split-size): members under the size, each verifiable, searched as one."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from scale_corpus import build_pack, write_folder

import kbpack
import kbpack.split as split
from kbpack.cli import cli
from kbpack.errors import UsageError
from kbpack.pack.read import PackReader
from kbpack.split import member_path, parse_size, split_pack
from kbpack.verify.pipeline import verify_pack

WORDS = [
    "rotate",
    "logs",
    "handler",
    "disk",
    "service",
    "region",
    "thread",
    "lock",
    "archive",
    "signal",
    "buffer",
    "limit",
    "connection",
    "database",
    "cache",
    "offset",
    "deploy",
    "config",
    "timeout",
    "retry",
    "queue",
]


def corpus() -> dict[str, str]:
    """24 documents of ~2.5 KB, each with an identifier of its own."""
    rng = np.random.default_rng(5)
    files = {}
    for i in range(24):
        paras = [" ".join(rng.choice(WORDS, size=40)) + f". Code E-{1000 + i}." for _ in range(6)]
        files[f"doc-{i:02d}.md"] = f"# Document {i}\n\n" + "\n\n".join(paras) + "\n"
    return files


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tiny_gguf import build_tiny_gguf

    root = tmp_path_factory.mktemp("split")
    model = build_tiny_gguf(root / "wide.gguf", name="wide", window=256)
    return build_pack(write_folder(root / "src", corpus()), root / "whole.kbpack", model)


def test_sizes_parse() -> None:
    assert parse_size("3.9G") == int(3.9 * 2**30)
    assert parse_size("700M") == 700 * 2**20
    assert parse_size("4000000000") == 4_000_000_000
    assert parse_size("2GiB") == 2 * 2**30
    for bad in ("", "3.9X", "-1G", "100K"):
        with pytest.raises(UsageError, match=f"^--split-size {bad}: "):
            parse_size(bad)


def test_members_are_complete_packs_under_the_size(whole: Path, tmp_path: Path) -> None:
    limit = 250 * 1024
    report = split_pack(whole, tmp_path / "set.kbpack", limit)
    paths = [Path(m["path"]) for m in report.members]
    assert len(paths) >= 2
    assert paths == [member_path(tmp_path / "set.kbpack", i) for i in range(1, len(paths) + 1)]
    assert paths[0].name == "set-001.kbpack"
    names: list[str] = []
    for i, p in enumerate(paths, 1):
        assert p.stat().st_size <= limit
        v = verify_pack(p)
        assert v.intact, v.findings
        assert (
            f"member {i} of {len(paths)} of set {report.set_id}; every member is present" in v.notes
        )
        with PackReader(p) as r:
            names += r.strings("/documents/name")
            assert r.manifest.extra["set"] == {"id": report.set_id, "index": i, "count": len(paths)}
    with PackReader(whole) as r:
        assert names == r.strings("/documents/name")  # every document once, in order
    assert not list(tmp_path.glob(".*"))  # no temp file left


@pytest.mark.parametrize("query", ["rotate logs handler", "E-1017", "deploy region timeout"])
def test_the_set_searches_as_the_whole_pack(whole: Path, tmp_path: Path, query: str) -> None:
    report = split_pack(whole, tmp_path / "set.kbpack", 250 * 1024)
    paths = [m["path"] for m in report.members]
    model = whole.parent / "wide.gguf"
    with kbpack.open_many(paths, model=model) as s, kbpack.open(whole, model=model) as w:
        for mode in ("bm25", "hybrid"):
            got = s.search(query, k=8, mode=mode, refuse=False)
            want = w.search(query, k=8, mode=mode, refuse=False)
            assert [r.locator for r in got.results] == [r.locator for r in want.results]
            if mode == "bm25":
                assert [r.score for r in got.results] == [r.score for r in want.results]
        partial = s.__class__(paths[1:], model=model)
        note = partial.search(query, mode="bm25").notes
        partial.close()
        assert any("members 001 of" in n and "were not given" in n for n in note)


def test_verify_reports_a_missing_and_a_foreign_member(whole: Path, tmp_path: Path) -> None:
    report = split_pack(whole, tmp_path / "set.kbpack", 250 * 1024)
    first, second = (Path(m["path"]) for m in report.members[:2])
    (tmp_path / "other").mkdir()
    other = split_pack(whole, tmp_path / "other" / "set.kbpack", 220 * 1024)
    second.unlink()
    v = verify_pack(first)
    assert [f.code for f in v.findings] == ["set-member-missing"]
    assert "set-002.kbpack (member 2 of" in v.findings[0].detail
    shutil.copyfile(other.members[1]["path"], second)
    v = verify_pack(first)
    assert [f.code for f in v.findings] == ["set-member-foreign"]
    r = CliRunner().invoke(cli, ["verify", str(first)])
    assert r.exit_code == 1 and "set-member-foreign" in r.stdout


def test_a_short_estimate_writes_the_member_again(
    whole: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(split._Estimator, "document", lambda self, row: 1)  # far too small
    report = split_pack(whole, tmp_path / "set.kbpack", 250 * 1024)
    assert report.rewritten >= 1
    assert all(Path(m["path"]).stat().st_size <= 250 * 1024 for m in report.members)
    assert sum(m["documents"] for m in report.members) == 24


def test_a_document_larger_than_the_size_is_an_error(whole: Path, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"^doc-00.md: alone makes a \d+-byte pack, over"):
        split_pack(whole, tmp_path / "set.kbpack", 64 * 1024)
    assert not list(tmp_path.iterdir())


def test_cli_build_split_size(tmp_path: Path, tiny_model: Path) -> None:
    src = write_folder(tmp_path / "src", corpus())
    out = tmp_path / "out" / "docs.kbpack"
    out.parent.mkdir()
    args = ["build", str(src), "-o", str(out), "--model", str(tiny_model), "--threads", "1"]
    r = CliRunner().invoke(cli, [*args, "--split-size", "1M", "--json"])
    assert r.exit_code == 0, r.output
    members = json.loads(r.stdout)["set"]["members"]
    names = [Path(m["path"]).name for m in members]
    assert names == [f"docs-{i:03d}.kbpack" for i in range(1, len(names) + 1)]
    assert sorted(p.name for p in out.parent.iterdir()) == names  # the whole pack is gone
    assert all(m["bytes"] <= 2**20 for m in members)
    r = CliRunner().invoke(cli, [*args, "--split-size", "3.9X"])
    assert r.exit_code == 2 and "--split-size 3.9X: write a size such as 3.9G" in r.stderr
