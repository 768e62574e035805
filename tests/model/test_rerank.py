"""The reranker: a tiny random cross-encoder converted by kbpack, run by llama.cpp's rank
pooling, against a numpy forward pass of the same weights (tests/bert_reference.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from bert_reference import BertReference
from tiny_gguf import build_tiny_gguf, write_bert_folder

from kbpack.errors import ModelError
from kbpack.model import convert_bert, identify_gguf
from kbpack.model.embedder import Embedder
from kbpack.model.gguf_header import read_gguf_metadata
from kbpack.model.identity import RERANK_POOLINGS
from kbpack.model.rerank import Reranker

QUERY = "search the pack offline"
PASSAGES = [
    "the pack is a file: search it offline",
    "a vector is not text",
    "the model",
    "search, search, search the text file; the pack is offline and the model is not",
    "x",
]


@pytest.fixture(scope="module")
def cross_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("rerank") / "tiny-rerank.gguf"
    return build_tiny_gguf(out, name="tiny-rerank", classifier=True, window=64, seed=11)


def test_converted_cross_encoder_has_rank_pooling_and_a_head(cross_encoder: Path) -> None:
    meta = read_gguf_metadata(cross_encoder)
    assert meta["bert.pooling_type"] == 4  # RANK
    assert identify_gguf(cross_encoder, poolings=RERANK_POOLINGS).pooling == "rank"
    import gguf

    names = {t.name for t in gguf.GGUFReader(cross_encoder).tensors}
    assert {"cls.weight", "cls.bias", "cls.output.weight", "cls.output.bias"} <= names


def test_scores_match_the_numpy_cross_encoder(cross_encoder: Path) -> None:
    reference = BertReference(cross_encoder.with_name(cross_encoder.stem + "-src"))
    with Reranker(cross_encoder) as rr:
        got = rr.score(QUERY, PASSAGES)
        pairs = [rr.pair_tokens(QUERY, p) for p in PASSAGES]
    want = np.array([reference.relevance(ids) for ids in pairs])
    # float16 matrices in the GGUF: scores agree to a few thousandths, and so does the order
    np.testing.assert_allclose(got, want, atol=0.005)
    assert list(np.argsort(-got)) == list(np.argsort(-want))
    assert np.ptp(want) > 0.1  # the passages really are scored differently


def test_pair_layout_is_cls_query_sep_passage_sep(cross_encoder: Path) -> None:
    with Reranker(cross_encoder) as rr:
        q = rr.tokenize(QUERY)
        p = rr.tokenize(PASSAGES[0])
        assert rr.pair_tokens(QUERY, PASSAGES[0]) == q + p[1:]
        assert q[0] == p[0] and q[-1] == p[-1]  # [CLS] ... [SEP] around each text


def test_a_long_passage_is_cut_to_the_window_and_counted(cross_encoder: Path) -> None:
    with Reranker(cross_encoder) as rr:
        ids = rr.pair_tokens(QUERY, "the pack " * 200)
        assert len(ids) == rr.window and rr.truncated == 1
        assert ids[-1] == rr.tokenize("x")[-1]  # still closed by [SEP]
        assert np.isfinite(rr.score("q " * 200, ["the pack " * 200])).all()


def test_an_embedding_model_is_not_a_reranker_and_back(
    cross_encoder: Path, tiny_model: Path
) -> None:
    with pytest.raises(ModelError, match=r"pooling 'mean' .* is not a reranker's"):
        Reranker(tiny_model)
    with pytest.raises(ModelError, match=r"pooling 'rank' .* is a reranker's, not an embedding"):
        Embedder(cross_encoder)


def test_two_token_type_cross_encoders_are_refused(tmp_path: Path) -> None:
    folder = write_bert_folder(tmp_path / "src", classifier=True)
    config = (
        (folder / "config.json").read_text().replace('"type_vocab_size": 1', '"type_vocab_size": 2')
    )
    (folder / "config.json").write_text(config)
    with pytest.raises(
        ModelError, match=r"type_vocab_size 2: this cross-encoder reads the passage"
    ):
        convert_bert(folder, tmp_path / "x.gguf")


# -- in the query ----------------------------------------------------------------------------

DOCS = {
    "logs.md": "# Rotating logs\n\nLogs grow without bound unless rotated.\n\n"
    "## Configuration\n\nSet max_bytes to 10485760 and backup_count to 5.\n\n"
    "## Troubleshooting\n\nError 0x80070005 means access denied: run the service as its user.\n",
    "db.md": "# Database\n\n## Threads\n\nPass check_same_thread=False to share one connection.\n\n"
    "## Compression\n\nArchives use ZIP_DEFLATED when zlib is available.\n",
    "notes.txt": "Deploy to EU-WEST-1 first.\n\nUse %z in strftime for the offset.\n\n"
    "Run python -X importtime to see slow imports.\n",
}


def run(*args: str) -> tuple[int, str, str]:
    from click.testing import CliRunner

    from kbpack.cli.main import cli

    r = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


@pytest.fixture(scope="module")
def pack(tmp_path_factory: pytest.TempPathFactory, wide_model: Path) -> Path:
    """The corpus built with the shared ``wide_model`` (conftest), the model of its queries."""
    root = tmp_path_factory.mktemp("corpus")
    for name, text in DOCS.items():
        (root / name).write_text(text)
    out = root.parent / "docs.kbpack"
    assert run("build", str(root), "-o", str(out), "--model", str(wide_model), "--quiet")[0] == 0
    return out


def query(pack: Path, model: Path, *args: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    import json

    code, out, err = run(
        "query", str(pack), *args, "--json", "--max-distance", "2", "--model", str(model)
    )
    assert code in (0, 3), err
    return code, json.loads(out)


def test_rerank_reorders_the_same_results_by_the_cross_encoder(
    pack: Path, cross_encoder: Path, wide_model: Path
) -> None:
    from kbpack.index.chunk import header
    from kbpack.model.rerank import rerank_text

    q = "how do I rotate the logs"
    _, plain = query(pack, wide_model, q, "-k", "6")
    assert plain["lexical_only"] is False and plain["mode"] == "hybrid"
    _, ranked = query(
        pack, wide_model, q, "-k", "6", "--rerank", str(cross_encoder), "--rerank-top", "6"
    )
    before, after = plain["results"], ranked["results"]
    assert sorted(r["chunk"] for r in before) == sorted(r["chunk"] for r in after)
    scores = [r["rerank_score"] for r in after]
    assert scores == sorted(scores, reverse=True)
    assert [r["rank"] for r in after] == list(range(1, len(after) + 1))
    assert all("rerank_score" not in r for r in before)
    texts = [
        rerank_text(
            header(r["title"], r["section"].split(" > ") if r["section"] else []), r["content"]
        )
        for r in after
    ]
    with Reranker(cross_encoder) as rr:
        direct = rr.score(q, texts)
    np.testing.assert_allclose(scores, direct, atol=1e-5)
    # first-stage facts are reported unchanged beside the new order
    by_chunk = {r["chunk"]: r for r in before}
    for r in after:
        assert r["distance"] == by_chunk[r["chunk"]]["distance"]
        assert r["bm25_rank"] == by_chunk[r["chunk"]]["bm25_rank"]


def test_rerank_top_limits_what_is_scored(
    pack: Path, cross_encoder: Path, wide_model: Path
) -> None:
    q = "share one connection between threads"
    _, plain = query(pack, wide_model, q, "-k", "5")
    _, ranked = query(
        pack, wide_model, q, "-k", "5", "--rerank", str(cross_encoder), "--rerank-top", "2"
    )
    after = ranked["results"]
    assert [r.get("rerank_score") is not None for r in after] == [True, True, False, False, False][
        : len(after)
    ]
    assert [r["chunk"] for r in after[2:]] == [r["chunk"] for r in plain["results"][2:]]
    assert {r["chunk"] for r in after[:2]} == {r["chunk"] for r in plain["results"][:2]}


def test_refusal_stays_on_first_stage_scores(
    pack: Path, cross_encoder: Path, wide_model: Path
) -> None:
    """Whether the query is answered, and which chunks are listed, is the first stage's
    decision, whatever the cross-encoder thinks: refusal decides per query (issue 32), so a
    threshold that three chunks pass answers with the first stage's top k, and one that none
    passes refuses with and without the reranker."""
    import json

    q = "rotate logs"
    _, everything = query(pack, wide_model, q, "--mode", "dense", "-k", "20")
    distances = sorted(r["distance"] for r in everything["results"])
    for cut, answered in (((distances[2] + distances[3]) / 2, True), (distances[0] / 2, False)):
        base = ("query", str(pack), q, "--mode", "dense", "-k", "20", "--json")
        base += ("--max-distance", str(cut), "--model", str(wide_model))
        _, plain, _ = run(*base)
        _, ranked, _ = run(*base, "--rerank", str(cross_encoder))
        docs = [json.loads(out) for out in (plain, ranked)]
        chunks = [{r["chunk"] for r in d["results"]} for d in docs]
        assert [d["answered"] for d in docs] == [answered, answered]
        assert chunks[0] == chunks[1]
        assert len(chunks[0]) == (len(everything["results"]) if answered else 0)


def test_rerank_with_an_embedding_model_is_one_line_exit_1(pack: Path, tiny_model: Path) -> None:
    code, out, err = run("query", str(pack), "logs", "--rerank", str(tiny_model))
    assert code == 1 and out == ""
    assert err.startswith(f"kbpack: error: {tiny_model}: pooling 'mean'") and err.count("\n") == 1


def test_model_import_and_info_of_a_cross_encoder(tmp_path: Path) -> None:
    import json

    folder = write_bert_folder(tmp_path / "src", classifier=True, seed=3)
    out = tmp_path / "r.gguf"
    code, stdout, err = run("model", "import", str(folder), "-o", str(out), "--json")
    assert code == 0, err
    assert json.loads(stdout)["pooling"] == "rank"
    code, stdout, _ = run("model", "info", str(out), "--json")
    record = json.loads(stdout)
    assert code == 0 and record["role"] == "reranker" and "query_prefix" not in record


def test_eval_pairs_each_mode_with_itself_reranked(
    pack: Path, cross_encoder: Path, tmp_path: Path, wide_model: Path
) -> None:
    import json

    questions = tmp_path / "q.jsonl"
    rows = [
        {"id": "a", "query": "rotate the logs", "needle": "Logs grow without bound"},
        {"id": "b", "query": "share a connection", "needle": "check_same_thread=False"},
        {"id": "c", "query": "zlib archives", "needle": "ZIP_DEFLATED"},
        {"id": "d", "query": "timezone offset", "needle": "%z in strftime"},
    ]
    questions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    model = str(wide_model)
    args = ["eval", str(pack), str(questions), "--mode", "hybrid", "-k", "1,5", "--ranks"]
    args += ["--model", model, "--rerank", str(cross_encoder), "--rerank-top", "5", "--json"]
    code, out, err = run(*args)
    assert code == 0, err
    report = json.loads(out)
    assert set(report["modes"]) == {"hybrid", "hybrid+rerank"}
    assert report["rerank"]["top"] == 5 and report["rerank"]["model"]["pooling"] == "rank"
    (pair,) = [p for p in report["paired"] if p["subset"] == "all"]
    assert (pair["a"], pair["b"]) == ("hybrid", "hybrid+rerank")
    # reranking the top 5 reorders them and never changes which needles are in the top 5
    plain, ranked = report["modes"]["hybrid"]["all"], report["modes"]["hybrid+rerank"]["all"]
    assert plain["recall"]["5"] == ranked["recall"]["5"]
    ranks = report["ranks"]
    for q in rows:
        a, b = ranks["hybrid"][q["id"]], ranks["hybrid+rerank"][q["id"]]
        assert (a is None or a > 5) == (b is None or b > 5)
    code, _, err = run(*args, "--against", str(pack))
    assert code == 2 and "give one" in err
