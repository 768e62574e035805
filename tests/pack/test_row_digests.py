"""Row digests (spec §3.11): a query checks the one title or name it shows against that row's
stored digest instead of reading and hashing the whole column, and still never shows a
damaged row; verify re-computes every row digest; packs without them read as before."""

from __future__ import annotations

import shutil
from pathlib import Path

import h5py
import pytest
from cli_run import run

from kbpack.pack import format as F
from kbpack.pack.digest import row_digests
from kbpack.pack.read import PackReader
from kbpack.verify.pipeline import verify_pack
from tests.fixture_pack import rewritten
from tests.paths import REPO_ROOT

DOCS = {
    "pumps.md": "# Pumps\n\nThe seal of pump P-101 is checked every 500 hours.\n\n"
    "## Alarms\n\nAlarm A-17 means low suction pressure at the inlet.\n",
    "valves.md": "# Valves\n\nValve V-3 opens the bypass line to the reservoir.\n\n"
    "## Bypass tuning\n\nThe bypass of valve V-3 closes at 4 bar.\n",
}
GOLDEN_0_2_0 = REPO_ROOT / "fixtures" / "golden" / "v2-0.2.0.kbpack"


@pytest.fixture(scope="module")
def pack(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("docs")
    for name, text in DOCS.items():
        (src / name).write_text(text)
    out = tmp_path_factory.mktemp("rows") / "p.kbpack"
    code, _, err = run("build", str(src), "-o", str(out), "--no-vectors", "-q")
    assert code == 0, err
    return out


def test_every_row_reads_the_same_through_its_row_digest(pack: Path) -> None:
    with h5py.File(pack, "r") as h:
        assert sorted(h[F.ROW_DIGESTS]) == sorted(
            p.rsplit("/", 1)[1] for p in F.ROW_DIGEST_OF.values()
        )
    for column in F.ROW_DIGEST_OF:
        with PackReader(pack) as by_row, PackReader(pack) as whole:
            rows = whole.strings(column)
            assert rows and [by_row.string_at(column, i) for i in range(len(rows))] == rows
            assert column not in by_row._cache  # the column itself was never read whole


def test_a_pack_without_row_digests_reads_through_the_whole_column() -> None:
    with h5py.File(GOLDEN_0_2_0, "r") as h:
        assert F.ROW_DIGESTS not in h
    with PackReader(GOLDEN_0_2_0) as r:
        titles = r.strings(F.SEC_TITLE)
        assert [r.string_at(F.SEC_TITLE, i) for i in range(len(titles))] == titles


def flip_title_byte(pack: Path, tmp_path: Path, title: bytes) -> Path:
    """One bit flipped in the heap copy of a section title (not the canonical text's)."""
    bad = tmp_path / "flipped.kbpack"
    shutil.copyfile(pack, bad)
    data = bad.read_bytes()
    hits = [i for i in range(len(data)) if data.startswith(title, i) and data[i - 3 : i] != b"## "]
    assert hits, title
    with open(bad, "r+b") as f:
        f.seek(hits[0] + 1)
        f.write(bytes([data[hits[0] + 1] ^ 0x04]))
    return bad


def test_a_flipped_section_title_is_never_shown(pack: Path, tmp_path: Path) -> None:
    bad = flip_title_byte(pack, tmp_path, b"Alarms")
    code, out, err = run("query", str(bad), "A-17 suction", "--mode", "bm25")
    assert code == 1 and "Alarms" not in out and "Alerms" not in out
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"kbpack: error: {bad}: {F.SEC_TITLE} is damaged ("), lines[0]
    assert "differs from its row digest" in lines[0]


def test_verify_recomputes_every_row_digest(pack: Path, tmp_path: Path) -> None:
    assert verify_pack(pack).findings == []
    with h5py.File(pack, "r") as h:
        stored = h[F.ROW_SEC_TITLE][()]
        titles = h[F.SEC_TITLE][()]
    assert (stored == row_digests(titles)).all()
    wrong = stored.copy()
    wrong[1] ^= 1
    bad = rewritten(pack, tmp_path / "rows.kbpack", F.ROW_SEC_TITLE, wrong)
    found = {(f.code, f.path) for f in verify_pack(bad).findings}
    assert found == {("row-digests", F.ROW_SEC_TITLE)}
    # a reader trusting that digest refuses the (intact) title rather than show it unchecked
    code, _, err = run("query", str(bad), "A-17 suction", "--mode", "bm25")
    assert code == 1 and "differs from its row digest" in err
