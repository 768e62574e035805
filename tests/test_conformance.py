"""The spec is complete: an independent reader (tests/independent_reader.py, no kbpack import)
reads packs, checks the bytes against the manifest and rebuilds every chunk's content."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np

from kbpack.pack.read import PackReader
from tests import independent_reader as ind
from tests.packs import ITALIAN, SAMPLE, failed_doc, markdown_doc, write_pack

GOLDEN = sorted((Path(__file__).parent.parent / "fixtures" / "golden").glob("*.kbpack"))


def test_independent_reader_imports_no_kbpack() -> None:
    tree = ast.parse(Path(ind.__file__).read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not any(m.startswith("kbpack") for m in imported)


def _agree(path: Path) -> int:
    manifest = ind.read_manifest(str(path))
    assert ind.check_bytes(str(path), manifest)
    chunks = ind.read_chunks(str(path))
    assert len(chunks) == manifest["counts"]["chunks"]
    with PackReader(path) as r:
        for i, c in enumerate(chunks):
            assert c.content == r.chunk_content(i)
            assert c.content.strip() == c.content and c.content
    pieces = ind.read_pieces(str(path))
    assert len(pieces) == manifest["counts"].get("pieces", 0)
    for p in pieces:  # spec §3.9: inside its chunk, trimmed, a unit vector
        c = chunks[p.chunk]
        assert c.start <= p.start < p.end <= c.end
        assert p.content == p.content.strip() and p.content in c.content
        assert abs(float(np.linalg.norm(p.vector)) - 1.0) < 1e-2
    copies = ind.read_copies(str(path))  # spec §3.10: exact flags say the truth
    assert (copies is None) == ("copies" not in manifest["counts"])
    for group in copies or []:
        assert len(group) >= 2 and [c for c, _, _ in group] == sorted({c for c, _, _ in group})
        assert all(exact == equal for _, exact, equal in group)
    manifest = ind.read_manifest(str(path))
    assert ind.storage_violations(str(path), manifest["format_version"]) == []
    dense = ind.dense_check(str(path))  # spec §3.7.1: the rule's terms, rows = postings
    assert (dense is None) == ("dense_terms" not in manifest["counts"])
    rows = ind.row_digest_check(str(path))  # spec §3.11: every row's digest is its own
    assert (
        rows is None or rows == 3 * manifest["counts"]["documents"] + manifest["counts"]["sections"]
    )
    lengths, terms = ind.tokenize_check(str(path))
    assert terms == sorted(terms, key=lambda t: t.encode()) and (lengths >= 1).all()
    return len(chunks)


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
    assert _agree(p) > 3


def test_independent_reader_on_every_golden_pack() -> None:
    assert GOLDEN, "fixtures/golden/ must hold a pack of every format version"
    for p in GOLDEN:
        assert _agree(p) > 0, p
