"""Sets as first-class: verify, sign and inspect take several packs and whole sets; a member's
verify checks every sibling's bytes; kbpack split re-cuts a built pack or set (signed or not)
without re-embedding."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from scale_corpus import build_pack, write_folder
from test_split import corpus

import kbpack
from kbpack.cli.main import cli
from kbpack.ops.recut import recut
from kbpack.ops.split import split_pack
from kbpack.pack.read import PackReader
from tests.paths import REPO_ROOT


def run(*args: object) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory, wide_model: Path) -> Path:
    root = tmp_path_factory.mktemp("sets")
    return build_pack(write_folder(root / "src", corpus()), root / "whole.kbpack", wide_model)


@pytest.fixture
def members(whole: Path, tmp_path: Path) -> list[Path]:
    report = split_pack(whole, tmp_path / "set.kbpack", 250 * 1024)
    paths = [Path(m["path"]) for m in report.members]
    assert len(paths) >= 3
    return paths


def documents(paths: list[Path]) -> list[str]:
    names: list[str] = []
    for p in paths:
        with PackReader(p) as r:
            names += r.strings("/documents/name")
    return names


def test_verify_a_whole_set_gives_one_table(members: list[Path]) -> None:
    r = run("verify", *members)
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["pack", "result", "signature", "set"]
    for i, m in enumerate(members, 1):
        row = next(line for line in lines if line.startswith(str(m) + " "))
        assert "intact" in row and f"member {i} of {len(members)} of set" in row
    assert lines[-1] == f"{len(members)} of {len(members)} packs intact"

    r = run("verify", *members, "--json")
    doc = json.loads(r.stdout)
    assert doc["command"] == "verify" and doc["intact"] is True
    assert [p["path"] for p in doc["packs"]] == [str(m) for m in members]


def test_a_truncated_member_fails_the_set_from_any_member(members: list[Path]) -> None:
    third = members[2]
    data = third.read_bytes()
    third.write_bytes(data[: len(data) // 2])
    r = run("verify", members[0])  # the first member alone: its sibling is cut
    assert r.exit_code == 1
    assert "set-member-damaged" in r.stdout
    assert f"{third.name} (member 3 of {len(members)}) truncated" in r.stdout

    r = run("verify", *members, "--json")  # the whole set: one failure, found once
    assert r.exit_code == 1
    by_path = {p["path"]: p for p in json.loads(r.stdout)["packs"]}
    assert by_path[str(third)]["findings"][0]["code"] == "size-mismatch"
    assert by_path[str(members[0])]["intact"]  # its sibling's damage is reported at the sibling
    r = run("verify", *members)
    assert f"{len(members) - 1} of {len(members)} packs intact" in r.stdout
    assert any(line.startswith(f"{third} ") and "FAILED" in line for line in r.stdout.splitlines())
    r = run("inspect", *members)  # the others are still shown; the exit status is the worst
    assert r.exit_code == 1
    assert any(line.split()[:2] == [str(third), "ERROR"] for line in r.stdout.splitlines())
    assert f"total ({len(members) - 1} packs)" in r.stdout and "truncated" in r.stdout


def test_a_sibling_with_flipped_bytes_is_found_by_its_hash(members: list[Path]) -> None:
    second = members[1]
    data = bytearray(second.read_bytes())
    data[-100] ^= 0xFF  # same size, different bytes
    second.write_bytes(bytes(data))
    r = run("verify", members[0])
    assert r.exit_code == 1
    assert "SHA-256 of its bytes differs from its manifest's" in r.stdout
    assert run("verify", members[0], "--quick").exit_code == 0  # --quick: sizes only


def test_verify_exit_status_is_the_worst(members: list[Path], tmp_path: Path) -> None:
    r = run("verify", members[0], tmp_path / "nope.kbpack")
    assert r.exit_code == 2
    assert "ERROR" in r.stdout and "nope.kbpack: no such file" in r.stdout
    assert "1 of 2 packs intact" in r.stdout


def test_sign_and_inspect_a_whole_set(members: list[Path], tmp_path: Path) -> None:
    assert run("keygen", "-o", tmp_path / "team").exit_code == 0
    key = tmp_path / "team.key"
    r = run("sign", members[0], "--key", key)  # one member: the others are named
    assert r.exit_code == 0
    assert "not signed: kbpack sign" in r.stdout and members[1].name in r.stdout
    r = run("sign", *members, "--key", key, "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert [p["path"] for p in doc["packs"]] == [str(m) for m in members] and not doc["notes"]
    r = run("verify", *members, "--key", tmp_path / "team.pub")
    assert r.exit_code == 0, r.output

    r = run("inspect", *members)
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[0].split()[:3] == ["pack", "size", "documents"]
    assert lines[-1].startswith(f"total ({len(members)} packs)")
    assert lines[-1].split()[5] == "24"  # every document of the set
    assert all(" yes " in line for line in lines[1:-1])
    doc = json.loads(run("inspect", *members, "--json").stdout)
    assert sum(p["counts"]["documents"] for p in doc["packs"]) == 24


def test_split_recuts_a_set_without_reembedding(
    whole: Path, members: list[Path], tmp_path: Path, wide_model: Path
) -> None:
    out = tmp_path / "small"
    report = recut(members, out, 200 * 1024)  # the CLI's smallest size is 1M
    assert report.sources == [str(m) for m in members]
    new = sorted(out.glob("set-*.kbpack"))
    assert len(new) > len(members)
    assert all(p.stat().st_size <= 200 * 1024 for p in new)
    assert documents(new) == documents([whole])
    assert run("verify", *new).exit_code == 0
    model = wide_model
    with kbpack.open_many(new, model=model) as s, kbpack.open(whole, model=model) as w:
        got = s.search("deploy region timeout", k=5, refuse=False)
        want = w.search("deploy region timeout", k=5, refuse=False)
        assert [x.locator for x in got.results] == [x.locator for x in want.results]
    # one member stands for its set; the old spelling of the size works too
    r = run("split", members[1], "-o", tmp_path / "big" / "docs.kbpack", "--split-size", "10M")
    assert r.exit_code == 0, r.output
    assert [p.name for p in (tmp_path / "big").iterdir()] == ["docs-001.kbpack"]
    assert documents([tmp_path / "big" / "docs-001.kbpack"]) == documents([whole])


def test_split_a_single_pack(whole: Path, tmp_path: Path) -> None:
    r = run("split", whole, "-o", tmp_path, "--size", "1M", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["sources"] == [str(whole)] and doc["signed_by"] is None
    assert Path(doc["members"][0]["path"]).name == "whole-001.kbpack"


def test_split_of_a_signed_set_says_what_happens_to_the_signature(
    members: list[Path], tmp_path: Path
) -> None:
    assert run("keygen", "-o", tmp_path / "team").exit_code == 0
    key, pub = tmp_path / "team.key", tmp_path / "team.pub"
    assert run("sign", *members, "--key", key).exit_code == 0
    r = run("split", *members, "-o", tmp_path / "a", "--size", "1M")
    assert r.exit_code == 0, r.output
    assert "the members are unsigned" in r.stdout
    assert f"kbpack sign {tmp_path / 'a' / 'set'}-*.kbpack --key KEY.key" in r.stdout
    unsigned = sorted((tmp_path / "a").glob("*.kbpack"))
    assert run("verify", *unsigned).exit_code == 0
    assert run("verify", *unsigned, "--key", pub).exit_code == 1  # no signature: refused

    r = run("split", *members, "-o", tmp_path / "b", "--size", "1M", "--key", key)
    assert r.exit_code == 0, r.output
    assert "every member signed by key" in r.stdout
    assert run("verify", *sorted((tmp_path / "b").glob("*.kbpack")), "--key", pub).exit_code == 0


def test_split_refuses_an_incomplete_set(members: list[Path], tmp_path: Path) -> None:
    shutil.move(members[1], tmp_path / "aside.kbpack")
    r = run("split", members[0], "-o", tmp_path / "out", "--size", "1M")
    assert r.exit_code == 2
    assert f"{members[1]}: member 2 of {len(members)} of set" in r.stderr
    assert "copy the whole set" in r.stderr


def test_a_size_error_names_the_option_as_typed(tmp_path: Path) -> None:
    golden = REPO_ROOT / "fixtures" / "golden" / "v2.kbpack"
    args = ["split", str(golden), "-o", str(tmp_path / "set.kbpack")]
    r = CliRunner().invoke(cli, [*args, "--size", "400K"])
    assert r.exit_code == 2 and "--size 400K: members need at least 1M" in r.output
