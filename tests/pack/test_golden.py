"""Golden packs of every format version: readable now and forever, by kbpack and by h5dump."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from kbpack.cli.main import cli
from kbpack.pack import format as F
from kbpack.pack.read import PackReader
from tests.paths import REPO_ROOT

GOLDEN_DIR = REPO_ROOT / "fixtures" / "golden"
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


# Known, explained differences between the v1 golden pack migrated and the v2 golden pack built
# fresh from the same sources: the creation time (root attributes); v1 packs did not record the
# chunking settings (/chunks attribute `chunking`, read as the defaults); and float16 vectors
# from an older llama.cpp build, equal to within float16 rounding. And migrate cannot
# re-extract: v1's PDF was read by pypdf (extractor 1, its warning wording), the v2 golden's by
# PDFium (extractor 2); the text is the same. And v1 packs have no sentence pieces: migrate
# keeps a pack's levels as they are (``update --pieces`` adds them), while the v2 golden pack is
# built with the default, pieces on.
PIECE_ELEMENTS = {
    key
    for el in F.ELEMENTS
    if el.path == F.PIECES or el.path.startswith(F.PIECES + "/")
    for key in (el.path, el.path + "@attrs")
}
EXPLAINED = {
    "/@attrs",
    "/chunks@attrs",
    "/vectors/data",
    "/documents/extractor",
    "/documents/extractor_version",
    "/documents/warnings",
}


def test_v1_golden_migrates_to_the_content_of_the_v2_golden(tmp_path: Path) -> None:
    import numpy as np

    from kbpack.pack.manifest import read_header

    out = tmp_path / "migrated.kbpack"
    r = CliRunner().invoke(cli, ["migrate", str(GOLDEN_DIR / "v1.kbpack"), "-o", str(out)])
    assert r.exit_code == 0, r.stderr
    got, want = read_header(out).manifest, read_header(GOLDEN_DIR / "v2.kbpack").manifest
    assert got.format_version == want.format_version == 2
    assert got.counts == {k: v for k, v in want.counts.items() if k != "pieces"}
    assert set(got.elements) == set(want.elements) - PIECE_ELEMENTS
    differ = {k for k in got.elements if got.elements[k] != want.elements[k]}
    assert differ <= EXPLAINED, differ - EXPLAINED
    with PackReader(out) as a, PackReader(GOLDEN_DIR / "v2.kbpack") as b:
        assert np.abs(a.vectors() - b.vectors()).max() < 1e-3
        assert a.strings(F.DOC_TEXT_SHA256) == b.strings(F.DOC_TEXT_SHA256)


# The elements whose bytes depend on which CPU kernels llama.cpp ran (see below), and the
# largest difference allowed there: one float16 step for components |x| < 1.
CPU_DEPENDENT = {"/vectors/data", "/pieces/data"}
FLOAT16_STEP = 2.0**-11


def cpu_variant() -> str | None:
    """The CPU library a runtime-dispatch llama.cpp loaded; None for the linked build."""
    import llama_cpp

    from kbpack.model.llama_backend import load_cpu_backend

    return load_cpu_backend(llama_cpp).variant


@pytest.mark.default_model
def test_the_v2_golden_pack_is_what_make_golden_builds(
    default_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The current golden pack is rebuilt by `make golden` (the Makefile's sources and epoch).
    When this fails after a change to what a pack holds, update spec/FORMAT.md and run
    `make golden` in the same commit."""
    import re

    import numpy as np

    from kbpack.pack.format import FORMAT_VERSION
    from kbpack.pack.manifest import read_header

    make = (GOLDEN_DIR.parent.parent / "Makefile").read_text()
    sources = re.search(r"GOLDEN_SOURCES := ((?:.*\\\n)*.*)\n", make)
    epoch = re.search(r"SOURCE_DATE_EPOCH=(\d+)", make)
    assert sources and epoch
    monkeypatch.setenv("SOURCE_DATE_EPOCH", epoch.group(1))
    monkeypatch.chdir(GOLDEN_DIR.parent.parent)
    out = tmp_path / "rebuilt.kbpack"
    args = ["build", *sources.group(1).replace("\\\n", " ").split(), "-o", str(out), "-q"]
    r = CliRunner().invoke(cli, [*args, "--threads", "1"])
    assert r.exit_code == 0, r.stderr
    got = read_header(out).manifest
    want = read_header(GOLDEN_DIR / f"v{FORMAT_VERSION}.kbpack").manifest
    assert got.counts == want.counts and got.created == want.created
    if cpu_variant() is None:  # the linked llama.cpp build, which made the golden pack
        assert got.elements == want.elements, "run `make golden` (and say why in spec/FORMAT.md)"
        return
    # A runtime-dispatch llama.cpp (kbpack/model/llama_backend.py) runs the CPU's own kernels
    # (AVX-512 here) where the linked build runs AVX2 ones: the float32 sums round differently,
    # and a float16 vector can differ in its last bit. So on such a build the vector elements
    # may differ, within float16 rounding and no further; every other element is exact.
    differ = {k for k in got.elements if got.elements[k] != want.elements.get(k)}
    assert set(got.elements) == set(want.elements)
    assert differ <= CPU_DEPENDENT, differ - CPU_DEPENDENT
    with PackReader(out) as a, PackReader(GOLDEN_DIR / f"v{FORMAT_VERSION}.kbpack") as b:
        for mine, theirs in ((a.vectors(), b.vectors()), (a.piece_vectors(), b.piece_vectors())):
            assert mine.shape == theirs.shape
            assert np.abs(mine - theirs).max() <= FLOAT16_STEP
            norms = np.linalg.norm(mine, axis=1) * np.linalg.norm(theirs, axis=1)
            assert (np.sum(mine * theirs, axis=1) / norms).min() > 0.99999
