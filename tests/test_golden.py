"""Golden packs of every format version: readable now and forever, by kbpack and by h5dump."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from kbpack.cli import cli
from kbpack.pack.read import PackReader

GOLDEN_DIR = Path(__file__).parent.parent / "fixtures" / "golden"
GOLDEN = sorted(GOLDEN_DIR.glob("v*.kbpack"))


def test_a_golden_pack_exists_for_the_current_version() -> None:
    from kbpack.pack.format import FORMAT_VERSION

    assert GOLDEN_DIR / f"v{FORMAT_VERSION}.kbpack" in GOLDEN


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.name)
def test_golden_pack_reads(path: Path) -> None:
    with PackReader(path) as r:
        c = r.counts
        assert c["documents_ok"] == 3 and c["documents_failed"] == 1
        assert c["pages"] == 4 and c["chunks"] == c["vectors"] > 0
        for i in range(c["chunks"]):
            assert r.chunk_content(i).strip()


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.name)
def test_golden_pack_exports(path: Path) -> None:
    r = CliRunner().invoke(cli, ["export", str(path), "--what", "chunks"])
    assert r.exit_code == 0
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert {"doc", "section", "from", "to", "page", "tokens", "content"} <= set(lines[0])
    assert any(x["page"] for x in lines) and all(0 < x["tokens"] <= 256 for x in lines)


@pytest.mark.skipif(
    shutil.which("h5dump") is None, reason="h5dump (Debian hdf5-tools) not installed"
)
@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.name)
def test_h5dump_reads_golden_pack(path: Path) -> None:
    out = subprocess.run(
        ["h5dump", "-B", "-A", str(path)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert "USERBLOCK_SIZE 65536" in out.stdout and '"kbpack"' in out.stdout


@pytest.mark.default_model
def test_golden_pack_answers_with_the_default_model(default_model: Path) -> None:
    """The real default model: the query side hashes to the pack's stamp, dense search runs."""
    import kbpack

    with kbpack.open(GOLDEN_DIR / "v1.kbpack") as p:
        resp = p.search("How do I install pypdf?", k=3, mode="dense")
        assert not resp.lexical_only and resp.answered
        assert resp.results[0].doc == "README.md"
        assert resp.results[0].distance is not None and resp.results[0].distance < 0.6
