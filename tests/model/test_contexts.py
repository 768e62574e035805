"""An Embedder's llama.cpp contexts (data parallel): the vectors are the same bits from one
context with one thread, from several contexts, from one context with several threads, and from
callers in several threads at once; contexts are made only when a call needs them."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from kbpack.model.embed_cache import TEST_SIGNAL_ENV
from kbpack.model.embedder import Embedder
from tests.model.test_embed_cache import WORDS, build, corpus, digests, kept


def texts(n: int, salt: int = 0) -> list[str]:
    """``n`` distinct texts of the tiny model's words, of many lengths (some over its window)."""
    return [
        " ".join(WORDS[(i * 3 + k + salt) % len(WORDS)] for k in range(1 + (i * 7 + salt) % 19))
        + f" {i} {salt}"
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def reference(tiny_model: Path) -> Embedder:
    """One context, one thread: the vectors every other setting must give."""
    return Embedder(tiny_model, threads=1)


def test_one_context_per_thread_by_default(tiny_model: Path) -> None:
    e = Embedder(tiny_model, threads=3)
    assert (e.threads, e.contexts) == (3, 3)
    assert (
        Embedder(tiny_model, threads=4, contexts=1).contexts,
        Embedder(tiny_model).contexts,
    ) == (
        1,
        Embedder(tiny_model).threads,
    )
    with pytest.raises(ValueError, match="contexts must be 1 or more"):
        Embedder(tiny_model, threads=2, contexts=0)


@pytest.mark.parametrize(("threads", "contexts"), [(4, None), (4, 1), (4, 2), (2, None)])
def test_vectors_are_the_same_bits_for_any_contexts_and_threads(
    reference: Embedder, tiny_model: Path, threads: int, contexts: int | None
) -> None:
    inputs = texts(300)
    want = reference.embed(inputs)
    assert len(reference.batches(reference.prepare(inputs))) > 8  # many batches to spread
    e = Embedder(tiny_model, threads=threads, contexts=contexts)
    got = e.embed(inputs)
    assert got.tobytes() == want.tobytes()
    assert e.contexts_made == e.contexts  # the batches were spread over all of them
    assert e.embed(inputs).tobytes() == want.tobytes()  # and again, on contexts in use before


def test_a_single_text_makes_no_second_context(reference: Embedder, tiny_model: Path) -> None:
    e = Embedder(tiny_model, threads=4)
    for text in texts(20):
        assert e.embed([text]).tobytes() == reference.embed([text]).tobytes()
    assert e.contexts_made == 1  # a query pays for one context only


def test_a_long_lone_query_runs_on_all_threads_with_the_same_bits(
    wide_model_200: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import llama_cpp

    from kbpack.model import embedder as E

    calls: list[int] = []
    real = llama_cpp.llama_set_n_threads

    def recorded(ctx: object, n: int, n_batch: int) -> None:
        calls.append(n)
        real(ctx, n, n_batch)

    monkeypatch.setattr(llama_cpp, "llama_set_n_threads", recorded)
    one, two = Embedder(wide_model_200, threads=1), Embedder(wide_model_200, threads=2)
    long = " ".join(WORDS[i % len(WORDS)] for i in range(E.ALL_THREADS_TOKENS + 20))
    short = " ".join(WORDS[:5])
    assert E.ALL_THREADS_TOKENS <= len(two.prepare([long])[0]) <= two.window
    assert two.embed([short]).tobytes() == one.embed([short]).tobytes()
    assert calls == []  # a short query: its context's one thread
    assert two.embed([long]).tobytes() == one.embed([long]).tobytes()
    assert calls == [2, 1]  # a long one: both threads, then the context back to one
    assert one.embed([long]).tobytes() == one.embed([long]).tobytes() and calls == [2, 1]
    # several batches spread over the contexts, each on its one thread
    many = [long] * 6
    assert two.embed(many).tobytes() == one.embed(many).tobytes() and calls == [2, 1]


def test_concurrent_callers_get_the_vectors_of_a_lone_caller(
    reference: Embedder, tiny_model: Path
) -> None:
    e = Embedder(tiny_model, threads=3)
    # each caller: short single-batch calls (a server's queries) and multi-batch calls
    jobs = [texts(1 + (j % 3) * 40, salt=j) for j in range(8)]
    want = [reference.embed(j).tobytes() for j in jobs]
    got: dict[int, list[bytes]] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(len(jobs))

    def caller(j: int) -> None:
        try:
            start.wait()
            got[j] = [e.embed(jobs[j]).tobytes() for _ in range(3)]
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=caller, args=(j,)) for j in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert all(got[j] == [want[j]] * 3 for j in range(len(jobs)))
    assert 1 <= e.contexts_made <= 3


def test_on_batch_hears_each_batch_once_in_the_calling_thread(
    reference: Embedder, tiny_model: Path
) -> None:
    e = Embedder(tiny_model, threads=3)
    tokens = e.prepare(texts(200))
    heard: list[tuple[list[int], int, bool, str]] = []
    v = e.embed_tokens(
        tokens,
        on_batch=lambda b, n, r: heard.append((list(b), n, r, threading.current_thread().name)),
    )
    assert v.tobytes() == reference.embed_tokens(tokens).tobytes()
    assert sorted(i for b, *_ in heard for i in b) == list(range(len(tokens)))
    assert sorted(map(sorted, (b for b, *_ in heard))) == sorted(map(sorted, e._plan(tokens)))
    assert all(n == sum(len(tokens[i]) for i in b) for b, n, *_ in heard)
    assert {(r, name) for _, _, r, name in heard} == {(False, threading.current_thread().name)}


def test_an_interrupt_from_on_batch_stops_the_call_and_leaves_the_embedder_whole(
    reference: Embedder, tiny_model: Path
) -> None:
    e = Embedder(tiny_model, threads=3)
    tokens = e.prepare(texts(300))
    heard = 0

    def interrupt(batch: object, n: int, reused: bool) -> None:
        nonlocal heard
        heard += 1
        if heard == 3:
            raise KeyboardInterrupt  # what the build's on_batch raises on Ctrl-C

    with pytest.raises(KeyboardInterrupt):
        e.embed_tokens(tokens, on_batch=interrupt)
    assert heard == 3
    # every context came back to the pool, none still decoding: the next calls are whole
    assert e.embed_tokens(tokens).tobytes() == reference.embed_tokens(tokens).tobytes()
    assert len(e._idle) == e.contexts_made == 3


def test_a_build_on_contexts_writes_the_bytes_of_a_one_thread_build(
    tiny_model: Path, tmp_path: Path
) -> None:
    src = corpus(tmp_path / "src")
    one = build(src, tmp_path / "one.kbpack", tiny_model, tmp_path / "c1", "--embed-cache-max", "0")
    many = build(
        src,
        tmp_path / "many.kbpack",
        tiny_model,
        tmp_path / "c3",
        "--embed-cache-max",
        "0",
        "--threads",
        "3",  # the later --threads wins over build()'s "--threads 1"
    )
    assert one.returncode == many.returncode == 0, one.stderr + many.stderr
    a, b = digests(tmp_path / "one.kbpack"), digests(tmp_path / "many.kbpack")
    assert a["/vectors/data"] == b["/vectors/data"] and a["/pieces/data"] == b["/pieces/data"]
    assert a == b


def test_a_build_interrupted_on_contexts_resumes_to_the_same_pack(
    tiny_model: Path, tmp_path: Path
) -> None:
    src = corpus(tmp_path / "src")
    clean = build(src, tmp_path / "clean.kbpack", tiny_model, tmp_path / "c0", "--threads", "3")
    assert clean.returncode == 0, clean.stderr
    batches, _ = kept(tmp_path / "c0", tiny_model)
    half = batches // 2
    out = tmp_path / "resumed.kbpack"
    signal_after = {TEST_SIGNAL_ENV: f"{half}:SIGINT"}
    killed = build(src, out, tiny_model, tmp_path / "c", "--threads", "3", env=signal_after)
    assert killed.returncode == 130, killed.stderr
    stored, finished = kept(tmp_path / "c", tiny_model)
    assert stored == half  # stored in the calling thread, one at a time
    rerun = build(src, out, tiny_model, tmp_path / "c", "--threads", "3")
    assert rerun.returncode == 0, rerun.stderr
    assert json.loads(rerun.stdout)["embeddings_reused"] == finished > 0
    assert digests(out) == digests(tmp_path / "clean.kbpack")


@pytest.mark.default_model
def test_the_default_model_gives_the_same_bits_on_contexts(default_model: Path) -> None:
    """The real model (its kernels differ from the tiny one's): one context with one thread,
    two contexts, one context with two threads, and two callers at once."""
    root = Path(__file__).resolve().parents[2] / "fixtures" / "eval" / "corpus"
    docs = sorted(root.rglob("*.md"))[:4]
    paras = [p for d in docs for p in d.read_text().split("\n\n") if len(p) > 80][:48]
    assert len(paras) == 48
    want = Embedder(default_model, threads=1).embed(paras).tobytes()
    two = Embedder(default_model, threads=2)
    assert two.embed(paras).tobytes() == want and two.contexts_made == 2
    assert Embedder(default_model, threads=2, contexts=1).embed(paras).tobytes() == want
    halves: dict[int, bytes] = {}

    def half(k: int) -> None:
        halves[k] = two.embed(paras).tobytes()

    callers = [threading.Thread(target=half, args=(k,)) for k in range(2)]
    for t in callers:
        t.start()
    for t in callers:
        t.join()
    assert halves == {0: want, 1: want}


def test_the_default_contexts_are_capped_on_a_many_core_machine(tiny_model: Path) -> None:
    """64 threads by default: 16 contexts of 4 threads each (memory), not 64 of one; a caller
    may still ask for more."""
    from kbpack.model.embedder import MAX_CONTEXTS

    e = Embedder(tiny_model, threads=64)
    try:
        assert e.contexts == MAX_CONTEXTS == 16 and e.contexts_made == 1
    finally:
        e.close()
    e = Embedder(tiny_model, threads=64, contexts=32)
    try:
        assert e.contexts == 32
    finally:
        e.close()


def test_a_share_of_the_cores_caps_the_contexts(reference: Embedder, tiny_model: Path) -> None:
    """``share(n)``: a server's worker process uses its share of the cores: concurrent callers
    then take turns on at most n contexts, with the vectors of a lone caller."""
    e = Embedder(tiny_model, threads=4)
    e.share(1)
    jobs = [texts(3, salt=j) for j in range(6)]
    want = [reference.embed(j).tobytes() for j in jobs]
    got: dict[int, bytes] = {}
    start = threading.Barrier(len(jobs))

    def caller(j: int) -> None:
        start.wait()
        got[j] = e.embed(jobs[j]).tobytes()

    threads = [threading.Thread(target=caller, args=(j,)) for j in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [got[j] for j in range(len(jobs))] == want
    assert e.contexts_made == 1 and e.threads == 1
    e.share(8)  # a larger share: never more than the embedder was made for
    assert (e.threads, e.contexts) == (4, 4)
