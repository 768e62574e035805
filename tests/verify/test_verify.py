"""kbpack verify on intact packs and on packs that break one rule each: the finding code, the
element it names and the exit code are what a user or a script relies on."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from kbpack.cli.main import cli
from kbpack.pack import format as F
from kbpack.pack.manifest import read_header
from kbpack.pack.storage import data_spans
from kbpack.verify.pipeline import verify_pack
from tests.fixture_pack import codes, edited, make_pack, with_fixed_digests


def run(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return r.exit_code, r.output


@pytest.fixture(scope="module")
def pack(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_pack(tmp_path_factory.mktemp("v") / "good.kbpack")


# -- intact packs ------------------------------------------------------------------------------


def test_intact_dense_pack_passes_every_step(pack: Path) -> None:
    report = verify_pack(pack)
    assert report.findings == []
    assert report.status == {
        "bytes": "ok",
        "signature": "skipped",
        "structure": "ok",
        "digests": "ok",
        "invariants": "ok",
    }
    n = read_header(pack).manifest.counts["chunks"]
    assert report.stats["chunks"] == n and report.stats["vectors"] == n
    assert report.stats["bm25_retokenised"] == n  # small pack: every chunk re-tokenised


def test_intact_bm25_only_pack_passes(tmp_path: Path) -> None:
    p = make_pack(tmp_path / "bm25.kbpack", dense=False)
    assert verify_pack(p).intact


def test_cli_human_report_and_exit_zero(pack: Path) -> None:
    code, out = run("verify", str(pack))
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == str(pack)
    assert [ln.split()[0] for ln in lines[1:6]] == list(
        ("bytes", "signature", "structure", "digests", "invariants")
    )
    assert lines[-1] == "intact"


def test_cli_json_report(pack: Path) -> None:
    code, out = run("verify", str(pack), "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["intact"] is True and doc["findings"] == []
    assert doc["steps"]["digests"]["status"] == "ok"


def test_quick_stops_after_structure(pack: Path) -> None:
    report = verify_pack(pack, quick=True)
    assert report.intact
    assert report.status["digests"] == report.status["invariants"] == "skipped"
    code, out = run("verify", str(pack), "--quick")
    assert code == 0 and "quick" in out.splitlines()[-1]


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    r = CliRunner().invoke(cli, ["verify", str(tmp_path / "missing.kbpack")])
    assert r.exit_code == 2 and "no such file" in r.output
    r = CliRunner().invoke(cli, ["verify", str(tmp_path)])
    assert r.exit_code == 2


def test_not_a_pack_is_a_finding(tmp_path: Path) -> None:
    p = tmp_path / "notes.txt"
    p.write_text("hello")
    code, out = run("verify", str(p))
    assert code == 1
    assert "not-a-pack header: no kbpack magic at byte 0" in out


def test_read_only_copy_verifies(pack: Path, tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    copy = ro / "pack.kbpack"
    shutil.copyfile(pack, copy)
    os.chmod(copy, 0o444)
    os.chmod(ro, 0o555)
    try:
        assert verify_pack(copy).intact
        assert oct(stat.S_IMODE(copy.stat().st_mode)) == "0o444"
        if os.geteuid() == 0:  # modes do not stop root: prove it on a read-only mount too
            _verify_on_read_only_mount(ro, copy)
    finally:
        os.chmod(ro, 0o755)


def _verify_on_read_only_mount(folder: Path, pack: Path) -> None:
    if not shutil.which("unshare"):
        pytest.skip("root without unshare: cannot make a read-only mount")
    cli = f'{sys.executable} -c "from kbpack.cli.main import main; main()"'
    script = (
        f'mount --bind -o ro "{folder}" "{folder}" || exit 99; '
        f'touch "{folder}/probe" 2>/dev/null && exit 98; '
        f'exec {cli} verify "{pack}"'
    )
    r = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, timeout=120)
    if r.returncode == 99:
        pytest.skip("no permission to make a read-only mount here")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.decode().splitlines()[-1] == "intact"


# -- step 1: bytes -----------------------------------------------------------------------------


def test_damaged_data_is_found_and_the_element_named(pack: Path, tmp_path: Path) -> None:
    # flip one byte inside /chunks/from's stored data, without restamping anything
    bad = tmp_path / "flip.kbpack"
    shutil.copyfile(pack, bad)
    with h5py.File(pack, "r") as h:
        offset, size = data_spans(h[F.CHUNK_FROM])[0]
    with open(bad, "r+b") as f:
        f.seek(offset + size // 2)
        b = f.read(1)
        f.seek(offset + size // 2)
        f.write(bytes([b[0] ^ 0x40]))
    found = codes(bad)
    assert ("hash-mismatch", "header") in found
    # format 2: HDF5's own checksum refuses the read (format 1: the digest differs)
    assert ("element-unreadable", F.CHUNK_FROM) in found


def test_truncated_and_appended(pack: Path, tmp_path: Path) -> None:
    data = pack.read_bytes()
    short = tmp_path / "short.kbpack"
    short.write_bytes(data[:-100])
    long = tmp_path / "long.kbpack"
    long.write_bytes(data + b"\0" * 4096)
    for p, word in ((short, "truncated"), (long, "bytes appended")):
        found = verify_pack(p).findings
        assert found[0].code == "size-mismatch" and word in found[0].detail


def test_dirty_header_padding(pack: Path, tmp_path: Path) -> None:
    bad = tmp_path / "pad.kbpack"
    data = bytearray(pack.read_bytes())
    data[F.USERBLOCK_SIZE - 10] = 1
    bad.write_bytes(data)
    assert ("header-damaged", "header") in codes(bad)


def test_newer_format_says_upgrade(pack: Path, tmp_path: Path) -> None:
    p = edited(pack, tmp_path, lambda h: None, format_version=F.FORMAT_VERSION + 1)
    f = verify_pack(p).findings[0]
    assert f.code == "newer-format" and "Upgrade kbpack" in f.detail


# -- step 4: digests ---------------------------------------------------------------------------


def test_consistent_bytes_but_wrong_element_digest(pack: Path, tmp_path: Path) -> None:
    def edit(h: h5py.File) -> None:
        h[F.CHUNK_TOKENS][0] = 999

    p = edited(pack, tmp_path, edit)
    assert codes(p) == {("digest-mismatch", F.CHUNK_TOKENS)}


def test_changed_attribute_is_named(pack: Path, tmp_path: Path) -> None:
    def edit(h: h5py.File) -> None:
        h[F.SEARCH].attrs[F.SEARCH_MAX_DISTANCE] = 1.9

    p = edited(pack, tmp_path, edit)
    assert codes(p) == {("digest-mismatch", F.SEARCH)}


def test_manifest_digest_entries_must_match_the_elements(pack: Path, tmp_path: Path) -> None:
    elements = dict(read_header(pack).manifest.elements)
    elements["/chunks/frum"] = elements.pop(F.CHUNK_FROM)
    p = edited(pack, tmp_path, lambda h: None, elements=elements)
    assert codes(p) == {("digest-missing", F.CHUNK_FROM), ("digest-orphan", "/chunks/frum")}


# -- step 5: invariants ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "edit", "expected"),
    [
        (
            "offset past the end",
            lambda h: h[F.CHUNK_TO].__setitem__(0, 10**6),
            ("offset-out-of-range", F.CHUNK_TO),
        ),
        (
            "chunks out of order",
            lambda h: h[F.CHUNK_FROM].__setitem__(2, 0),
            ("chunk-order", F.CHUNK_FROM),
        ),
        (
            "section outside its parent",
            lambda h: h[F.SEC_TO].__setitem__(1, 10**4),
            ("offset-out-of-range", F.SEC_TO),
        ),
        (
            "section parent in another document",
            lambda h: h[F.SEC_PARENT].__setitem__(3, 1),
            ("section-parent", F.SEC_PARENT),
        ),
        (
            "two roots",
            lambda h: h[F.SEC_PARENT].__setitem__(1, -1),
            ("section-root", F.SEC_PARENT),
        ),
        (
            "page order",
            lambda h: h[F.PAGE_NUMBER].__setitem__(2, 1),
            ("page-order", F.PAGE_NUMBER),
        ),
        (
            "failed document without a reason",
            lambda h: h[F.DOC_REASON].__setitem__(2, ""),
            ("failed-without-reason", F.DOC_REASON),
        ),
        (
            "canonical text changed",
            lambda h: h[F.DOC_TEXT].__setitem__(0, "Pump maintenance guide, edited"),
            ("text-digest-mismatch", F.DOC_TEXT_SHA256),
        ),
        (
            "doc_len lies",
            lambda h: h[F.BM25_DOC_LEN].__setitem__(0, 99),
            ("bm25-doc-len", F.BM25_DOC_LEN),
        ),
        (
            "model dims",
            lambda h: h[F.MODEL].attrs.__setitem__(F.M_DIMS, 16),
            ("dims-mismatch", F.VEC_DATA),
        ),
        (
            "postings out of order",
            lambda h: h[F.BM25_CHUNK].__setitem__(0, h[F.BM25_CHUNK][0] + 5),
            ("bm25-postings", F.BM25_CHUNK),
        ),
        (
            "a common term's dense tf row differs from its postings",
            lambda h: h[F.BM25_DENSE_TF].__setitem__(0, h[F.BM25_DENSE_TF][0] + 1),
            ("bm25-dense", F.BM25_DENSE_TF),
        ),
        (
            "dense rows of a term the rule does not pick",
            lambda h: h[F.BM25_DENSE_TERMS].__setitem__(0, h[F.BM25_DENSE_TERMS][0] + 1),
            ("bm25-dense", F.BM25_DENSE_TERMS),
        ),
        (
            "tf and doc_len agree with each other but not with the text",
            lambda h: (
                h[F.BM25_TF].__setitem__(0, h[F.BM25_TF][0] + 1),
                h[F.BM25_DOC_LEN].__setitem__(
                    h[F.BM25_CHUNK][0], h[F.BM25_DOC_LEN][h[F.BM25_CHUNK][0]] + 1
                ),
            ),
            ("bm25-content-mismatch", F.BM25_CHUNK),
        ),
    ],
)
def test_invariant_violation_is_named(
    pack: Path, tmp_path: Path, name: str, edit: Callable[[h5py.File], None], expected: Any
) -> None:
    p = with_fixed_digests(pack, tmp_path, edit)
    found = codes(p)
    assert expected in found, (name, found)
    assert not any(c.startswith("digest") or c == "hash-mismatch" for c, _ in found)


def test_nan_vectors(tmp_path: Path) -> None:
    def nan(v: np.ndarray) -> None:
        v[1, 3] = np.nan

    p = make_pack(tmp_path / "nan.kbpack", mutate_vectors=nan)
    found = verify_pack(p).findings
    assert [(f.code, f.path) for f in found] == [("vector-not-finite", F.VEC_DATA)]
    assert "rows 1" in found[0].detail


def test_vectors_not_unit_norm(tmp_path: Path) -> None:
    def scale(v: np.ndarray) -> None:
        v[0] *= 1.5

    p = make_pack(tmp_path / "norm.kbpack", mutate_vectors=scale)
    assert codes(p) == {("vector-norm", F.VEC_DATA)}


def test_dims_differ_from_the_model_stamp(tmp_path: Path) -> None:
    p = make_pack(tmp_path / "dims.kbpack", dims=8, model_dims=16)
    assert ("dims-mismatch", F.VEC_DATA) in codes(p)


def test_offsets_past_the_end_written_by_a_buggy_writer(tmp_path: Path) -> None:
    from dataclasses import replace

    def stretch(doc: Any, chunks: list[Any]) -> list[Any]:
        if chunks:
            chunks[-1] = replace(chunks[-1], end=len(doc.text) + 5)
        return chunks

    p = make_pack(tmp_path / "past.kbpack", mutate_chunks=stretch)
    found = verify_pack(p).findings
    assert {(f.code, f.path) for f in found} >= {("offset-out-of-range", F.CHUNK_TO)}
    assert not any(f.code.startswith("digest") for f in found)


def test_manifest_fields_must_agree_with_the_pack(pack: Path, tmp_path: Path) -> None:
    p = edited(pack, tmp_path, lambda h: None, created="2026-11-30T12:00:01+00:00")
    assert codes(p) == {("manifest-mismatch", "header")}
    counts = dict(read_header(pack).manifest.counts)
    counts["documents_failed"] += 1
    p = edited(pack, tmp_path, lambda h: None, counts=counts)
    assert codes(p) == {("count-mismatch", "header/counts/documents_failed")}


def test_every_finding_code_is_documented_and_every_documented_code_is_used() -> None:
    import ast

    from kbpack.pack import set_publish, structure
    from kbpack.runtime import sandbox
    from kbpack.verify import (
        digests,
        exam_state,
        examine,
        file_bytes,
        pipeline,
        signature,
    )
    from kbpack.verify.invariants import (
        bm25,
        bm25_dense,
        copies,
        manifest,
        pieces,
        row_digests,
        text,
        vectors,
    )

    emitted: set[str] = set()
    # every module that emits verify findings
    modules = [pipeline, file_bytes, signature, sandbox, structure, examine, exam_state]
    modules += [digests, text, manifest, vectors, pieces, copies, row_digests, bm25, bm25_dense]
    modules += [set_publish]  # a set member's findings on its siblings
    for module in modules:
        tree = ast.parse(Path(module.__file__ or "").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and node.args:
                name = getattr(node.func, "id", getattr(node.func, "attr", ""))
                first = node.args[0]
                if name in {"Finding", "_f", "add", "_rows", "SandboxFailure"} and isinstance(
                    first, ast.Constant
                ):
                    emitted.add(first.value)
            if isinstance(node, ast.Dict):
                for k, v in zip(node.keys, node.values, strict=True):
                    if isinstance(k, ast.Constant) and k.value == "error":
                        assert isinstance(v, ast.Constant)
                        emitted.add(v.value)
    emitted -= set(pipeline.STEPS)  # report.add(step, ...) calls
    assert emitted == set(pipeline.CODES)


def test_sandbox_turns_crash_hang_and_memory_blowup_into_failures() -> None:
    import signal as sig
    import time

    from kbpack.runtime.sandbox import Limits, SandboxFailure, run_isolated

    def crash() -> None:
        os.kill(os.getpid(), sig.SIGSEGV)

    def hang() -> None:
        time.sleep(3600)

    def hog() -> int:
        return len(bytearray(2**31))

    def write_file() -> None:
        Path("/tmp/kbpack-sandbox-should-not-exist").write_bytes(b"x" * 10)

    for fn, code in (
        (crash, "sandbox-crash"),
        (hang, "sandbox-timeout"),
        (hog, "sandbox-memory"),
        (write_file, "hdf5-unreadable"),  # the child may not write files
    ):
        with pytest.raises(SandboxFailure) as e:
            run_isolated(fn, (), Limits(timeout_s=2, memory_bytes=2**28))
        assert e.value.code == code, (fn.__name__, e.value.detail)
    assert run_isolated(lambda a, b: a + b, (2, 3), Limits()) == 5


def test_bm25_sample_and_deep(pack: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kbpack.verify import pipeline

    monkeypatch.setattr(pipeline, "BM25_SAMPLE", 4)
    n = read_header(pack).manifest.counts["chunks"]
    report = verify_pack(pack)
    assert report.intact and report.stats["bm25_retokenised"] == 4
    assert f"BM25 re-tokenised 4 of {n} chunks (--deep: all)" in report.summary["invariants"]
    assert verify_pack(pack, deep=True).stats["bm25_retokenised"] == n


def test_not_a_regular_file(tmp_path: Path) -> None:
    from kbpack.errors import UsageError

    fifo = tmp_path / "fifo.kbpack"
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match="not a regular file"):
        verify_pack(fifo)
