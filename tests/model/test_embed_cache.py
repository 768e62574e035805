"""No finished embedding is lost: a killed or interrupted build's vectors are kept in the
embedding cache, the next build of the same sources embeds only the rest and writes the pack a
clean build writes, and the cache stays within its bound."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from kbpack.model.embed_cache import TEST_SIGNAL_ENV, EmbeddingCache, embeddings_dir, prune
from kbpack.model.identity import sha256_file
from kbpack.pack.read import PackReader
from tests.paths import REPO_ROOT

ROOT = REPO_ROOT
KBPACK = [sys.executable, "-m", "kbpack"]
# words of the tiny model's vocabulary (tests/tiny_gguf.py): every text tokenizes differently
WORDS = ["the", "pack", "model", "vector", "offline", "search", "text", "file", "is", "not"]


def corpus(root: Path, docs: int = 6, paragraphs: int = 30) -> Path:
    root.mkdir()
    for d in range(docs):
        body = [f"# {d}\n"]
        for p in range(paragraphs):
            words = [WORDS[(d * 7 + p * 3 + k) % len(WORDS)] for k in range(2 + (p * 5 + d) % 9)]
            body.append(f"{p} {' '.join(words)} {d}.\n")
        (root / f"doc{d}.md").write_text("\n".join(body))
    return root


def build(
    src: Path, out: Path, model: Path, cache: Path, *extra: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``kbpack build --json`` in a process of its own, with its own cache folder."""
    return subprocess.run(
        [
            *KBPACK,
            "build",
            str(src),
            "-o",
            str(out),
            "--model",
            str(model),
            "--pieces",
            "--json",
            "--threads",
            "1",
            *extra,
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "KBPACK_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT), **(env or {})},
        timeout=300,
    )


def digests(pack: Path) -> dict[str, str]:
    """The manifest's element digests, less the root attributes (they hold the build time)."""
    with PackReader(pack) as r:
        return {k: v for k, v in r.manifest.elements.items() if k != "/@attrs"}


def kept(cache: Path, model: Path) -> tuple[int, int]:
    """(decode batches, vectors) the cache folder holds for ``model``."""
    c = EmbeddingCache(sha256_file(model), 32, root=cache / "embeddings")
    return c.batches_kept, c.vectors_kept


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> tuple[Path, Path, dict]:
    """A corpus and its clean build, with no cache: (sources, pack, report)."""
    tmp = tmp_path_factory.mktemp("clean")
    src = corpus(tmp / "src")
    out = tmp / "clean.kbpack"
    r = build(src, out, tiny_model, tmp / "cache", "--embed-cache-max", "0")
    assert r.returncode == 0, r.stderr
    assert not (tmp / "cache" / "embeddings").exists()  # 0: nothing kept
    return src, out, json.loads(r.stdout)


def test_the_cache_changes_no_bit_and_a_rebuild_embeds_nothing(
    clean: tuple[Path, Path, dict], tiny_model: Path, tmp_path: Path
) -> None:
    src, pack, report = clean
    total = report["embeddings_total"]
    assert total == report["counts"]["chunks"] + report["counts"]["pieces"]
    first = build(src, tmp_path / "a.kbpack", tiny_model, tmp_path / "cache")
    second = build(src, tmp_path / "b.kbpack", tiny_model, tmp_path / "cache")
    assert first.returncode == second.returncode == 0, first.stderr + second.stderr
    a, b = json.loads(first.stdout), json.loads(second.stdout)
    assert a["embeddings_reused"] == 0 and a["vectors_embedded"] == report["vectors_embedded"]
    assert b["embeddings_reused"] == total == b["embeddings_total"]
    assert b["vectors_embedded"] + b["pieces_embedded"] == total  # none from an old pack
    want = digests(pack)
    assert digests(tmp_path / "a.kbpack") == want == digests(tmp_path / "b.kbpack")
    human = subprocess.run(  # the human report says what was reused
        [
            *KBPACK,
            "build",
            str(src),
            "-o",
            str(tmp_path / "c.kbpack"),
            "--model",
            str(tiny_model),
            "--pieces",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "KBPACK_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)},
    ).stdout
    assert f"reused {total:,} of {total:,} embeddings from an earlier or interrupted build" in human


@pytest.mark.parametrize("how", ["SIGKILL", "SIGINT"])
def test_a_build_killed_half_way_loses_no_finished_embedding(
    how: str, clean: tuple[Path, Path, dict], tiny_model: Path, tmp_path: Path
) -> None:
    src, pack, report = clean
    cache = tmp_path / "cache"
    full = build(src, tmp_path / "full.kbpack", tiny_model, tmp_path / "count")
    batches, _ = kept(tmp_path / "count", tiny_model)  # decode batches of a whole build
    assert full.returncode == 0 and batches > 4
    half = batches // 2
    out = tmp_path / "resumed.kbpack"
    killed = build(src, out, tiny_model, cache, env={TEST_SIGNAL_ENV: f"{half}:{how}"})
    assert killed.returncode == (-signal.SIGKILL if how == "SIGKILL" else 130), killed.stderr
    assert not out.exists()  # nothing published
    assert kept(cache, tiny_model)[0] == half
    finished = kept(cache, tiny_model)[1]
    rerun = build(src, out, tiny_model, cache)
    assert rerun.returncode == 0, rerun.stderr
    r = json.loads(rerun.stdout)
    total = report["embeddings_total"]
    # the rerun embeds exactly what the killed build had not finished
    assert r["embeddings_reused"] == finished and 0 < finished < total
    assert r["embeddings_total"] == total
    assert digests(out) == digests(pack)  # the pack a clean build writes


def test_the_interrupt_message_starts_on_its_own_line(
    clean: tuple[Path, Path, dict], tiny_model: Path, tmp_path: Path
) -> None:
    """With progress on a terminal, Ctrl-C leaves the progress line and says so below it."""
    import pty

    src, _, _ = clean
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [
            *KBPACK,
            "build",
            str(src),
            "-o",
            str(tmp_path / "x.kbpack"),
            "--model",
            str(tiny_model),
            "--pieces",
        ],
        stdout=subprocess.DEVNULL,
        stderr=slave,
        cwd=ROOT,
        env={
            **os.environ,
            "KBPACK_CACHE_DIR": str(tmp_path / "cache"),
            "PYTHONPATH": str(ROOT),
            TEST_SIGNAL_ENV: "3:SIGINT",
        },
    )
    os.close(slave)
    shown = b""
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:
            break
        if not data:
            break
        shown += data
    os.close(master)
    assert proc.wait(timeout=120) == 130
    text = shown.decode(errors="replace").replace("\r\n", "\n")  # the terminal's line ends
    assert "embedding" in text and "texts (" in text  # progress inside the embedding call
    progress, message = text.rstrip("\n").rsplit("\n", 1)
    assert message == "kbpack: interrupted", repr(text[-300:])
    # the last progress line stayed on the screen, and the message went below it
    assert "building" in progress.rsplit("\r", 1)[-1], repr(text[-300:])


def test_a_torn_journal_keeps_its_whole_records(
    clean: tuple[Path, Path, dict], tiny_model: Path, tmp_path: Path
) -> None:
    src, pack, report = clean
    cache = tmp_path / "cache"
    killed = build(src, tmp_path / "x.kbpack", tiny_model, cache, env={TEST_SIGNAL_ENV: "6"})
    assert killed.returncode == -signal.SIGKILL
    (journal,) = (cache / "embeddings").glob("*/*.kbe")
    with open(journal, "r+b") as f:  # a power cut mid-record: the last one half written
        f.truncate(journal.stat().st_size - 10)
    assert kept(cache, tiny_model)[0] == 5
    rerun = build(src, tmp_path / "x.kbpack", tiny_model, cache)
    assert rerun.returncode == 0, rerun.stderr
    assert 0 < json.loads(rerun.stdout)["embeddings_reused"] < report["embeddings_total"]
    assert digests(tmp_path / "x.kbpack") == digests(pack)


def test_the_cache_is_bounded_oldest_first(tmp_path: Path) -> None:
    root = tmp_path / "embeddings"
    for i, size in enumerate([400, 300, 200]):
        f = root / "model" / f"{i}.kbe"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(b"x" * size)
        os.utime(f, (1000 + i, 1000 + i))
    assert prune(root, 600) == 400  # the oldest went
    assert sorted(p.name for p in root.glob("*/*.kbe")) == ["1.kbe", "2.kbe"]
    assert embeddings_dir().name == "embeddings"


def test_dry_run_counts_estimates_and_writes_nothing(
    clean: tuple[Path, Path, dict], tiny_model: Path, tmp_path: Path
) -> None:
    src, _pack, report = clean
    out, cache = tmp_path / "out.kbpack", tmp_path / "cache"
    before = set(Path(tempfile.gettempdir()).glob("kbpack-dry-run-*"))
    r = build(src, out, tiny_model, cache, "--dry-run")
    assert r.returncode == 0, r.stderr
    dry = json.loads(r.stdout)
    assert dry["command"] == "build" and dry["dry_run"] is True and dry["path"] == str(out)
    # the counts are the real build's, the size that of a pack with its rows
    assert dry["counts"] == report["counts"]
    assert dry["texts"] == report["embeddings_total"] and dry["cached_texts"] == 0
    assert dry["tokens"] > dry["texts"] > 0
    assert 0.9 < dry["estimated_size"] / report["size"] < 1.1
    sample = dry["sample"]
    assert 0 < sample["texts"] <= 48 and sample["tokens_per_s"] > 0
    assert dry["estimated_seconds"] >= dry["estimated_embed_seconds"] > 0
    # nothing written: no output, no cache, no temporary pack left behind
    assert not out.exists() and not (cache / "embeddings").exists()
    assert set(Path(tempfile.gettempdir()).glob("kbpack-dry-run-*")) == before
    # after a build, the dry run knows the cache holds every text
    assert build(src, out, tiny_model, cache).returncode == 0
    again = json.loads(build(src, out, tiny_model, cache, "--dry-run").stdout)
    assert again["cached_texts"] == again["texts"] and again["estimated_embed_seconds"] == 0
    human = subprocess.run(
        [
            *KBPACK,
            "build",
            str(src),
            "-o",
            str(tmp_path / "h.kbpack"),
            "--dry-run",
            "--model",
            str(tiny_model),
            "--pieces",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "KBPACK_CACHE_DIR": str(tmp_path / "c2"), "PYTHONPATH": str(ROOT)},
    ).stdout
    for label in ("dry run", "documents", "chunks", "pieces", "to embed", "speed", "time"):
        assert label in human
    assert "pack size  ~" in human and not (tmp_path / "h.kbpack").exists()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--embed-cache-max", "lots"], "--embed-cache-max lots: write a size such as 2G"),
        (["--dry-run", "--split-size", "2G"], "--dry-run estimates a plain build"),
    ],
)
def test_bad_cache_size_and_dry_run_combinations_are_one_line(
    args: list[str], says: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    from kbpack.cli.main import main

    src = tmp_path / "src"
    src.mkdir()
    (src / "a.md").write_text("# A\n\nsome text\n")
    with pytest.raises(SystemExit) as e:
        main(["build", str(src), "-o", str(tmp_path / "a.kbpack"), "--no-vectors", *args])
    _, err = capfd.readouterr()
    assert e.value.code == 2 and len(err.splitlines()) == 1 and says in err, err
    assert not (tmp_path / "a.kbpack").exists()
