"""The query-side model loads in a worker thread (kbpack/model/load.py) while the search does
its other work: the answers must be exactly those of a model loaded before the search, and a
load that fails must fail the search the same way. Real llama.cpp, tiny models."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest
from cli_run import run

import kbpack
from kbpack.errors import ModelError
from kbpack.model import gguf_header
from kbpack.model.embedder import Embedder
from kbpack.model.load import ModelLoad
from kbpack.model.resolve import resolve_embedder
from kbpack.search.searcher import Searcher
from tests.paths import REPO_ROOT

DOCS = {
    "logs.md": "# Rotating logs\n\nLogs grow without bound unless rotated.\n\n## Configuration\n\n"
    "Set `max_bytes` to 10485760 and `backup_count` to 5 in the handler.\n\n## Errors\n\n"
    "Error 0x80070005 means access denied: run the service as its own user.\n",
    "db.md": "# Database\n\n## Threads\n\nPass check_same_thread=False to share one connection "
    "between threads, and lock it yourself.\n\n## Compression\n\nArchives use ZIP_DEFLATED "
    "when zlib is available, otherwise ZIP_STORED.\n",
    "notes.txt": "Deploy the service to EU-WEST-1 first, then to the other regions.\n\n"
    "Use %z in strftime for the UTC offset.\n",
}
QUERIES = ["rotate the logs", "0x80070005", "share a connection between threads", "zebra"]


@pytest.fixture(scope="module")
def model(wide_model: Path) -> Path:
    return wide_model  # conftest: built once per session


@pytest.fixture(scope="module")
def pack(model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("corpus")
    for name, text in DOCS.items():
        (root / name).write_text(text)
    out = tmp_path_factory.mktemp("packs") / "docs.kbpack"
    code, _, err = run("build", str(root), "-o", str(out), "--model", str(model), "--quiet")
    assert code == 0, err
    return out


@pytest.mark.parametrize("mode", ["hybrid", "dense", "bm25"])
def test_answers_equal_a_model_loaded_before_the_search(pack: Path, model: Path, mode: str) -> None:
    for query in QUERIES:
        for filters in ({}, {"doc": "*.md"}):
            with kbpack.open(pack, model=model) as p:  # the load runs in a worker thread
                got = p.search(query, k=3, mode=mode, **filters).as_dict()
            with kbpack.open(pack, model=model) as p:
                embedder, notes = resolve_embedder(p.reader, model)  # loaded here, first
                reference = Searcher(p.reader, embedder, notes)
                want = reference.search(query, k=3, mode=mode, **filters).as_dict()
            assert got == want, (query, mode, filters)


def test_the_cli_answer_is_unchanged(pack: Path, model: Path) -> None:
    code, stdout, _ = run("query", str(pack), "rotate the logs", "--model", str(model), "--json")
    assert code == 0
    got = json.loads(stdout)
    with kbpack.open(pack, model=model) as p:
        embedder, notes = resolve_embedder(p.reader, model)
        want = Searcher(p.reader, embedder, notes).search("rotate the logs").as_dict()
    assert got["results"] == json.loads(json.dumps(want["results"]))
    assert got["results"] and got["lexical_only"] is False


def test_the_vector_embedded_by_the_worker_is_the_callers(model: Path) -> None:
    handed = threading.Event()

    def build() -> Embedder:
        handed.wait(60)  # the query is handed over while the load runs, as in a search
        return Embedder(model)

    load = ModelLoad(build)
    load.ahead("a query")
    handed.set()
    embedder = load.result()
    ahead = load.vector("a query")
    assert ahead is not None
    assert np.array_equal(ahead, embedder.embed(["a query"])[0])
    assert load.vector("a query") is None  # handed out once
    load.ahead("too late")  # the load is over: the caller embeds it itself
    assert load.vector("too late") is None


def test_a_failed_load_raises_in_the_callers_thread(tmp_path: Path) -> None:
    def broken() -> Embedder:
        raise ModelError(f"{tmp_path}/m.gguf: llama.cpp cannot load the model (test)")

    load = ModelLoad(broken)
    load.ahead("ignored")
    with pytest.raises(ModelError, match="cannot load the model"):
        load.result()
    assert load.vector("ignored") is None


def test_gguf_header_memo_matches_the_parse_and_follows_the_file(model: Path) -> None:
    parsed = gguf_header.read_gguf_metadata(model)
    gguf_header._PARSED.clear()  # a new process: only the on-disk memo is left
    assert gguf_header.read_gguf_metadata(model) == parsed
    # a changed file (new size and mtime) is parsed again, never answered from the memo
    copy = model.with_name("copy.gguf")
    copy.write_bytes(model.read_bytes())
    assert gguf_header.read_gguf_metadata(copy) == parsed
    copy.write_bytes(b"GGUF" + b"\0" * 8)
    gguf_header._PARSED.clear()
    with pytest.raises(ModelError, match=r"damaged|truncated|version"):
        gguf_header.read_gguf_metadata(copy)


def test_a_corrupt_header_memo_is_ignored(model: Path) -> None:
    parsed = gguf_header.read_gguf_metadata(model)
    memo = gguf_header._memo_file(str(model.resolve()))
    memo.write_text('{"path": 1, "metadata": [}')
    gguf_header._PARSED.clear()
    assert gguf_header.read_gguf_metadata(model) == parsed


def test_output_of_the_main_thread_is_not_lost_while_a_model_loads(
    model: Path, tmp_path: Path
) -> None:
    """llama-cpp-python silences fds 1 and 2 and swaps sys.stdout/sys.stderr process-wide
    while it loads a model (verbose=False); kbpack loads in a worker thread while the main
    thread writes, so every line the main thread writes meanwhile must still arrive."""
    script = tmp_path / "writes.py"
    script.write_text(
        "import sys\n"
        "from pathlib import Path\n"
        "from kbpack.model.embedder import Embedder\n"
        "from kbpack.model.load import ModelLoad\n"
        f"path = Path({str(model)!r})\n"
        "n = 0\n"
        "for _ in range(10):\n"
        "    load = ModelLoad(lambda: Embedder(path, threads=1))\n"
        "    while load.running:\n"
        "        n += 1\n"
        "        print(f'line {n}', flush=True)\n"
        "        print(f'err {n}', file=sys.stderr, flush=True)\n"
        "    load.result().close()\n"
        "print(f'total {n}', flush=True)\n"
    )
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, check=True
    )
    out = done.stdout.splitlines()
    total = int(out[-1].split()[1])
    assert total > 0
    assert out[:-1] == [f"line {i}" for i in range(1, total + 1)]
    assert done.stderr.splitlines() == [f"err {i}" for i in range(1, total + 1)]
