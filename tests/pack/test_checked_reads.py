"""Checked reads (format 2): a command that reads damaged data says so in one line naming the
pack and the element, exits 1, and never shows the damaged bytes as if they were written.

Each test flips one bit of a real pack built with the real llama.cpp on a tiny model, inside
the stored bytes of one element, and does *not* run verify first: this is the user who copied
a pack and queried it straight away.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import h5py
import pytest
from click.testing import CliRunner

from kbpack.cli.main import cli
from kbpack.pack import format as F
from kbpack.pack.read import PackReader
from kbpack.pack.storage import compressed, data_spans
from tests.fixture_pack import restamp

DOCS = {
    "pumps.md": "# Pumps\n\nThe seal of pump P-101 is checked every 500 hours.\n\n"
    "## Alarms\n\nAlarm A-17 means low suction pressure at the inlet.\n",
    "valves.md": "# Valves\n\nValve V-3 opens the bypass line to the reservoir.\n",
}


def run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(cli, list(args))
    return r.exit_code, r.stdout, r.stderr


@pytest.fixture(scope="module")
def pack(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Path:
    src = tmp_path_factory.mktemp("docs")
    for name, text in DOCS.items():
        (src / name).write_text(text)
    out = tmp_path_factory.mktemp("checked") / "p.kbpack"
    code, _, err = run("build", str(src), "-o", str(out), "--model", str(tiny_model), "-q")
    assert code == 0, err
    return out


def flipped(pack: Path, tmp_path: Path, offset: int, bit: int = 2) -> Path:
    bad = tmp_path / "flipped.kbpack"
    shutil.copyfile(pack, bad)
    with open(bad, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ (1 << bit)]))
    return bad


def flip_inside(pack: Path, tmp_path: Path, element: str) -> Path:
    with h5py.File(pack, "r") as h:
        offset, size = data_spans(h[element])[0]
    return flipped(pack, tmp_path, offset + size // 2)


def assert_one_line_naming(err: str, path: Path, element: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"kbpack: error: {path}: {element} is damaged ("), lines[0]
    assert "kbpack verify" in lines[0]


def test_the_pack_is_stored_as_format_2_says(pack: Path) -> None:
    """Every numeric dataset checksummed; integer and byte columns also compressed."""
    with h5py.File(pack, "r") as h:
        for el in F.ELEMENTS:
            if not el.dtype or el.path not in h:
                continue
            ds = h[el.path]
            if el.dtype == "str":
                assert not ds.fletcher32 and ds.compression is None, el.path
                continue
            assert ds.fletcher32, el.path
            assert (ds.compression == "gzip") == compressed(el.path), el.path
            assert ds.shuffle == compressed(el.path), el.path
        assert h[F.VEC_DATA].compression is None and h[F.BM25_CHUNK].compression == "gzip"


def test_a_flip_in_the_canonical_text_is_never_quoted(pack: Path, tmp_path: Path) -> None:
    data = pack.read_bytes()
    at = data.index(b"low suction pressure")
    bad = flipped(pack, tmp_path, at + 4)
    code, out, err = run("query", str(bad), "A-17", "--mode", "bm25")
    assert code == 1 and "suction" not in out
    assert_one_line_naming(err, bad, F.DOC_TEXT)
    assert "row 0 differs from its text_sha256" in err


@pytest.mark.parametrize("element", [F.BM25_CHUNK, F.BM25_TF])
def test_a_flip_in_the_postings_fails_the_bm25_query(
    pack: Path, tmp_path: Path, element: str
) -> None:
    bad = flip_inside(pack, tmp_path, element)
    code, _, err = run("query", str(bad), "valve", "--mode", "bm25")
    assert code == 1
    assert_one_line_naming(err, bad, element)


def test_a_flip_in_the_vectors_fails_the_dense_query(
    pack: Path, tmp_path: Path, tiny_model: Path
) -> None:
    bad = flip_inside(pack, tmp_path, F.VEC_DATA)
    code, _, err = run("query", str(bad), "valve", "--mode", "dense", "--model", str(tiny_model))
    assert code == 1
    assert_one_line_naming(err, bad, F.VEC_DATA)


def test_a_flip_in_chunk_offsets_fails_export(pack: Path, tmp_path: Path) -> None:
    bad = flip_inside(pack, tmp_path, F.CHUNK_FROM)
    code, out, err = run("export", str(bad), "--what", "chunks")
    assert code == 1 and out == ""
    assert_one_line_naming(err, bad, F.CHUNK_FROM)


@pytest.mark.parametrize("element", [F.CHUNK_FROM, F.CHUNK_SECTION, F.SEC_PARENT])
def test_a_flip_in_a_column_a_citation_reads_fails_the_query(
    pack: Path, tmp_path: Path, element: str
) -> None:
    """A citation reads its own rows of these columns (part reads, PackReader.value): the
    HDF5 chunk holding them is still checked (Fletcher-32, filter mask)."""
    bad = flip_inside(pack, tmp_path, element)
    code, out, err = run("query", str(bad), "A-17", "--mode", "bm25")
    assert code == 1 and "suction" not in out
    assert_one_line_naming(err, bad, element)


def test_a_changed_string_column_is_caught_by_its_digest(pack: Path, tmp_path: Path) -> None:
    """A title rewritten behind the manifest's back (the bytes' own SHA-256 restamped, as a
    flip in HDF5's heap plus a forged header would look): the column digest refuses it."""
    bad = tmp_path / "retitled.kbpack"
    shutil.copyfile(pack, bad)
    with h5py.File(bad, "r+") as h:
        h[F.SEC_TITLE][1] = "Alarns"
    restamp(bad)
    with PackReader(bad) as r:
        assert r.counts["chunks"] > 0  # opening is fine: data is checked when it is read
    code, _, err = run("query", str(bad), "A-17", "--mode", "bm25")
    assert code == 1
    assert_one_line_naming(err, bad, F.SEC_TITLE)


def test_an_intact_pack_reads_the_same_through_the_checks(pack: Path) -> None:
    code, out, err = run("query", str(pack), "bypass", "--mode", "bm25")
    assert code == 0, (out, err)
    assert "bypass" in out


def test_a_format_2_dataset_without_its_checksum_is_refused(pack: Path, tmp_path: Path) -> None:
    """Stripping the checksum filter would turn checked reads off: the reader refuses it."""
    from kbpack.verify.pipeline import verify_pack

    bad = tmp_path / "unchecked.kbpack"
    shutil.copyfile(pack, bad)
    with h5py.File(bad, "r+") as h:
        old = h[F.CHUNK_TOKENS]
        data, attrs = old[()], dict(old.attrs)
        del h[F.CHUNK_TOKENS]
        new = h.create_dataset(F.CHUNK_TOKENS, data=data)  # contiguous, unfiltered: format 1
        new.attrs.update(attrs)
    restamp(bad)
    code, _, err = run("query", str(bad), "bypass", "--mode", "bm25")
    assert code == 1
    assert f"refused: checksum-missing {F.CHUNK_TOKENS}: format 2 stores" in err
    found = {(f.code, f.path) for f in verify_pack(bad).findings}
    assert ("checksum-missing", F.CHUNK_TOKENS) in found


@pytest.mark.parametrize("command", ["inspect", "export", "query"])
def test_a_damaged_manifest_key_is_one_line(pack: Path, tmp_path: Path, command: str) -> None:
    """One flipped bit turns `documents_skipped` into `documents_s{ipped`: the header still
    parses, and every command says the manifest is damaged instead of a KeyError."""
    bad = tmp_path / "key.kbpack"
    data = bytearray(pack.read_bytes())
    at = data.index(b"documents_skipped") + len("documents_s")
    data[at] ^= 0x12  # "k" -> "y"
    bad.write_bytes(bytes(data))
    args = [command, str(bad)] + (["valve"] if command == "query" else [])
    code, out, err = run(*args)
    assert code == 1 and out == ""
    assert err.strip().splitlines() == [
        f"kbpack: error: {bad}: the manifest is damaged (counts lack documents_skipped; name "
        f"unknown documents_syipped); run kbpack verify {bad}, then copy the pack again"
    ]


def test_documents_texts_kept_within_a_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long-running reader (a server's worker) keeps at most TEXT_CACHE_CHARS of documents'
    texts, least recently used out first; a text read again is read and checked again, and is
    the same text."""
    import kbpack.pack.read_strings as strings
    from tests.packs import markdown_doc, write_pack

    texts = [f"# Doc {i}\n\n" + f"word{i} " * (100 + i) for i in range(6)]
    out = tmp_path / "six.kbpack"
    write_pack(out, [markdown_doc(f"d{i}.md", t) for i, t in enumerate(texts)])
    monkeypatch.setattr(strings, "TEXT_CACHE_CHARS", 2 * len(texts[-1]))
    with PackReader(out) as r:
        for _ in range(2):
            for i, want in enumerate(texts):
                assert r.text(i) == want
        kept = r.string_rows._texts
        assert sum(map(len, kept.values())) <= strings.TEXT_CACHE_CHARS
        assert list(kept) == [4, 5]  # the two read last
        assert r.text(4) == texts[4] and list(kept) == [5, 4]  # a hit moves to the end
        r.forget_text(4)
        assert list(kept) == [5] and r.string_rows._text_chars == len(texts[5])
