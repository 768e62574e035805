"""Batched search (``Searcher.search_many``, the server's ``Batches``): a batch answers each of
its requests as ``search`` answers it alone, bit for bit, whatever its modes, filters, k and
refusal, on one pack and on a pack set, with the real llama.cpp on a tiny model."""

from __future__ import annotations

import dataclasses
import json
import threading
from pathlib import Path

import pytest
from cli_run import run

import kbpack
from kbpack.search.searcher import Searcher, SearchRequest

DOCS_A = {
    "logs.md": "# Rotating logs\n\nLogs grow without bound unless rotated.\n\n## Configuration\n\n"
    "Set `max_bytes` to 10485760 and `backup_count` to 5 in the handler.\n\n## Troubleshooting\n\n"
    "Error 0x80070005 means access denied: run the service as its own user.\n",
    "db.md": "# Database\n\n## Threads\n\nPass check_same_thread=False to share one connection "
    "between threads, and lock it yourself.\n\n## Compression\n\nArchives use ZIP_DEFLATED when "
    "zlib is available, otherwise ZIP_STORED.\n",
    "notes.txt": "Deploy the service to EU-WEST-1 first, then to the other regions.\n\n"
    "Use %z in strftime for the UTC offset.\n",
}
DOCS_B = {
    "pump.md": "# Pump\n\nHold the reset button to clear the pump seal alarm.\n\n## Seals\n\n"
    "Replace the seal every 2000 hours of running.\n",
    "cache.md": "# Cache\n\nThe cache keeps compressed pages; set cfg_cache_ttl to expire them.\n",
}

REQUESTS = [
    SearchRequest("how do I rotate the logs?"),
    SearchRequest("how do I rotate the logs?", mode="dense", k=2),
    SearchRequest("zlib compression", mode="bm25", k=3),
    SearchRequest("what does check_same_thread do", k=1),
    SearchRequest("access denied error", doc="logs.md"),
    SearchRequest("threads", section="Threads", mode="hybrid", k=4),
    SearchRequest("deploy regions", kind="txt", mode="dense"),
    SearchRequest("who won the world cup in 2018"),
    SearchRequest("who won the world cup in 2018", max_distance=0.0),  # refused
    SearchRequest("xyzzy plugh", mode="bm25"),  # refused: no word in common
    SearchRequest("who won the world cup in 2018", refuse=False, k=3),
    SearchRequest("reset the pump seal", max_distance=0.05),
    SearchRequest("reset the pump seal", max_distance=1.9, mode="dense", k=8),
    SearchRequest("cache ttl", context="section"),
    SearchRequest("logs"),  # the same query twice in one batch
    SearchRequest("logs", mode="bm25"),
]


def options(req: SearchRequest) -> dict[str, object]:
    d = dataclasses.asdict(req)
    del d["query"]
    return d


def exact(resp: object) -> str:
    """Every field, floats by their repr: equal strings are equal bits."""
    return json.dumps(resp.as_dict(), sort_keys=True)  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def model(wide_model: Path) -> Path:
    return wide_model  # conftest's session model


def build(root: Path, docs: dict[str, str], model: Path) -> Path:
    src = root / "src"
    src.mkdir()
    for name, text in docs.items():
        (src / name).write_text(text)
    out = root / f"{root.name}.kbpack"  # distinct file names: a served set
    code, _, err = run("build", str(src), "-o", str(out), "--model", str(model), "-q")
    assert code == 0, err
    return out


@pytest.fixture(scope="module")
def packs(tmp_path_factory: pytest.TempPathFactory, model: Path) -> tuple[Path, Path]:
    a = build(tmp_path_factory.mktemp("a"), DOCS_A, model)
    b = build(tmp_path_factory.mktemp("b"), DOCS_B, model)
    return a, b


def one_at_a_time(s: Searcher) -> list[str]:
    return [exact(s.search(r.query, **options(r))) for r in REQUESTS]  # type: ignore[arg-type]


def alone_vectors(s: Searcher) -> object:
    import numpy as np

    return np.stack([s.query_vector(r.query) for r in REQUESTS])


def test_a_batch_answers_each_request_as_alone_bit_for_bit(
    packs: tuple[Path, Path], model: Path
) -> None:
    with kbpack.open(packs[0], model=model) as p:
        want = one_at_a_time(p.searcher)
        vectors = alone_vectors(p.searcher)
    answered = [json.loads(w)["answered"] for w in want]
    assert True in answered and False in answered  # both sides of the gate are compared
    assert {json.loads(w)["mode"] for w in want} == {"hybrid", "dense", "bm25"}
    with kbpack.open(packs[0], model=model) as p:  # a fresh searcher: nothing cached
        got = [exact(r) for r in p.searcher.search_many(REQUESTS, vectors)]  # type: ignore[arg-type]
    assert got == want


def test_a_pack_set_batch_answers_as_alone_bit_for_bit(
    packs: tuple[Path, Path], model: Path
) -> None:
    with kbpack.open_many(list(packs), model=model) as s:
        want = one_at_a_time(s.searcher)
        vectors = alone_vectors(s.searcher)
    assert any(json.loads(w)["results"] for w in want)
    with kbpack.open_many(list(packs), model=model) as s:
        got = [exact(r) for r in s.searcher.search_many(REQUESTS, vectors)]  # type: ignore[arg-type]
    assert got == want


def test_a_batch_embeds_each_query_alone_by_default(packs: tuple[Path, Path], model: Path) -> None:
    """Without given vectors a batch embeds its queries itself, each alone: bit for bit too."""
    with kbpack.open(packs[0], model=model) as p:
        want = one_at_a_time(p.searcher)
    with kbpack.open(packs[0], model=model) as p:
        assert [exact(r) for r in p.searcher.search_many(REQUESTS)] == want


def test_concurrent_server_searches_answer_as_sequential_ones(
    packs: tuple[Path, Path], model: Path
) -> None:
    """``Library.search`` from 8 threads at once (batched) against the same searches one at a
    time: the same answers, bit for bit; every request answered, none lost or crossed. Only
    the dense stage runs in the batches (a bm25 request needs none)."""
    from kbpack.serve.library import Library

    asks = [(r.query, r.mode, r.k) for r in REQUESTS] * 3
    with Library(list(packs), model=model, verify=False) as lib:
        want = [served(lib.search(None, q, k=k, mode=m)) for q, m, k in asks]
        got: list[object] = [None] * len(asks)
        start = threading.Barrier(8)

        def client(i: int) -> None:
            start.wait()
            for j in range(i, len(asks), 8):
                q, m, k = asks[j]
                got[j] = served(lib.search(None, q, k=k, mode=m))

        threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        batches = lib._federated_batches
        dense = sum(m != "bm25" for _, m, _ in asks)
        assert batches is not None and batches.requests == 2 * dense
    assert got == want


def served(r: object) -> str:
    """``exact`` less the notes (a served pack's may say how it was checked)."""
    d = r.as_dict()  # type: ignore[attr-defined]
    del d["notes"]
    return json.dumps(d, sort_keys=True)


@pytest.mark.parametrize("memory_mb", [1024, 0])
def test_server_batches_answer_as_kbpack_query_with_and_without_bf16_copies(
    packs: tuple[Path, Path], model: Path, memory_mb: int
) -> None:
    """The server's batches scan bfloat16 copies of the vectors (``--vector-memory``, where
    they fit) or the stored float16 rows (0): either way each answer is ``kbpack query``'s
    for that request alone, bit for bit, on one pack and on the set of both."""
    from kbpack.serve.library import Library

    with kbpack.open(packs[0], model=model) as p:
        want_one = [served(p.searcher.search(r.query, **options(r))) for r in REQUESTS]  # type: ignore[arg-type]
        vectors = alone_vectors(p.searcher)
    with kbpack.open_many(list(packs), model=model) as s:
        want_set = [served(s.searcher.search(r.query, **options(r))) for r in REQUESTS]  # type: ignore[arg-type]
    with Library(list(packs), model=model, verify=False, vector_memory_mb=memory_mb) as lib:
        for name in lib.packs:
            lib.get(name).searcher.corpus.vectors.copies_wait = True  # type: ignore[attr-defined]
        one = lib.get(lib.by_file[packs[0].name]).searcher
        assert [served(r) for r in one.search_many(REQUESTS, vectors)] == want_one  # type: ignore[arg-type]
        for j, r in enumerate(REQUESTS):  # a batch of one scans the copies too
            assert served(one.search_many([r], vectors[j : j + 1])[0]) == want_one[j]
        assert lib.federated is not None
        got_set = [served(r) for r in lib.federated.search_many(REQUESTS, vectors)]  # type: ignore[arg-type]
        copies = [lib.get(n).searcher.corpus.vectors._copies for n in lib.packs]  # type: ignore[attr-defined]
        held = sum(x.bits.nbytes for c in copies if isinstance(c, tuple) for x in c if x)
        assert lib.vector_memory.used == held and (held > 0) == bool(memory_mb)
        assert all(isinstance(c, tuple) for c in copies) == bool(memory_mb)
    assert got_set == want_set
