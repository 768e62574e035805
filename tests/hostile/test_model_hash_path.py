"""Issue 30, item 1 (fixed in 0.2.1): a pack attribute must never become a file path.

``/model@sha256`` named the cached copy of a pack's embedded model; a crafted pack whose
``sha256`` was ``../`` steps to a victim file (minus ``.gguf``), every digest restamped, made
``kbpack query`` write the GGUF over the victim, see the hash differ, and delete it (exit 0).
The reader now refuses any ``sha256`` that is not 64 lowercase hex digits before anything
uses it, and the cache file is named by the hash kbpack computed of the bytes it wrote.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import h5py
import pytest

from kbpack.pack import format as F
from kbpack.testing.fuzz.pack_mutations import element_digests, restamp
from tests.paths import REPO_ROOT

ROOT = REPO_ROOT  # this checkout's kbpack, not an installed one


def kbpack(*args: str, cache: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {"KBPACK_CACHE_DIR": str(cache), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "kbpack", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=cwd,
    )


def _stamp(pack: Path, out: Path, sha: str) -> Path:
    out.write_bytes(pack.read_bytes())
    with h5py.File(out, "r+") as h:
        h[F.MODEL].attrs[F.M_SHA256] = sha
        digests = element_digests(h)
    restamp(out, "elements", digests)  # as a hostile pack maker can, for an unsigned pack
    return out


@pytest.mark.parametrize("kind", ["relative", "absolute", "uppercase"])
def test_a_crafted_model_hash_touches_no_file(tmp_path: Path, carrying: Path, kind: str) -> None:
    victim_dir = tmp_path / "home"
    victim_dir.mkdir()
    victim = victim_dir / "important.gguf"
    victim.write_bytes(b"the user's own model, not kbpack's to touch")
    cache = tmp_path / "cache"
    cache.mkdir()
    if kind == "relative":
        # from <cache>/models/ up to tmp_path, then down to the victim, minus '.gguf'
        sha = "../../home/important"
    elif kind == "absolute":
        sha = str(tmp_path / "elsewhere" / "deep" / "x")
    else:
        sha = "A" * 64  # hex, but not as the spec writes it
    pack = _stamp(carrying, tmp_path / "hostile.kbpack", sha)
    before = {p for p in tmp_path.rglob("*")}

    r = kbpack("query", str(pack), "--", "pump seal", cache=cache, cwd=tmp_path)

    assert victim.read_bytes() == b"the user's own model, not kbpack's to touch"
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    assert "/model attribute 'sha256' is not 64 lowercase hex digits" in r.stderr
    created = {p for p in tmp_path.rglob("*")} - before
    assert all(p.is_relative_to(cache) for p in created), sorted(created)
    assert not (tmp_path / "elsewhere").exists()
    v = kbpack("verify", str(pack), cache=cache, cwd=tmp_path)
    assert v.returncode != 0 and "model-stamp" in v.stdout + v.stderr


def test_the_cache_file_is_named_by_the_hash_kbpack_computed(
    tmp_path: Path, carrying: Path
) -> None:
    cache = tmp_path / "cache"
    r = kbpack("query", str(carrying), "--", "pump seal", cache=cache, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    with h5py.File(carrying, "r") as h:
        want = str(h[F.MODEL].attrs[F.M_SHA256])
    models = sorted(p.name for p in (cache / "models").iterdir())
    assert models == [f"{want}.gguf"]  # no temporary file left behind
