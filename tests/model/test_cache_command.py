"""``kbpack cache`` says what the user cache holds (finished embeddings, extracted models,
memos) and ``kbpack cache clear`` removes it, a part or all of it; a build after a clear writes
the same pack, only without the reuse (issue 33: "the cache is bounded and removable")."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from test_embed_cache import KBPACK, ROOT, build, corpus, digests

from kbpack.ops.usercache import parts


def kbpack(cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*KBPACK, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "KBPACK_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)},
        timeout=300,
    )


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def shown(cache: Path) -> dict[str, dict]:
    r = kbpack(cache, "cache", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["command"] == "cache" and doc["folder"] == str(cache)
    return {p["name"]: p for p in doc["parts"]}


@pytest.fixture
def filled(tmp_path: Path, tiny_model: Path) -> tuple[Path, Path, Path]:
    """A cache filled by a real build and a real query: (cache, sources, pack)."""
    cache = tmp_path / "cache"
    src = corpus(tmp_path / "src", docs=3, paragraphs=10)
    pack = tmp_path / "a.kbpack"
    r = build(src, pack, tiny_model, cache, "--embed-model")
    assert r.returncode == 0, r.stderr
    # a query without --model extracts the model the pack carries into the cache
    q = kbpack(cache, "query", str(pack), "offline search", "--json")
    assert q.returncode in (0, 3), q.stderr
    return cache, src, pack


def test_cache_shows_each_part_as_it_is_on_disk(filled: tuple[Path, Path, Path]) -> None:
    cache, _, _ = filled
    got = shown(cache)
    assert list(got) == list(parts())  # nothing unknown there
    for name, part in got.items():
        assert part["bytes"] == sum(du(cache / f) for f in part["folders"]), name
    assert got["embeddings"]["bytes"] > 0 and len(got["embeddings"]["items"]) == 1
    assert got["models"]["items"] and got["models"]["items"][0]["file"].endswith(".gguf")
    assert got["memos"]["files"] > 0
    human = kbpack(cache, "cache")
    assert human.returncode == 0
    assert human.stdout.startswith(f"kbpack cache: {cache} (")
    assert all(f"  {name} " in human.stdout for name in got)


def test_clear_one_part_then_all(filled: tuple[Path, Path, Path], tiny_model: Path) -> None:
    cache, src, pack = filled
    before = shown(cache)
    dry = kbpack(cache, "cache", "clear", "embeddings", "--dry-run", "--json")
    assert dry.returncode == 0 and json.loads(dry.stdout)["dry_run"] is True
    assert shown(cache) == before  # a dry run removes nothing
    r = kbpack(cache, "cache", "clear", "embeddings")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("kbpack cache: removed embeddings (")
    after = shown(cache)
    assert after["embeddings"]["bytes"] == 0 and not (cache / "embeddings").exists()
    assert after["models"] == before["models"] and after["memos"]["files"] > 0
    # a build after the clear embeds everything again, and writes the same pack
    again = build(src, cache.parent / "b.kbpack", tiny_model, cache, "--embed-model")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["embeddings_reused"] == 0
    assert digests(cache.parent / "b.kbpack") == digests(pack)
    (cache / "left-by-an-old-kbpack").write_text("x")
    assert "other" in shown(cache)
    r = kbpack(cache, "cache", "clear", "--json")
    assert r.returncode == 0, r.stderr
    removed = json.loads(r.stdout)["removed"]
    assert {p["name"] for p in removed} == {*parts(), "other"}
    assert list(cache.iterdir()) == []


def test_an_unknown_part_is_a_usage_error(tmp_path: Path) -> None:
    r = kbpack(tmp_path / "cache", "cache", "clear", "vectors")
    assert r.returncode == 2
    assert r.stderr.strip() == (
        "kbpack: error: no part of the cache is named 'vectors'; the parts are "
        "embeddings, models, memos, other"
    )
