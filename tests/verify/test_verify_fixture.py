"""The pack fixture of tests/fixture_pack.py is what the other tests assume."""

from __future__ import annotations

from pathlib import Path

from tests.fixture_pack import make_pack


def test_fixture_pack_has_what_the_other_tests_assume(tmp_path: Path) -> None:
    from kbpack.pack.read import PackReader

    p = make_pack(tmp_path / "f.kbpack")
    with PackReader(p) as r:
        c = r.counts
        assert (c["documents"], c["documents_ok"], c["documents_failed"]) == (3, 2, 1)
        assert c["chunks"] >= 4 and c["vectors"] == c["chunks"] and c["pages"] == 3
        for i in range(c["chunks"]):
            assert r.chunk_content(i).strip()
