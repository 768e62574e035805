"""kbpack build --shard I/N: deterministic shares whose merge is the single build."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from scale_corpus import PART_A, PART_B, assert_same_content, write_folder

from kbpack.cli.main import cli
from kbpack.errors import UsageError
from kbpack.ops.shards import parse_shard, shard_of
from kbpack.pack.read import PackReader

FILES = {**PART_A, **PART_B, "notes/eta.md": "# Eta\n\nShards are chosen by name.\n"}


def run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(cli, list(args))
    return r.exit_code, r.stdout, r.stderr


@pytest.mark.parametrize("spec", ["0/3", "4/3", "3", "a/b", "1/0", ""])
def test_bad_shard_specs_are_usage_errors(spec: str) -> None:
    with pytest.raises(UsageError, match=f"^--shard {spec}: write I/N with 1 <= I <= N"):
        parse_shard(spec)


def test_adding_a_file_moves_no_other_file() -> None:
    names = [f"doc-{i}.md" for i in range(200)]
    before = {n: shard_of(n, 7) for n in names}
    after = {n: shard_of(n, 7) for n in [*names, "new.md"]}
    assert all(after[n] == before[n] for n in names)
    assert set(before.values()) == set(range(1, 8))  # every shard gets documents


def test_shards_merged_equal_the_single_build(tmp_path: Path, tiny_model: Path) -> None:
    src = write_folder(tmp_path / "src", FILES)
    common = ["--model", str(tiny_model), "--threads", "1", "--json"]
    code, out, err = run("build", str(src), "-o", str(tmp_path / "all.kbpack"), *common)
    assert code == 0, err
    shards = []
    seen: list[str] = []
    for i in (1, 2, 3):
        pack = tmp_path / f"shard-{i}.kbpack"
        code, out, err = run("build", str(src), "-o", str(pack), "--shard", f"{i}/3", *common)
        assert code == 0, err
        with PackReader(pack) as r:
            names = r.strings("/documents/name")
            assert r.manifest.extra["shard"] == {"index": i, "count": 3}
        assert all(shard_of(n, 3) == i for n in names)
        seen += names
        shards.append(str(pack))
    assert sorted(seen) == sorted(FILES)  # each document in exactly one shard
    code, out, err = run("merge", *shards, "-o", str(tmp_path / "merged.kbpack"), "--json")
    assert code == 0, err
    assert [s["shard"]["index"] for s in json.loads(out)["sources"]] == [1, 2, 3]
    # Everything equal but the vectors: llama.cpp's vector for a text moves in its last bits
    # with the other texts of its batch (flash attention, GEMM tiling), and a shard batches
    # other neighbours than the single build. The merge itself copies vectors bit for bit.
    merged, single = tmp_path / "merged.kbpack", tmp_path / "all.kbpack"
    assert_same_content(merged, single, skip=("/vectors/data",))
    with PackReader(merged) as m, PackReader(single) as s:
        a, b = m.vectors(), s.vectors()
    assert a.shape == b.shape
    assert float(np.min(np.sum(a * b, axis=1))) > 0.999  # cosine of each pair


def test_bad_shard_on_the_command_line_exits_2(tmp_path: Path) -> None:
    src = write_folder(tmp_path / "src", {"a.md": "# A\n\nText.\n"})
    code, _, err = run("build", str(src), "-o", str(tmp_path / "x.kbpack"), "--shard", "5/4")
    assert code == 2 and "--shard 5/4: write I/N" in err
