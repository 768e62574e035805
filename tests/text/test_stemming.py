"""Issue 13 item 3: BM25 with a recorded analyzer. ``build --analyzer snowball-english`` stems
plain English words (``orphan`` finds ``orphaning``) while identifiers and codes stay exact; the
pack records its analyzer and every reader, merger and verifier follows it."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import pytest

from kbpack.cli.main import main
from kbpack.pack.read import PackReader
from kbpack.text.analyze import SNOWBALL_ENGLISH, analyzer, tokenize
from tests import independent_reader as ind

DOCS = {
    "debian.md": "# Packaging\n\nRun dh_make once in the source tree to create the debian folder.\n",
    "windows.md": "# Errors\n\nError 0x80070006 means the handle is invalid; restart the service.\n",
    "zfs.md": "# Pools\n\nOrphaning a dataset leaves its snapshots behind until you destroy them.\n",
    "make.md": "# Building\n\nThe makers of the tool explain how making a release works.\n",
}


def run(capfd: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as e:
        main(list(args))
    out, err = capfd.readouterr()
    return int(e.value.code or 0), out, err


def build(root: Path, name: str, *extra: str) -> Path:
    src = root / "src"
    if not src.exists():
        src.mkdir()
        for doc, text in DOCS.items():
            (src / doc).write_text(text)
    out = root / name
    with pytest.raises(SystemExit) as e:
        main(["build", str(src), "-o", str(out), "--no-vectors", "-q", *extra])
    assert e.value.code == 0
    return out


@pytest.fixture(scope="module")
def packs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("stem")
    return build(root, "stem.kbpack", "--analyzer", "snowball-english"), build(root, "plain.kbpack")


def top_docs(capfd: pytest.CaptureFixture[str], pack: Path, *query: str) -> list[str]:
    code, out, _ = run(capfd, "query", str(pack), "--mode", "bm25", "--json", *query)
    assert code in (0, 3)
    return [r["doc"] for r in json.loads(out)["results"]]


def test_orphan_finds_orphaning_only_in_a_stemmed_pack(
    capfd: pytest.CaptureFixture[str], packs: tuple[Path, Path]
) -> None:
    stem, plain = packs
    assert top_docs(capfd, stem, "orphan")[:1] == ["zfs.md"]
    assert "zfs.md" not in top_docs(capfd, plain, "orphan")


def test_identifiers_and_codes_are_found_as_typed(
    capfd: pytest.CaptureFixture[str], packs: tuple[Path, Path]
) -> None:
    stem, _ = packs
    assert top_docs(capfd, stem, "0x80070006")[:1] == ["windows.md"]
    assert top_docs(capfd, stem, "dh_make")[:1] == ["debian.md"]
    # a code is never stemmed: its only terms are the surface ones
    terms = analyzer(SNOWBALL_ENGLISH).terms("dh_make 0x80070006 camelCase NTFS --strict")
    assert terms == tokenize("dh_make 0x80070006 camelCase NTFS --strict")
    assert analyzer(SNOWBALL_ENGLISH).terms("Orphaning") == ["orphaning", "~orphan"]


def test_the_pack_records_its_analyzer(packs: tuple[Path, Path]) -> None:
    stem, plain = packs
    with PackReader(stem) as r:
        assert r.bm25_analyzer == SNOWBALL_ENGLISH
    with PackReader(plain) as r:
        assert r.bm25_analyzer is None  # absent: the plain tokenizer, as before
    with h5py.File(plain, "r") as f:
        assert "analyzer" not in f["/bm25"].attrs
    name, stems = ind.analyzer_check(str(stem))
    _, vocab = ind.tokenize_check(str(stem))
    assert name == SNOWBALL_ENGLISH and "~snapshot" in stems and stems <= set(vocab)
    assert ind.analyzer_check(str(plain)) == (None, set())


def test_inspect_shows_the_analyzer(
    capfd: pytest.CaptureFixture[str], packs: tuple[Path, Path]
) -> None:
    for pack, want in zip(packs, (SNOWBALL_ENGLISH, "plain"), strict=True):
        code, out, _ = run(capfd, "inspect", str(pack), "--json")
        assert code == 0 and json.loads(out)["bm25"]["analyzer"] == want


def test_verify_retokenises_with_the_recorded_analyzer(
    capfd: pytest.CaptureFixture[str], packs: tuple[Path, Path]
) -> None:
    stem, _ = packs
    code, out, _ = run(capfd, "verify", str(stem), "--deep", "--json")
    assert code == 0, out


def test_no_stem_is_suggested_as_a_spelling(
    capfd: pytest.CaptureFixture[str], packs: tuple[Path, Path]
) -> None:
    stem, _ = packs
    _, out, _ = run(capfd, "query", str(stem), "--mode", "bm25", "--json", "snapshotz")
    got = [d["term"] for s in json.loads(out)["suggestions"] for d in s["did_you_mean"]]
    assert got == ["snapshots"]  # the surface word, never its stem "~snapshot"


def test_merge_and_federation_refuse_mixed_analyzers(
    capfd: pytest.CaptureFixture[str], packs: tuple[Path, Path], tmp_path: Path
) -> None:
    stem, plain = packs
    code, _, err = run(capfd, "merge", str(stem), str(plain), "-o", str(tmp_path / "m.kbpack"))
    assert code == 2 and "analyzer" in err and len(err.strip().splitlines()) == 1
    code, _, err = run(capfd, "query", str(stem), str(plain), "orphan")
    assert code == 2 and "analyzers differ" in err


def test_merge_update_and_migrate_keep_the_analyzer(
    capfd: pytest.CaptureFixture[str], packs: tuple[Path, Path], tmp_path: Path
) -> None:
    stem, _ = packs
    merged = tmp_path / "merged.kbpack"
    code, _, err = run(capfd, "merge", str(stem), "-o", str(merged), "-q")
    assert code == 0, err
    with PackReader(merged) as r:
        assert r.bm25_analyzer == SNOWBALL_ENGLISH
    assert top_docs(capfd, merged, "orphan")[:1] == ["zfs.md"]
    migrated = tmp_path / "migrated.kbpack"
    code, _, err = run(capfd, "migrate", str(stem), "-o", str(migrated), "-q")
    assert code == 0, err
    with PackReader(migrated) as r:
        assert r.bm25_analyzer == SNOWBALL_ENGLISH
    updated = tmp_path / "updated.kbpack"
    src = stem.parent / "src"
    code, _, err = run(capfd, "update", str(stem), str(src), "-o", str(updated), "-q")
    assert code == 0, err
    with PackReader(updated) as r:
        assert r.bm25_analyzer == SNOWBALL_ENGLISH  # no --analyzer: as the old pack
    code, _, err = run(
        capfd,
        "update",
        str(stem),
        str(src),
        "-o",
        str(tmp_path / "p.kbpack"),
        "-q",
        "--analyzer",
        "plain",
    )
    assert code == 0, err
    with PackReader(tmp_path / "p.kbpack") as r:
        assert r.bm25_analyzer is None


def test_an_unknown_analyzer_is_one_line_naming_the_pack(
    capfd: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from dataclasses import replace

    from kbpack.errors import PackError
    from kbpack.index.postings import PostingsBuilder
    from kbpack.pack.write import PackWriter
    from kbpack.text.analyze import Analyzer
    from tests.packs import SAMPLE, markdown_doc

    with pytest.raises(ValueError, match="unknown BM25 analyzer 'porter-9'"):
        Analyzer("porter-9")
    out = tmp_path / "future.kbpack"
    doc = markdown_doc("a.md", SAMPLE)
    from kbpack.index.chunk import ChunkConfig, chunk_document

    chunks = chunk_document(doc, None, ChunkConfig(window=None, max_chars=200)).chunks
    postings = PostingsBuilder()
    with PackWriter(out) as w:
        w.add_document(doc, chunks, None)
        for i, c in enumerate(chunks):
            postings.add(i, doc.text[c.start : c.end])
        w.set_postings(replace(postings.finish(w.n_chunks), analyzer="porter-9"))
        w.commit()
    with PackReader(out) as r, pytest.raises(PackError, match=r"future\.kbpack: /bm25 analyzer"):
        assert r.bm25_analyzer
    code, _, err = run(capfd, "query", str(out), "--mode", "bm25", "logs")
    assert (
        code == 1 and "analyzer 'porter-9' is unknown" in err and len(err.strip().splitlines()) == 1
    )
    code, out_json, _ = run(capfd, "verify", str(out), "--json")
    assert code == 1 and "bm25-tokenizer" in out_json
