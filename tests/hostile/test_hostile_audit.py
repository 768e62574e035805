"""Issue 30, "Show": a pack can create, change or remove no file outside kbpack's cache.

A Python audit hook (``sys.addaudithook``) records every file opened for writing, created,
renamed, linked or removed, and every folder made or removed, while ``kbpack query``,
``serve``'s search (the Starlette app through its test client) and ``mcp``'s search tool run
on every crafted pack of the suite: the /model@sha256 path ones (test_model_hash_path.py),
the structure ones (test_hostile_packs.py) and the bounded-work ones (hostile_inputs.py).
Every recorded path must lie in the model cache (KBPACK_CACHE_DIR).

The hook runs in a child process (it cannot be removed, and must not leak into the suite);
forked children (the HDF5 pre-flight, the sandbox) inherit it and append to the same log.
What it cannot see: writes made by C code itself (HDF5, llama.cpp) -- kbpack opens every
pack read-only, and the model file it hands llama.cpp is the cache's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import pytest
from hostile_inputs import declared_chunks, many_attributes, set_member

from kbpack.pack import format as F
from kbpack.testing.fuzz.pack_mutations import element_digests, restamp

pytest.importorskip("starlette", reason="the serve extra is not installed")
pytest.importorskip("httpx", reason="the serve extra is not installed")

RUNNER = r"""
import json, os, sys

log = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
PATH_EVENTS = {
    "os.remove": 1, "os.rmdir": 1, "os.mkdir": 1, "shutil.rmtree": 1, "os.truncate": 1,
    "os.rename": 2, "os.link": 2, "os.symlink": 2,  # os.replace is audited as os.rename
}
DIR_FD = {"os.remove": 1, "os.rmdir": 1, "os.mkdir": 2, "shutil.rmtree": 1}  # its argument

def record(event, path, dir_fd=None):
    if isinstance(path, (str, bytes, os.PathLike)):
        p = os.fsdecode(path)
        if isinstance(dir_fd, int) and dir_fd >= 0:  # shutil.rmtree removes by folder fd
            p = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), p)
        line = json.dumps([event, os.path.abspath(p), os.getpid()]) + "\n"
        os.write(log, line.encode())

def hook(event, args):
    if event == "open":
        path, mode, flags = args
        writes = (mode is not None and any(c in mode for c in "wax+")) or (
            mode is None and isinstance(flags, int) and flags & WRITE_FLAGS
        )
        if writes:
            record(event, path)
    elif event in PATH_EVENTS:
        n = PATH_EVENTS[event]
        at = DIR_FD.get(event)
        dir_fd = args[at] if at is not None and len(args) > at else None
        for path in args[:n]:
            record(event, path, dir_fd)

sys.addaudithook(hook)

from kbpack.cli.main import main
from kbpack.errors import KbpackError

outcomes = []
for pack in sys.argv[2:]:
    for mode in ("hybrid", "bm25"):
        try:
            main(["query", pack, "--mode", mode, "--", "pump seal alarm"])
        except SystemExit as e:
            outcomes.append(["query", pack, mode, e.code])
    try:
        from starlette.testclient import TestClient
        from kbpack.serve.library import Library
        from kbpack.serve.mcp_tools import search_tool
        from kbpack.serve.web import create_app

        library = Library([__import__("pathlib").Path(pack)])
    except KbpackError as e:
        outcomes.append(["serve", pack, "refused", str(e)[:80]])
        continue
    client = TestClient(create_app(library), base_url="http://127.0.0.1")  # the guard's Host
    for mode in ("hybrid", "bm25"):
        r = client.get("/api/search", params={"q": "pump seal alarm", "mode": mode})
        outcomes.append(["serve", pack, mode, r.status_code])
        try:
            search_tool(library, {"query": "pump seal alarm", "mode": mode})
            outcomes.append(["mcp", pack, mode, "ok"])
        except KbpackError as e:
            outcomes.append(["mcp", pack, mode, str(e)[:80]])
print(json.dumps(outcomes))
"""


def _stamp_model_hash(carrying: Path, out: Path, sha: str) -> Path:
    """test_model_hash_path.py's crafted pack: /model@sha256 set to a path, restamped."""
    shutil.copyfile(carrying, out)
    with h5py.File(out, "r+") as h:
        h[F.MODEL].attrs[F.M_SHA256] = sha
        digests = element_digests(h)
    restamp(out, "elements", digests)
    return out


@pytest.fixture(scope="module")
def crafted(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> tuple[Path, list[Path]]:
    """Every crafted pack, in one folder (the victim files beside them)."""
    from test_hostile_packs import HOSTILE, hostile

    from tests.fixture_pack import make_pack

    root = tmp_path_factory.mktemp("audit")
    (root / "src").mkdir()
    (root / "src" / "a.md").write_text("# Pump\n\nHold reset to clear the pump seal alarm.\n")
    carrying = root / "carrying.kbpack"
    env = {**os.environ, "KBPACK_CACHE_DIR": str(root / "build-cache")}
    subprocess.run(
        [sys.executable, "-m", "kbpack", "build", str(root / "src"), "-o", str(carrying),
         "--model", str(tiny_model), "--embed-model", "-q"],
        check=True, env=env, timeout=300,
    )  # fmt: skip
    bm25 = root / "bm25.kbpack"
    subprocess.run(
        [sys.executable, "-m", "kbpack", "build", str(root / "src"), "-o", str(bm25),
         "--no-vectors", "-q"],
        check=True, env=env, timeout=300,
    )  # fmt: skip
    victims = root / "home"
    victims.mkdir()
    (victims / "important.gguf").write_bytes(b"the user's own model")
    packs = [
        carrying,
        _stamp_model_hash(carrying, root / "sha-relative.kbpack", "../../home/important"),
        _stamp_model_hash(carrying, root / "sha-absolute.kbpack", str(root / "elsewhere" / "x")),
        _stamp_model_hash(carrying, root / "sha-upper.kbpack", "A" * 64),
        many_attributes(bm25, root / "attrs.kbpack", 2_000),
        set_member(bm25, root / "set"),
        declared_chunks(bm25, root / "rows.kbpack", 500_000),
    ]
    base = make_pack(root / "fixture.kbpack")
    for i, name in enumerate(HOSTILE):
        packs.append(hostile(base, root / f"h{i}", name))
    return root, packs


def test_no_crafted_pack_touches_a_file_outside_the_cache(
    crafted: tuple[Path, list[Path]], tmp_path: Path
) -> None:
    root, packs = crafted
    cache = tmp_path / "cache"
    log = tmp_path / "audit.log"
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    env = {
        "KBPACK_CACHE_DIR": str(cache),
        "PATH": "/usr/bin:/bin",
        "PYTHONDONTWRITEBYTECODE": "1",  # imports write no .pyc (those would be the suite's)
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        "HOME": str(tmp_path / "home"),  # a write to ~ would be seen, not done to the user's
    }
    r = subprocess.run(
        [sys.executable, "-c", RUNNER, str(log), *map(str, packs)],
        capture_output=True, text=True, timeout=900, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    outcomes = json.loads(r.stdout.splitlines()[-1])
    surfaces = {o[0] for o in outcomes}
    assert surfaces == {"query", "serve", "mcp"}, outcomes  # the good packs were served
    served = {(o[1], o[2]): o[3] for o in outcomes if o[0] == "serve"}
    assert served[(str(packs[0]), "hybrid")] == 200, outcomes  # the model from the pack
    assert len([o for o in outcomes if o[0] == "query"]) == 2 * len(packs)
    events = [json.loads(line) for line in log.read_text().splitlines()]
    assert events, "the hook saw nothing: the cache was not even written"
    outside = sorted(
        {(e, p) for e, p, _ in events if not Path(p).is_relative_to(cache) and p != os.devnull}
    )
    assert outside == [], outside
    after = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    assert after == before  # no file beside the packs created, changed or removed
    assert not (root / "elsewhere").exists()
