"""Hand-made hostile packs: each refused with a one-line reason naming the element, no
traceback, and no byte of another file read.

Each hostile pack has a valid manifest (size and SHA-256 restamped), so the byte check passes
and it is the structure allowlist that must refuse it. The files it points at hold a secret
that must not appear in any output; in a second round they are replaced by FIFOs, which block
whoever opens them: a reader that so much as opened one would hang (and the test would time
out) instead of answering.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from kbpack.cli.main import cli
from kbpack.pack import format as F
from kbpack.runtime.sandbox import Limits
from kbpack.verify.pipeline import verify_pack
from tests.fixture_pack import make_pack, restamp

SECRET = b"TOP-SECRET-7f3a9c-DO-NOT-LEAK"
CLI = [sys.executable, "-c", "from kbpack.cli.main import main; main()"]


def _secret_files(folder: Path) -> None:
    (folder / "secret.bin").write_bytes(SECRET * 64)
    with h5py.File(folder / "secret.h5", "w") as s:
        s["data"] = np.frombuffer(SECRET * 4, dtype="<i4")


def _replace(h: h5py.File, path: str, make: Callable[[h5py.File, str, int], None]) -> None:
    n = h[path].shape[0]
    del h[path]
    make(h, path, n)


def external_link(h: h5py.File) -> None:
    _replace(
        h, F.CHUNK_TOKENS, lambda h, p, n: h.__setitem__(p, h5py.ExternalLink("secret.h5", "/data"))
    )


def external_storage(h: h5py.File) -> None:
    def make(h: h5py.File, p: str, n: int) -> None:
        h.create_dataset(p, shape=(n,), dtype="<i4", external=[("secret.bin", 0, 4 * n)])

    _replace(h, F.CHUNK_TOKENS, make)


def virtual_dataset(h: h5py.File) -> None:
    def make(h: h5py.File, p: str, n: int) -> None:
        layout = h5py.VirtualLayout(shape=(n,), dtype="<i4")
        layout[:] = h5py.VirtualSource("secret.h5", "data", shape=(len(SECRET),))[:n]
        h.create_virtual_dataset(p, layout)

    _replace(h, F.CHUNK_TOKENS, make)


def soft_link(h: h5py.File) -> None:
    h["/chunks/alias"] = h5py.SoftLink(F.CHUNK_FROM)


def unknown_filter(h: h5py.File) -> None:
    def make(h: h5py.File, p: str, n: int) -> None:
        h.create_dataset(p, data=np.zeros(n, "<i4"), chunks=(n,), compression="lzf")

    _replace(h, F.CHUNK_TOKENS, make)


def extra_object(h: h5py.File) -> None:
    h.create_group("/chunks/payload").create_dataset("x", data=np.arange(3))


def huge_dataset(h: h5py.File) -> None:
    def make(h: h5py.File, p: str, n: int) -> None:
        h.create_dataset(p, shape=(10**12,), dtype="<i4", chunks=(2**16,))

    _replace(h, F.CHUNK_TOKENS, make)


def huge_string_column(h: h5py.File) -> None:
    def make(h: h5py.File, p: str, n: int) -> None:
        h.create_dataset(p, shape=(10**12,), dtype=h5py.string_dtype(), chunks=(2**10,))

    _replace(h, F.DOC_TITLE, make)


def hard_link_alias(h: h5py.File) -> None:
    del h[F.CHUNK_TO]
    h[F.CHUNK_TO] = h[F.CHUNK_FROM]


def reference_column(h: h5py.File) -> None:
    def make(h: h5py.File, p: str, n: int) -> None:
        ds = h.create_dataset(p, shape=(n,), dtype=h5py.ref_dtype)
        ds[0] = h[F.CHUNK_FROM].ref

    _replace(h, F.CHUNK_TOKENS, make)


HOSTILE: dict[str, tuple[Callable[[h5py.File], None], str, str]] = {
    "external link": (external_link, "link-not-allowed", F.CHUNK_TOKENS),
    "external storage": (external_storage, "external-storage", F.CHUNK_TOKENS),
    "virtual dataset": (virtual_dataset, "virtual-dataset", F.CHUNK_TOKENS),
    "soft link": (soft_link, "link-not-allowed", "/chunks/alias"),
    "unknown filter (lzf)": (unknown_filter, "filter-not-allowed", F.CHUNK_TOKENS),
    "extra object": (extra_object, "unknown-object", "/chunks/payload"),
    "10^12-element dataset": (huge_dataset, "size-out-of-range", F.CHUNK_TOKENS),
    "10^12-row string column": (huge_string_column, "size-out-of-range", F.DOC_TITLE),
    "hard-link alias": (hard_link_alias, "hard-link-alias", F.CHUNK_TO),
    "object references": (reference_column, "reference-not-allowed", F.CHUNK_TOKENS),
}
POINTS_OUTSIDE = ("external link", "external storage", "virtual dataset")


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_pack(tmp_path_factory.mktemp("base") / "base.kbpack")


def hostile(base: Path, folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    _secret_files(folder)
    p = folder / "hostile.kbpack"
    shutil.copyfile(base, p)
    with h5py.File(p, "r+") as h:
        HOSTILE[name][0](h)
    restamp(p)
    return p


@pytest.mark.parametrize("name", list(HOSTILE))
def test_verify_refuses_with_the_element_named(
    base: Path, tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, code, path = HOSTILE[name]
    p = hostile(base, tmp_path, name)
    monkeypatch.chdir(tmp_path)  # relative external names would resolve here
    r = CliRunner().invoke(cli, ["verify", str(p), "--json"], catch_exceptions=False)
    assert r.exit_code == 1
    assert f'"code": "{code}",\n      "path": "{path}"' in r.output
    assert SECRET.decode() not in r.output
    r = CliRunner().invoke(cli, ["verify", str(p)], catch_exceptions=False)
    assert r.exit_code == 1
    assert f"  {code} {path}: " in r.output and "Traceback" not in r.output


def test_inspect_and_export_refuse_in_one_line_and_leak_nothing(base: Path, tmp_path: Path) -> None:
    for name in HOSTILE:
        folder = tmp_path / name.replace(" ", "_").replace("^", "")
        p = hostile(base, folder, name)
        for cmd in ("inspect", "export"):
            r = subprocess.run(
                [*CLI, cmd, str(p)], cwd=folder, capture_output=True, timeout=60, check=False
            )
            err = r.stderr.decode()
            assert r.returncode == 1, (name, cmd, err)
            assert len(err.strip().splitlines()) == 1 and "refused" in err, (name, cmd, err)
            assert SECRET not in r.stdout + r.stderr


@pytest.mark.parametrize("name", POINTS_OUTSIDE)
def test_files_pointed_at_are_never_opened(
    base: Path, tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = hostile(base, tmp_path, name)
    for target in ("secret.h5", "secret.bin"):  # opening a FIFO blocks until a writer comes
        (tmp_path / target).unlink()
        os.mkfifo(tmp_path / target)
    monkeypatch.chdir(tmp_path)
    report = verify_pack(p, limits=Limits(timeout_s=30))
    found = {f.code for f in report.findings}
    assert HOSTILE[name][1] in found and "sandbox-timeout" not in found
    r = subprocess.run([*CLI, "inspect", str(p)], cwd=tmp_path, capture_output=True, timeout=60)
    assert r.returncode == 1 and b"refused" in r.stderr


@pytest.mark.parametrize(
    ("what", "kw", "code"),
    [
        (
            "NaN vectors",
            {"mutate_vectors": lambda v: v.__setitem__((0, 0), np.nan)},
            "vector-not-finite",
        ),
        ("dims mismatch", {"model_dims": 16}, "dims-mismatch"),
        (
            "offsets past the end",
            {
                "mutate_chunks": lambda d, c: [
                    type(x)(x.section, x.start, x.end + 10**5, x.page, x.tokens) for x in c
                ]
            },
            "offset-out-of-range",
        ),
    ],
)
def test_semantically_hostile_packs_fail_verify(
    tmp_path: Path, what: str, kw: dict, code: str
) -> None:
    p = make_pack(tmp_path / "p.kbpack", **kw)
    r = CliRunner().invoke(cli, ["verify", str(p)], catch_exceptions=False)
    assert r.exit_code == 1, what
    assert f"  {code} " in r.output


def test_tampered_manifest(base: Path, tmp_path: Path) -> None:
    p = tmp_path / "t.kbpack"
    shutil.copyfile(base, p)
    from kbpack.pack.manifest import read_header

    counts = dict(read_header(p).manifest.counts, chunks=10**9)
    restamp(p, counts=counts)
    r = CliRunner().invoke(cli, ["verify", str(p)], catch_exceptions=False)
    assert r.exit_code == 1
    assert f"  count-mismatch {F.CHUNK_FROM}: " in r.output
