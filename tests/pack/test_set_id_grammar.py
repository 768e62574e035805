"""Issue 30, found 8: a set id outside the spec's grammar (1-64 lowercase hex digits) is
refused at open in one line; a '/' in it was ``internal error: ValueError`` in verify and query
(the id becomes part of a backup file's name beside the pack)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from kbpack.cli.main import cli
from kbpack.pack.manifest import encode_header, read_header, write_header


@pytest.fixture(scope="module")
def pack(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("setid")
    (root / "src").mkdir()
    (root / "src" / "a.md").write_text("# Pump\n\nPrime the pump through the bleed valve.\n")
    out = root / "p-001.kbpack"
    r = CliRunner().invoke(cli, ["build", str(root / "src"), "-o", str(out), "--no-vectors", "-q"])
    assert r.exit_code == 0, r.output
    return out


@pytest.mark.parametrize("set_id", ["../../etc/x", "a/b", "ABC", "", 7])
def test_a_set_id_outside_the_grammar_is_one_line(
    pack: Path, tmp_path: Path, set_id: object
) -> None:
    bad = tmp_path / "p-001.kbpack"
    bad.write_bytes(pack.read_bytes())
    m = read_header(bad).manifest
    m.extra["set"] = {"id": set_id, "index": 1, "count": 2}
    write_header(bad, encode_header(m.to_json_bytes()))  # the manifest is not hashed: no restamp
    for args in (["verify", str(bad)], ["query", str(bad), "pump"]):
        r = CliRunner().invoke(cli, args)
        said = r.output
        assert r.exit_code == 1, (args, said)
        assert "internal error" not in said and "Traceback" not in said
        assert "manifest 'set' is not {id: 1-64 lowercase hex digits" in said, said
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p-001.kbpack"]  # nothing beside it
