"""The spec is complete: an independent reader (tests/independent_reader.py, no kbpack import)
reads packs, checks the bytes against the manifest and rebuilds every chunk's content."""

from __future__ import annotations

import ast
from pathlib import Path

from tests import independent_reader as ind
from tests.fixture_pack import agree_with_spec
from tests.packs import ITALIAN, SAMPLE, failed_doc, markdown_doc, write_pack
from tests.paths import REPO_ROOT

GOLDEN = sorted((REPO_ROOT / "fixtures" / "golden").glob("*.kbpack"))


def test_independent_reader_imports_no_kbpack() -> None:
    tree = ast.parse(Path(ind.__file__).read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not any(m.startswith("kbpack") for m in imported)


def test_independent_reader_on_fresh_pack(tmp_path: Path) -> None:
    p = tmp_path / "c.kbpack"
    write_pack(
        p,
        [
            markdown_doc("a.md", SAMPLE),
            failed_doc("b.pdf", "encrypted"),
            markdown_doc("c.md", ITALIAN),
        ],
        dims=4,
    )
    assert agree_with_spec(p) > 3


def test_independent_reader_on_every_golden_pack() -> None:
    assert GOLDEN, "fixtures/golden/ must hold a pack of every format version"
    for p in GOLDEN:
        assert agree_with_spec(p) > 0, p
