"""kbpack merge: packs streamed into one equal a fresh build of the union."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from packs import markdown_doc, write_pack
from scale_corpus import PART_A, PART_B, assert_same_content, build_pack, write_folder

from kbpack.cli.main import cli
from kbpack.errors import UsageError
from kbpack.ops.merge import merge_packs
from kbpack.pack.read import PackReader
from kbpack.verify.pipeline import verify_pack


@pytest.fixture(scope="module")
def model(wide_model: Path) -> Path:
    return wide_model  # conftest: built once per session


@pytest.fixture(scope="module")
def packs(tmp_path_factory: pytest.TempPathFactory, model: Path) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("merge")
    return {
        "a": build_pack(write_folder(root / "a", PART_A), root / "a.kbpack", model),
        "b": build_pack(write_folder(root / "b", PART_B), root / "b.kbpack", model),
        "union": build_pack(
            write_folder(root / "u", {**PART_A, **PART_B}), root / "union.kbpack", model
        ),
    }


@pytest.mark.parametrize("order", [("a", "b"), ("b", "a")])
def test_merge_equals_a_fresh_build_of_the_union(
    packs: dict[str, Path], tmp_path: Path, order: tuple[str, str]
) -> None:
    out = tmp_path / "merged.kbpack"
    report = merge_packs([packs[k] for k in order], out)
    # source_path is the path each build was given: informational, different by construction
    assert_same_content(out, packs["union"], skip=("/documents/source_path",))
    assert verify_pack(out).intact
    with PackReader(out) as r, PackReader(packs["union"]) as u:
        assert r.counts == u.counts
        assert r.model == u.model and r.chunking == u.chunking
        sources = r.manifest.extra["merged_from"]
    assert [s["file"] for s in sources] == [f"{k}.kbpack" for k in order]
    for s, k in zip(sources, order, strict=True):
        with PackReader(packs[k]) as src:
            assert s["hdf5_sha256"] == src.manifest.hdf5_sha256
            assert s["documents"] == src.counts["documents"]
    assert report.counts["documents_failed"] == 1  # broken.pdf keeps its failure record


def test_merging_a_merged_pack_keeps_its_history(
    packs: dict[str, Path], model: Path, tmp_path: Path
) -> None:
    ab = merge_packs([packs["a"], packs["b"]], tmp_path / "ab.kbpack").path
    src = write_folder(tmp_path / "z", {"zeta.md": "# Zeta\n\nA last note.\n"})
    z = build_pack(src, tmp_path / "z.kbpack", model)
    abz = merge_packs([ab, z], tmp_path / "abz.kbpack").path
    with PackReader(abz) as r:
        history = r.manifest.extra["merged_from"]
    assert [s["file"] for s in history] == ["ab.kbpack", "z.kbpack"]
    assert [s["file"] for s in history[0]["merged_from"]] == ["a.kbpack", "b.kbpack"]
    lexical = build_pack(src, tmp_path / "z-lex.kbpack", None)
    with pytest.raises(UsageError, match=r"z-lex.kbpack has no vectors but .*ab.kbpack has"):
        merge_packs([ab, lexical], tmp_path / "x.kbpack")


def test_duplicate_names_need_prefer(packs: dict[str, Path], model: Path, tmp_path: Path) -> None:
    changed = tmp_path / "a2"
    write_folder(changed, {"alpha.md": "# Rotating logs\n\nRewritten: logs rotate daily now.\n"})
    a2 = build_pack(changed, tmp_path / "a2.kbpack", model)
    with pytest.raises(UsageError, match=r"^alpha.md: in both .*a.kbpack and .*a2.kbpack; pass"):
        merge_packs([packs["a"], a2], tmp_path / "x.kbpack")
    assert not (tmp_path / "x.kbpack").exists()
    for prefer, want in (("first", "Logs grow without bound"), ("last", "Rewritten")):
        out = merge_packs([packs["a"], a2], tmp_path / f"{prefer}.kbpack", prefer=prefer)  # type: ignore[arg-type]
        assert [d["name"] for d in out.dropped] == ["alpha.md"]
        with PackReader(out.path) as r:
            names = r.strings("/documents/name")
            assert names.count("alpha.md") == 1
            assert want in r.text(names.index("alpha.md"))


def test_packs_of_two_models_are_refused(
    packs: dict[str, Path], tiny_model_b: Path, tmp_path: Path
) -> None:
    other = build_pack(
        write_folder(tmp_path / "o", {"zeta.md": "# Zeta\n\nNote.\n"}),
        tmp_path / "o.kbpack",
        tiny_model_b,
    )
    with pytest.raises(UsageError, match=r"o.kbpack: embedded with tiny-b .* cannot share a pack"):
        merge_packs([packs["a"], other], tmp_path / "x.kbpack")


def test_cli_merge_json_and_errors(packs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "cli.kbpack"
    r = CliRunner().invoke(
        cli, ["merge", str(packs["a"]), str(packs["b"]), "-o", str(out), "--json"]
    )
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    assert report["counts"]["documents"] == 5 and len(report["sources"]) == 2
    r = CliRunner().invoke(cli, ["merge", str(packs["a"]), str(packs["a"]), "-o", str(out)])
    assert r.exit_code == 2
    assert "given twice" in r.stderr
    r = CliRunner().invoke(cli, ["merge", str(packs["a"]), str(out), "-o", str(out)])
    assert r.exit_code == 2 and "is also an input; write to another path" in r.stderr
    r = CliRunner().invoke(
        cli, ["merge", str(packs["a"]), str(packs["b"]), "-o", str(tmp_path / "t.kbpack")]
    )
    assert (
        r.exit_code == 0
        and "merged       a.kbpack (3 documents), b.kbpack (2 documents)" in r.stdout
    )


def test_packs_of_other_prefixes_are_refused(
    packs: dict[str, Path], model: Path, tmp_path: Path
) -> None:
    src = write_folder(tmp_path / "p", {"zeta.md": "# Zeta\n\nNote.\n"})
    other = build_pack(src, tmp_path / "p.kbpack", model, doc_prefix="passage: ")
    with pytest.raises(UsageError, match=r"p.kbpack: its model stamp differs .* in doc_prefix"):
        merge_packs([packs["a"], other], tmp_path / "x.kbpack")


def test_inspect_shows_where_a_merged_pack_came_from(
    packs: dict[str, Path], tmp_path: Path
) -> None:
    out = merge_packs([packs["a"], packs["b"]], tmp_path / "ab.kbpack").path
    r = CliRunner().invoke(cli, ["inspect", str(out), "--json"])
    assert [s["file"] for s in json.loads(r.stdout)["provenance"]["merged_from"]] == [
        "a.kbpack",
        "b.kbpack",
    ]
    r = CliRunner().invoke(cli, ["inspect", str(out)])
    assert "merged from  a.kbpack, b.kbpack" in r.stdout


def long_doc(topic: str) -> str:
    """One chunk of a dozen sentences: several pieces."""
    body = " ".join(
        f"Sentence {i} says the {topic} handler rotates logs at noon." for i in range(12)
    )
    return f"# {topic.title()}\n\n{body}\n"


def write_with_pieces(out: Path, docs: dict[str, str]) -> Path:
    """A pack with sentence pieces, chunked by characters; each vector a function of its text
    (so that two packs holding the same text hold the same vectors)."""
    from kbpack.index.chunk import ChunkConfig, chunk_document
    from kbpack.index.pieces import pieces_of
    from kbpack.index.postings import PostingsBuilder
    from kbpack.pack.write import PackWriter

    def vec(text: str) -> np.ndarray:
        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")
        rng = np.random.default_rng(seed)
        v = rng.normal(size=8).astype(np.float32)
        return v / np.linalg.norm(v)

    stamp = {
        "name": "test-model",
        "sha256": "0" * 64,
        "architecture": "bert",
        "dims": 8,
        "pooling": "mean",
        "window": 256,
        "normalize": "l2",
        "llama_cpp_version": "test",
    }
    postings = PostingsBuilder(headers=True)
    with PackWriter(out, model=stamp, dims=8, pieces=True) as w:
        for name in sorted(docs):
            doc = markdown_doc(name, docs[name])
            chunks = chunk_document(doc, None, ChunkConfig(window=None, max_chars=1000)).chunks
            cut = pieces_of(doc.text, [(c.start, c.end) for c in chunks])
            first = w.n_chunks
            w.add_document(
                doc,
                chunks,
                np.array([vec(doc.text[c.start : c.end]) for c in chunks]),
                cut,
                np.array([vec(doc.text[p.start : p.end]) for p in cut]).reshape(-1, 8),
            )
            for k, c in enumerate(chunks):
                postings.add_chunk(first + k, doc, c)
        w.set_postings(postings.finish(w.n_chunks))
        w.commit()
    return out


def test_merge_keeps_sentence_pieces(tmp_path: Path) -> None:
    one = {"p1.md": long_doc("disk"), "p2.md": long_doc("queue")}
    two = {"p3.md": long_doc("thread")}
    a = write_with_pieces(tmp_path / "a.kbpack", one)
    b = write_with_pieces(tmp_path / "b.kbpack", two)
    u = write_with_pieces(tmp_path / "u.kbpack", {**one, **two})
    out = merge_packs([a, b], tmp_path / "m.kbpack").path
    with PackReader(out) as r:
        assert r.has_pieces and r.counts["pieces"] > 0
    assert_same_content(out, u)  # piece vectors bit for bit
    plain = tmp_path / "c.kbpack"
    write_pack(plain, [markdown_doc("z.md", "# Z\n\nNote.\n")], dims=8)
    with pytest.raises(UsageError, match=r"c.kbpack: its sentence pieces \(build --pieces\)"):
        merge_packs([a, plain], tmp_path / "x.kbpack")
