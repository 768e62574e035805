"""Query/document prefixes: family defaults, stored beside the model identity, applied on both
sides by construction, counted in token budgets, and treated like a model change by update,
migrate and diff. Real llama.cpp on tiny random models."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest
from cli_run import run
from tiny_gguf import build_tiny_gguf

import kbpack
from kbpack.errors import UsageError
from kbpack.index.chunk import embedded_text, header, section_path
from kbpack.model.embedder import Embedder
from kbpack.model.prefixes import BGE_QUERY, Prefixes, default_prefixes, family_of, override
from kbpack.ops.restore import PackContents
from kbpack.pack import format as F
from kbpack.pack.read import PackReader
from tests.paths import REPO_ROOT

DOCS = {
    "logs.md": "# Rotating logs\n\nLogs grow without bound unless rotated.\n\n"
    "## Configuration\n\nSet max_bytes to 10485760 and backup_count to 5.\n",
    "db.md": "# Database\n\n## Threads\n\nPass check_same_thread=False to share one connection.\n",
}
QUERY, DOC = "query: ", "passage: "


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("corpus")
    for name, text in DOCS.items():
        (root / name).write_text(text)
    return root


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny BERT of no known family, 256-token window."""
    return build_tiny_gguf(
        tmp_path_factory.mktemp("m") / "plain.gguf", name="tiny-plain", window=256
    )


@pytest.fixture(scope="module")
def e5_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same kind of tiny BERT, named as llama.cpp's converter names an e5 model."""
    out = tmp_path_factory.mktemp("e5") / "e5.gguf"
    return build_tiny_gguf(out, name="E5 Small v2", seed=2, window=256)


@pytest.fixture(scope="module")
def prefixed(corpus: Path, model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("packs") / "prefixed.kbpack"
    code, _, err = run(
        "build", str(corpus), "-o", str(out), "--model", str(model),
        "--query-prefix", QUERY, "--doc-prefix", DOC, "--quiet",
    )  # fmt: skip
    assert code == 0, err
    return out


# -- the table -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "query", "document"),
    [
        ("e5-small-v2", "query: ", "passage: "),
        ("E5 Small v2", "query: ", "passage: "),  # llama.cpp's converter's general.name
        ("multilingual-e5-base", "query: ", "passage: "),
        ("nomic-embed-text-v1.5", "search_query: ", "search_document: "),
        ("Bge Small En v1.5", BGE_QUERY, ""),
        ("bge-large-en", BGE_QUERY, ""),
        ("snowflake-arctic-embed-m-v1.5", BGE_QUERY, ""),
        ("snowflake-arctic-embed-m-v2.0", "query: ", ""),
        ("mxbai-embed-large-v1", BGE_QUERY, ""),
        ("all-MiniLM-L6-v2", "", ""),  # the default model takes none
        ("bge-m3", "", ""),
        ("gte-small", "", ""),
        ("be5t-model", "", ""),  # "e5" only as a word of the name
    ],
)
def test_family_defaults_by_name(name: str, query: str, document: str) -> None:
    assert default_prefixes(name) == Prefixes(query, document)


def test_instruct_e5_is_not_plain_e5() -> None:
    family = family_of("multilingual-e5-large-instruct")
    assert family is not None and "instruct" in family.label
    assert family.prefixes.query.startswith("Instruct: ") and family.prefixes.document == ""


def test_first_known_name_wins_then_the_file_name() -> None:
    assert default_prefixes("model", "e5-small-v2.Q8_0") == Prefixes("query: ", "passage: ")
    assert default_prefixes("tiny", "other") == Prefixes()


def test_override_keeps_what_is_not_given_and_empty_turns_off() -> None:
    base = Prefixes("query: ", "passage: ")
    assert override(base, None, None) == base
    assert override(base, None, "") == Prefixes("query: ", "")
    assert override(base, "q: ", None) == Prefixes("q: ", "passage: ")
    with pytest.raises(UsageError, match=r"^--doc-prefix: 1001 characters"):
        override(base, None, "x" * 1001)


# -- build and query -------------------------------------------------------------------------


def test_the_pack_records_the_prefixes_beside_the_model(prefixed: Path) -> None:
    with h5py.File(prefixed, "r") as h:
        attrs = h[F.MODEL].attrs
        assert (attrs[F.M_QUERY_PREFIX], attrs[F.M_DOC_PREFIX]) == (QUERY, DOC)
    code, out, _ = run("verify", str(prefixed), "--json")
    assert code == 0, out


def test_vectors_and_token_counts_include_the_doc_prefix(prefixed: Path, model: Path) -> None:
    with PackReader(prefixed) as r, Embedder(model) as emb:
        contents = PackContents(r)
        doc = contents.document(0)
        chunks = contents.chunks(0)
        texts = [
            embedded_text(
                header(doc.title, section_path(doc, c.section)), doc.text[c.start : c.end]
            )
            for c in chunks
        ]
        stored = contents.vectors(0)
        with_prefix = emb.embed([DOC + t for t in texts])
        without = emb.embed(texts)
        # float16 storage: 1e-3 is its rounding; the unprefixed vectors are far further away
        assert np.abs(stored - with_prefix).max() < 2e-3
        assert np.abs(stored - without).max() > 1e-2
        assert [c.tokens for c in chunks] == [emb.count_tokens(DOC + t) for t in texts]
        assert all(doc.text[c.start : c.end] and DOC not in doc.text for c in chunks)


def test_query_side_takes_the_prefix_from_the_pack(prefixed: Path, model: Path) -> None:
    """Even an explicit --model (an embedder that knows no prefix) queries with the pack's."""
    q = "rotate the logs"
    with kbpack.open(prefixed, model=model) as p, Embedder(model, prefixes=Prefixes()) as emb:
        got = p.searcher.dense_distances(q)
        vectors = p.reader.vectors()
        expected = 1.0 - vectors @ emb.embed([QUERY + q])[0]
        unprefixed = 1.0 - vectors @ emb.embed([q])[0]
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert np.abs(got - unprefixed).max() > 1e-3


def test_query_results_quote_content_not_prefix(prefixed: Path, model: Path) -> None:
    code, out, _ = run("query", str(prefixed), "check_same_thread", "--model", str(model), "--json")
    assert code == 0
    res = json.loads(out)["results"]
    assert res and all(not r["content"].startswith(DOC) for r in res)


def test_family_default_applies_and_can_be_turned_off(
    corpus: Path, e5_model: Path, tmp_path: Path
) -> None:
    a, b = tmp_path / "a.kbpack", tmp_path / "b.kbpack"
    assert run("build", str(corpus), "-o", str(a), "--model", str(e5_model), "--quiet")[0] == 0
    code = run(
        "build", str(corpus), "-o", str(b), "--model", str(e5_model), "--doc-prefix", "", "--quiet"
    )[0]
    assert code == 0
    with PackReader(a) as ra, PackReader(b) as rb:
        assert Prefixes.from_stamp(ra.model) == Prefixes("query: ", "passage: ")
        assert Prefixes.from_stamp(rb.model) == Prefixes("query: ", "")


def test_model_info_shows_the_defaults(e5_model: Path) -> None:
    code, out, _ = run("model", "info", str(e5_model), "--json")
    record = json.loads(out)
    assert code == 0 and record["family"].startswith("e5")
    assert (record["query_prefix"], record["doc_prefix"]) == ("query: ", "passage: ")


def test_a_pack_without_prefix_attributes_reads_as_none(prefixed: Path, tmp_path: Path) -> None:
    """Packs written before prefixes existed: no attributes means no prefixes."""
    golden = REPO_ROOT / "fixtures" / "golden" / "v1.kbpack"
    with PackReader(golden) as r:
        if r.model is None:
            pytest.skip("golden pack has no vectors")
        assert Prefixes.from_stamp(r.model) == Prefixes()


# -- update, migrate, diff -------------------------------------------------------------------


def test_update_keeps_the_prefixes_and_reuses_every_vector(
    prefixed: Path, corpus: Path, model: Path, tmp_path: Path
) -> None:
    out = tmp_path / "u.kbpack"
    code, stdout, err = run(
        "update", str(prefixed), str(corpus), "-o", str(out), "--model", str(model), "--json"
    )
    assert code == 0, err
    report = json.loads(stdout)
    assert report["vectors_embedded"] == 0 and report["reused_documents"] == 2
    with PackReader(out) as r:
        assert Prefixes.from_stamp(r.model) == Prefixes(QUERY, DOC)


def test_update_with_another_doc_prefix_reembeds(
    prefixed: Path, corpus: Path, model: Path, tmp_path: Path
) -> None:
    out = tmp_path / "u2.kbpack"
    code, stdout, _ = run(
        "update", str(prefixed), str(corpus), "-o", str(out), "--model", str(model),
        "--doc-prefix", "", "--json",
    )  # fmt: skip
    report = json.loads(stdout)
    assert code == 0 and report["reused_documents"] == 0 and report["vectors_embedded"] > 0
    with PackReader(out) as r:
        assert Prefixes.from_stamp(r.model) == Prefixes(QUERY, "")


def test_migrate_treats_a_prefix_change_like_a_model_change(
    prefixed: Path, model: Path, tmp_path: Path
) -> None:
    code, stdout, _ = run(
        "migrate", str(prefixed), "--model", str(model), "--doc-prefix", "doc: ", "--dry-run",
        "--json",
    )  # fmt: skip
    plan = json.loads(stdout)
    assert code == 0 and plan["model"]["changed"] is True
    assert plan["chunks"]["to_embed"] == plan["chunks"]["after"] > 0
    out = tmp_path / "m.kbpack"
    code, stdout, err = run(
        "migrate", str(prefixed), "-o", str(out), "--model", str(model), "--doc-prefix", "doc: ",
        "--json",
    )  # fmt: skip
    assert code == 0, err
    with PackReader(out) as r, Embedder(model) as emb:
        assert Prefixes.from_stamp(r.model) == Prefixes(QUERY, "doc: ")
        contents = PackContents(r)
        doc, chunks = contents.document(0), contents.chunks(0)
        c = chunks[0]
        text = embedded_text(
            header(doc.title, section_path(doc, c.section)), doc.text[c.start : c.end]
        )
        assert np.abs(contents.vectors(0)[0] - emb.embed(["doc: " + text])[0]).max() < 2e-3
    code, stdout, _ = run("migrate", str(prefixed), "--model", str(model), "--dry-run", "--json")
    assert json.loads(stdout)["model"]["changed"] is False  # no flags: nothing to re-embed


def test_diff_reports_a_prefix_change_as_a_model_change(
    prefixed: Path, corpus: Path, model: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other.kbpack"
    code = run(
        "build", str(corpus), "-o", str(other), "--model", str(model), "--query-prefix", QUERY,
        "--quiet",
    )[0]  # fmt: skip
    assert code == 0
    code, stdout, _ = run("diff", str(prefixed), str(other), "--json")
    d = json.loads(stdout)
    model_lines = [line for line in d["differences"] if line.startswith("model ")]
    assert model_lines and "doc_prefix 'passage: '" in model_lines[0]
    assert d["vectors"] == {}  # vectors under different prefixes are never compared


def test_a_pack_set_with_different_prefixes_is_searched_lexically(
    prefixed: Path, corpus: Path, model: Path, tmp_path: Path
) -> None:
    """One query vector serves a whole set: packs whose prefixes differ cannot share it."""
    bare = tmp_path / "bare.kbpack"
    assert run("build", str(corpus), "-o", str(bare), "--model", str(model), "--quiet")[0] == 0
    with kbpack.open_many([prefixed, bare], model=model) as packs:
        resp = packs.search("rotate the logs", k=2)
    assert resp.lexical_only
    assert any("prefixes" in note for note in resp.notes)


def test_inspect_shows_the_prefixes(prefixed: Path) -> None:
    code, out, _ = run("inspect", str(prefixed))
    assert code == 0
    assert "query 'query: ', document 'passage: '" in out
    code, out, _ = run("inspect", str(prefixed), "--json")
    model = json.loads(out)["model"]
    assert (model["query_prefix"], model["doc_prefix"]) == (QUERY, DOC)


def test_model_embed_as_query_uses_the_family_prefix(e5_model: Path) -> None:
    code, out, _ = run(
        "model", "embed", "rotate logs", "--as", "query", "--model", str(e5_model), "--json"
    )
    item = json.loads(out)["items"][0]
    assert code == 0 and item["text"] == "query: rotate logs"
    with Embedder(e5_model) as emb:
        np.testing.assert_allclose(item["vector"], emb.embed(["query: rotate logs"])[0], atol=1e-6)
    code, out, _ = run("model", "embed", "rotate logs", "--model", str(e5_model), "--json")
    assert json.loads(out)["items"][0]["text"] == "rotate logs"  # default: the text as given
