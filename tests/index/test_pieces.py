"""The sentence-piece level (issue 13): the cut, the dense score, and packs built with pieces."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from cli_run import run
from hypothesis import given, settings
from hypothesis import strategies as st

from kbpack.extract import discover, extract_all
from kbpack.index.chunk import ChunkConfig, chunk_document
from kbpack.index.pieces import PIECE_MAX_CHARS, PIECE_MIN_CHARS, cut_pieces, pieces_of
from kbpack.pack import format as F
from kbpack.pack.manifest import read_header
from kbpack.pack.read import PackReader
from kbpack.search.dense import PieceIndex, chunk_scores
from tests.fixture_pack import codes, with_fixed_digests
from tests.paths import REPO_ROOT

ROOT = REPO_ROOT

PROSE = (
    "Orphaning a package means giving up its maintenance. "
    "The maintainer files a bug against the wnpp pseudo-package and sets the title to O: "
    "followed by the package name and a short description. "
    "Another developer may then adopt it. "
    "Until then the QA team uploads fixes when they are urgent.\n\n"
    "A package that nobody adopts for a long time may be removed from the archive. "
    "Removal needs a bug against ftp.debian.org with the reasons."
)


def assert_valid(text: str, start: int, end: int, pieces: list[tuple[int, int]]) -> None:
    prev = start
    for a, b in pieces:
        assert prev <= a < b <= end  # inside the chunk, in order, not overlapping
        piece = text[a:b]
        assert piece == piece.strip()  # trimmed by moving offsets
        if b - a > PIECE_MAX_CHARS:  # only a single word may be longer than the maximum
            assert len(piece.split()) == 1
        prev = b


def test_prose_is_cut_at_sentence_ends_into_sized_pieces() -> None:
    pieces = cut_pieces(PROSE, 0, len(PROSE))
    assert_valid(PROSE, 0, len(PROSE), pieces)
    assert len(pieces) >= 2
    for _, b in pieces:
        assert PROSE[b - 1] == "."  # every piece ends a sentence
    # every piece but the last reached the minimum (the last one joined its neighbour or is a
    # lone remainder that did not fit)
    assert all(b - a >= PIECE_MIN_CHARS for a, b in pieces[:-1])
    # the pieces cover every sentence: joined back, only whitespace is missing
    covered = "".join(PROSE[a:b] for a, b in pieces)
    assert "".join(covered.split()) == "".join(PROSE.split())


def test_a_short_chunk_has_no_pieces() -> None:
    text = "One sentence. Two sentences, still short."
    assert cut_pieces(text, 0, len(text)) == []  # one piece would be the chunk itself


def test_a_run_on_sentence_is_cut_at_spaces() -> None:
    words = " ".join(f"word{i}" for i in range(400))  # ~3,500 characters, no sentence end
    pieces = cut_pieces(words, 0, len(words))
    assert_valid(words, 0, len(words), pieces)
    assert len(pieces) >= 5
    assert all(b - a <= PIECE_MAX_CHARS for a, b in pieces)
    assert "".join(words[a:b] + " " for a, b in pieces).strip() == words


def test_pieces_of_a_chunk_inside_a_longer_text_stay_inside_it() -> None:
    text = "Before the chunk. " * 20 + PROSE + " After the chunk." * 20
    start = text.index(PROSE)
    end = start + len(PROSE)
    pieces = cut_pieces(text, start, end)
    assert_valid(text, start, end, pieces)
    assert pieces[0][0] == start and pieces[-1][1] == end


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from(["Alpha beta gamma.", "Delta?", "x" * 700, "\n\n", "\n- item one", " "]),
        max_size=60,
    ),
    st.integers(0, 5),
)
def test_any_text_gives_valid_pieces(parts: list[str], pad: int) -> None:
    body = " ".join(parts).strip()
    text = "#" * pad + body + "#" * pad
    pieces = cut_pieces(text, pad, pad + len(body))
    assert_valid(text, pad, pad + len(body), pieces)
    assert len(pieces) != 1


def test_every_fixture_chunk_gives_valid_pieces() -> None:
    """On real documents (PDF, DOCX, HTML, Markdown): pieces inside chunks, exact offsets."""
    candidates = discover([ROOT / "fixtures/docs"]).candidates
    n = 0
    for doc in extract_all(candidates):
        if doc.status != "ok":
            continue
        chunks = chunk_document(doc, None, ChunkConfig(window=None, max_chars=1500)).chunks
        spans = [(c.start, c.end) for c in chunks]
        for p in pieces_of(doc.text, spans):
            s, e = spans[p.chunk]
            assert s <= p.start < p.end <= e
            assert doc.text[p.start : p.end] == doc.text[p.start : p.end].strip()
            n += 1
    assert n > 100


# -- the dense score ------------------------------------------------------------------------


def test_chunk_scores_blend_the_best_piece_with_half_weight() -> None:
    chunks = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]], dtype=np.float32)
    # chunk 0 has two pieces, chunk 2 one; chunk 1 none
    pieces = np.array([[0.0, 1.0], [0.8, 0.6], [1.0, 0.0]], dtype=np.float32)
    index = PieceIndex.from_columns(pieces, np.array([0, 0, 2]))
    q = np.array([0.0, 1.0], dtype=np.float32)
    score, cos = chunk_scores(chunks, q, index)
    np.testing.assert_allclose(cos, [0.0, 1.0, 0.8])
    # chunk 0: (0 + 0.5 * max(1.0, 0.6)) / 1.5; chunk 1: its own cosine; chunk 2: (0.8 + 0) / 1.5
    np.testing.assert_allclose(score, [0.5 / 1.5, 1.0, 0.8 / 1.5], rtol=1e-6)
    # without pieces the score is the cosine
    score0, cos0 = chunk_scores(chunks, q, None)
    np.testing.assert_allclose(score0, cos0)
    empty = PieceIndex.from_columns(pieces[:0], np.zeros(0, np.int64))
    np.testing.assert_allclose(chunk_scores(chunks, q, empty)[0], cos0)


# -- packs with pieces ------------------------------------------------------------------------


def tiny_prose(seed: int, sentences: int) -> str:
    """Sentences of the tiny model's whole-word vocabulary (one token per word), so chunks of
    several pieces fit its window."""
    rng = np.random.default_rng(seed)
    words = ["the", "pack", "model", "vector", "offline", "search", "text", "file", "is", "not"]
    return " ".join(
        " ".join(rng.choice(words, size=int(rng.integers(8, 30)))).capitalize() + "."
        for _ in range(sentences)
    )


CORPUS = {
    "one.md": "# One\n\n" + tiny_prose(1, 8) + "\n\n## Two\n\n" + tiny_prose(2, 6),
    "short.md": "# Short\n\nNothing long here.\n",
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for name, text in CORPUS.items():
        (src / name).write_text(text)
    return src


def build(src: Path, out: Path, model: Path, *extra: str) -> dict:
    code, stdout, err = run(
        "build", str(src), "-o", str(out), "--model", str(model), "--threads", "1", "--json", *extra
    )
    assert code == 0, err
    return json.loads(stdout)


def test_a_pack_built_with_pieces_holds_them_and_verifies(
    corpus: Path, tmp_path: Path, wide_model_200: Path
) -> None:
    report = build(corpus, tmp_path / "p.kbpack", wide_model_200, "--pieces")
    n = report["counts"]["pieces"]
    assert n >= 4
    with PackReader(tmp_path / "p.kbpack") as r:
        assert r.has_pieces
        chunk = r.column(F.PIECE_CHUNK)
        start, end = r.column(F.PIECE_FROM), r.column(F.PIECE_TO)
        assert len(chunk) == len(start) == len(end) == n
        assert np.all(np.diff(chunk) >= 0)
        for i in range(n):
            c = int(chunk[i])
            assert r.column(F.CHUNK_FROM)[c] <= start[i] < end[i] <= r.column(F.CHUNK_TO)[c]
        norms = np.linalg.norm(r.piece_vectors(), axis=1)
        assert np.all(np.abs(norms - 1) < 1e-2)
        attrs = r.attrs(F.PIECES)
        assert attrs[F.A_KIND] == "pieces" and attrs[F.PIECE_WEIGHT_ATTR] == 0.5
    code, out, _ = run("verify", str(tmp_path / "p.kbpack"), "--json")
    assert code == 0, out


def test_build_progress_counts_every_token_the_model_reads(
    corpus: Path, tmp_path: Path, wide_model_200: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ETA's unit is tokens: piece texts cost model time as chunk texts do, so the
    progress must hear of their tokens too (it heard only the chunks' before)."""
    from kbpack.model.embedder import Embedder
    from kbpack.ops.build import BuildOptions
    from kbpack.ops.build import build as build_pack
    from kbpack.runtime.progress import Progress

    announced: list[tuple[int, int]] = []

    class Recording(Progress):
        def embedding(self, texts: int, tokens: int) -> None:
            announced.append((texts, tokens))

    read: list[int] = []
    real = Embedder.embed_tokens

    def counting(self: Embedder, tokenized: Any, *rest: Any) -> np.ndarray:
        read.append(sum(map(len, tokenized)))
        return real(self, tokenized, *rest)

    monkeypatch.setattr(Embedder, "embed_tokens", counting)
    opts = BuildOptions(
        sources=[corpus], out=tmp_path / "p.kbpack", model=wide_model_200, threads=1, pieces=True
    )
    report = build_pack(opts, Recording(enabled=False))
    n_texts = report.counts["chunks"] + report.counts["pieces"]
    assert report.counts["pieces"] > 0
    assert sum(t for t, _ in announced) == n_texts
    assert [n for _, n in announced] == read  # each batch announced with what it costs
    assert sum(read) > report.tokens_embedded  # more than the chunks' own tokens


def test_a_pack_with_pieces_answers_with_chunks(
    corpus: Path, tmp_path: Path, wide_model_200: Path
) -> None:
    build(corpus, tmp_path / "p.kbpack", wide_model_200, "--pieces")
    code, out, err = run(
        "query",
        str(tmp_path / "p.kbpack"),
        "the offline search model",
        "--mode",
        "dense",
        "--max-distance",
        "2",
        "--model",
        str(wide_model_200),
        "--json",
    )
    assert code == 0, err
    results = json.loads(out)["results"]
    assert results
    with PackReader(tmp_path / "p.kbpack") as r:
        spans = set(
            zip(r.column(F.CHUNK_FROM).tolist(), r.column(F.CHUNK_TO).tolist(), strict=True)
        )
    assert all((x["from"], x["to"]) in spans for x in results)  # chunks, never bare pieces


def test_pieces_are_the_default_and_no_pieces_turns_them_off(
    corpus: Path, tmp_path: Path, wide_model_200: Path
) -> None:
    assert build(corpus, tmp_path / "d.kbpack", wide_model_200)["counts"]["pieces"] > 0
    report = build(corpus, tmp_path / "n.kbpack", wide_model_200, "--no-pieces")
    assert "pieces" not in report["counts"]
    with PackReader(tmp_path / "n.kbpack") as r:
        assert not r.has_pieces
    # update keeps a pack without pieces without them
    code, out, err = run(
        "update", str(tmp_path / "n.kbpack"), str(corpus), "--model", str(wide_model_200), "--json"
    )
    assert code == 0, err
    assert "pieces" not in json.loads(out)["counts"]
    # a BM25-only pack has no vectors to cut: --no-vectors alone works, with --pieces it is
    # a usage error
    code, out, err = run("build", str(corpus), "-o", str(tmp_path / "b.kbpack"), "--no-vectors")
    assert code == 0, err
    code, _, err = run(
        "build", str(corpus), "-o", str(tmp_path / "c.kbpack"), "--no-vectors", "--pieces"
    )
    assert code == 2 and "--pieces needs vectors" in err


def test_update_keeps_pieces_and_reuses_their_vectors(
    corpus: Path, tmp_path: Path, wide_model_200: Path
) -> None:
    first = build(corpus, tmp_path / "p.kbpack", wide_model_200, "--pieces")
    code, out, err = run(
        "update",
        str(tmp_path / "p.kbpack"),
        str(corpus),
        "--model",
        str(wide_model_200),
        "--threads",
        "1",
        "--json",
    )
    assert code == 0, err
    report = json.loads(out)
    assert report["counts"] == first["counts"]  # pieces kept without --pieces
    assert report["vectors_embedded"] == report["pieces_embedded"] == 0  # all reused
    code, out, _ = run("diff", str(tmp_path / "p.kbpack"), str(tmp_path / "p.kbpack"), "--json")
    assert code == 0


# -- verify -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pieces_pack(
    corpus: Path, tmp_path_factory: pytest.TempPathFactory, wide_model_200: Path
) -> Path:
    out = tmp_path_factory.mktemp("pp") / "p.kbpack"
    build(corpus, out, wide_model_200, "--pieces")
    return out


def _set(path: str, row: int, value: object) -> Callable[[h5py.File], None]:
    return lambda h: h[path].__setitem__(row, value)


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (_set(F.PIECE_TO, 0, 10**6), ("piece-outside-chunk", F.PIECE_FROM)),
        (_set(F.PIECE_CHUNK, 0, 10**6), ("piece-chunk", F.PIECE_CHUNK)),
        (_set(F.PIECE_FROM, 1, 0), ("piece-order", F.PIECE_FROM)),
        (lambda h: h[F.PIECE_FROM].__setitem__(0, h[F.PIECE_FROM][0] - 1), None),
        (
            lambda h: h[F.PIECE_DATA].__setitem__(2, h[F.PIECE_DATA][2] * 2),
            ("vector-norm", F.PIECE_DATA),
        ),
        (lambda h: h["/"].attrs.__setitem__(F.R_VECTORS, "none"), ("pieces-unexpected", F.PIECES)),
    ],
)
def test_verify_names_broken_pieces(
    pieces_pack: Path, tmp_path: Path, edit: Callable[[h5py.File], None], expected: Any
) -> None:
    p = with_fixed_digests(pieces_pack, tmp_path, edit)
    found = codes(p)
    if expected is None:  # a piece moved one character left: onto whitespace, or out of its chunk
        assert {c for c, _ in found} & {"piece-whitespace", "piece-outside-chunk", "piece-order"}
    else:
        assert expected in found, found
    assert not any(c.startswith("digest") for c, _ in found)


def test_verify_finds_a_chunk_left_with_one_piece(pieces_pack: Path, tmp_path: Path) -> None:
    def single(h: h5py.File) -> None:
        # give the first piece a chunk of its own: the last chunk, which then has one piece
        # (rows stay ordered when that chunk had no pieces, so only piece-single fires)
        h[F.PIECE_CHUNK][0]
        chunk = h[F.PIECE_CHUNK][()]
        lone = int(h[F.CHUNK_FROM].shape[0] - 1)
        if lone in chunk:
            pytest.skip("the last chunk has pieces in this corpus")
        moved = chunk.copy()
        moved[-1] = lone
        h[F.PIECE_CHUNK][...] = moved

    p = with_fixed_digests(pieces_pack, tmp_path, single)
    assert ("piece-single", F.PIECE_CHUNK) in codes(p)


def test_the_pieces_count_must_match_and_be_present(pieces_pack: Path, tmp_path: Path) -> None:
    from tests.fixture_pack import restamp

    out = tmp_path / "c.kbpack"
    out.write_bytes(pieces_pack.read_bytes())
    counts = dict(read_header(out).manifest.counts)
    counts["pieces"] += 1
    restamp(out, counts=counts)
    assert ("count-mismatch", F.PIECE_DATA) in codes(out)
    del counts["pieces"]
    restamp(out, counts=counts)
    assert codes(out) == {("count-mismatch", "header/counts/pieces")}


def test_the_independent_reader_reads_pieces(pieces_pack: Path) -> None:
    """Spec §3.9 is enough to read pieces without kbpack (tests/independent_reader.py)."""
    from tests import independent_reader as ind
    from tests.fixture_pack import agree_with_spec

    assert agree_with_spec(pieces_pack) > 0
    pieces = ind.read_pieces(str(pieces_pack))
    with PackReader(pieces_pack) as r:
        assert len(pieces) == r.counts["pieces"] > 0
        np.testing.assert_array_equal(np.stack([p.vector for p in pieces]), r.piece_vectors())


def test_diff_says_when_the_piece_level_differs(
    pieces_pack: Path, corpus: Path, tmp_path: Path, wide_model_200: Path
) -> None:
    build(corpus, tmp_path / "n.kbpack", wide_model_200, "--no-pieces")
    code, out, _ = run("diff", str(tmp_path / "n.kbpack"), str(pieces_pack), "--json")
    with PackReader(pieces_pack) as r:
        n = r.counts["pieces"]
    assert code == 1
    assert f"sentence pieces none -> {n}" in json.loads(out)["differences"]


def test_migrate_keeps_the_pieces(pieces_pack: Path, tmp_path: Path, wide_model_200: Path) -> None:
    out = tmp_path / "m.kbpack"
    code, _, err = run(
        "migrate", str(pieces_pack), "-o", str(out), "--model", str(wide_model_200), "--json"
    )
    assert code == 0, err
    with PackReader(pieces_pack) as a, PackReader(out) as b:
        assert b.counts["pieces"] == a.counts["pieces"] > 0
        np.testing.assert_array_equal(a.piece_vectors(), b.piece_vectors())
        for col in (F.PIECE_CHUNK, F.PIECE_FROM, F.PIECE_TO):
            np.testing.assert_array_equal(a.column(col), b.column(col))
