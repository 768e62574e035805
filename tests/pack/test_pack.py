"""The writer and the reader: round trip, atomicity, refusals, misuse."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

from kbpack.errors import NewerFormatError, PackError
from kbpack.pack import format as F
from kbpack.pack.manifest import encode_header, read_header, write_header
from kbpack.pack.read import PackReader
from kbpack.pack.write import PackWriter
from tests.packs import ITALIAN, SAMPLE, failed_doc, markdown_doc, write_pack


@pytest.fixture
def pack(tmp_path: Path) -> Path:
    out = tmp_path / "t.kbpack"
    write_pack(
        out,
        [
            markdown_doc("logs.md", SAMPLE),
            failed_doc("scan.pdf", "no extractable text"),
            markdown_doc("it/guida.md", ITALIAN),
        ],
        dims=8,
    )
    return out


def test_round_trip_keeps_text_offsets_and_counts(pack: Path) -> None:
    with PackReader(pack) as r:
        c = r.counts
        assert (c["documents"], c["documents_ok"], c["documents_failed"]) == (3, 2, 1)
        assert r.strings(F.DOC_NAME) == ["logs.md", "scan.pdf", "it/guida.md"]
        assert r.text(0) == SAMPLE and r.text(2) == ITALIAN and r.text(1) == ""
        assert r.strings(F.DOC_REASON)[1] == "no extractable text"
        docs = r.column(F.CHUNK_DOCUMENT)
        assert len(docs) == c["chunks"] == c["vectors"] > 0
        for i in range(len(docs)):
            content = r.chunk_content(i)
            assert content and content == content.strip()
            assert content in (SAMPLE, ITALIAN)[0 if docs[i] == 0 else 1]
        v = r.vectors()
        assert v.dtype == np.float32 and v.shape == (c["chunks"], 8)
        assert np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-2)
        assert r.model is not None and r.model["dims"] == 8
        assert r.section_path(int(r.column(F.CHUNK_SECTION)[-1])) == ["Guida", "Perché è lento?"]


def test_every_element_describes_itself(pack: Path) -> None:
    with PackReader(pack) as r:

        def check(name: str, obj: object) -> None:
            attrs = obj.attrs  # type: ignore[attr-defined]
            assert attrs[F.A_KIND] and attrs[F.A_VERSION] == 1 and attrs[F.A_DESCRIPTION], name

        r.h5.visititems(check)
        assert r.root_attrs[F.R_FORMAT_VERSION] == F.FORMAT_VERSION


def test_manifest_records_size_and_digest(pack: Path) -> None:
    from kbpack.pack.manifest import hash_hdf5_bytes

    m = read_header(pack).manifest
    assert m.file_size == pack.stat().st_size
    assert hash_hdf5_bytes(pack) == (m.file_size, m.hdf5_sha256)
    assert F.CHUNK_FROM in m.elements and F.DOC_TEXT in m.elements and "/@attrs" in m.elements


def test_newer_format_is_refused_with_upgrade_hint(pack: Path) -> None:
    raw = pack.read_bytes()
    (m_len,) = struct.unpack_from("<Q", raw, 8)
    doc = json.loads(raw[16 : 16 + m_len])
    doc["format_version"] = F.FORMAT_VERSION + 1
    body = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    write_header(pack, encode_header(body))
    with pytest.raises(
        NewerFormatError,
        match=rf"format {F.FORMAT_VERSION + 1} is newer than this kbpack reads "
        rf"\({F.FORMAT_VERSION}\)\. Upgrade kbpack\.",
    ):
        PackReader(pack)


@pytest.mark.parametrize("change", ["truncate", "append"])
def test_size_mismatch_is_refused_before_hdf5(pack: Path, change: str) -> None:
    raw = pack.read_bytes()
    pack.write_bytes(raw[:-100] if change == "truncate" else raw + b"\0" * 4096)
    with pytest.raises(PackError, match="truncated" if change == "truncate" else "bytes appended"):
        PackReader(pack)


def test_not_a_pack(tmp_path: Path) -> None:
    p = tmp_path / "x.kbpack"
    p.write_bytes(b"hello" * 100)
    with pytest.raises(PackError, match="not a kbpack pack"):
        PackReader(p)


def test_abort_leaves_existing_pack_untouched_and_no_temp_files(pack: Path, tmp_path: Path) -> None:
    before = pack.read_bytes()
    with pytest.raises(KeyboardInterrupt), PackWriter(pack) as w:
        w.add_document(markdown_doc("a.md", SAMPLE))
        raise KeyboardInterrupt
    assert pack.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.kbpack"]


def test_writer_refuses_misuse(tmp_path: Path) -> None:
    w = PackWriter(tmp_path / "m.kbpack")
    with pytest.raises(RuntimeError, match="set_postings"):
        w.commit()
    w.abort()
    with pytest.raises(RuntimeError, match="cannot add a document when aborted"):
        w.add_document(markdown_doc("a.md", SAMPLE))


def test_duplicate_names_are_refused(tmp_path: Path) -> None:
    from kbpack.errors import KbpackError

    with PackWriter(tmp_path / "d.kbpack") as w:
        w.add_document(markdown_doc("a.md", SAMPLE))
        with pytest.raises(KbpackError, match="same document name"):
            w.add_document(markdown_doc("a.md", SAMPLE))


def test_reader_works_on_read_only_copy(pack: Path, tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    target = ro / "t.kbpack"
    shutil.copy(pack, target)
    target.chmod(0o444)
    ro.chmod(0o555)
    try:
        with PackReader(target) as r:
            assert r.counts["documents"] == 3
    finally:
        ro.chmod(0o755)


@pytest.mark.skipif(
    shutil.which("h5dump") is None, reason="h5dump (Debian hdf5-tools) not installed"
)
def test_h5dump_reads_a_fresh_pack(pack: Path) -> None:
    """HDF5 1.10+ tools open packs (libver bounded to v110), user block included."""
    out = subprocess.run(
        ["h5dump", "-B", "-A", str(pack)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert "kbpack:kind" in out.stdout and "USER_BLOCK" in out.stdout
