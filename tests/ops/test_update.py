"""kbpack update: reuse what did not change, and end with what a fresh build makes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from cli_run import run

from kbpack.pack import format as F
from kbpack.pack.read import PackReader

CORPUS = {
    "logs.md": "# Rotating logs\n\nLogs grow without bound unless rotated.\n\n## Limits\n\n"
    "Set max_bytes to 10485760 in the handler.\n\n## Errors\n\nError 0x80070005 means access denied.\n",
    "db.md": "# Database\n\n## Threads\n\nShare one connection between threads and lock it.\n",
    "notes.txt": "Deploy to EU-WEST-1 first.\n\nUse %z in strftime for the UTC offset.\n",
    "guide/install.md": "# Install\n\nThe build takes four minutes.\n\n## Offline\n\nNo network is used.\n",
    "broken.pdf": "this is not a pdf",
    "data.xyz": "unsupported",
}


def write_corpus(root: Path, docs: dict[str, str]) -> Path:
    for name, text in docs.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def build_json(src: Path, out: Path, model: Path, *extra: str) -> dict:
    code, stdout, err = run(
        "build", str(src), "-o", str(out), "--model", str(model), "--threads", "1", "--json", *extra
    )
    assert code == 0, err
    return json.loads(stdout)


def update_json(pack: Path, src: Path, model: Path, *extra: str) -> dict:
    args = ["update", str(pack), str(src), "--model", str(model), "--threads", "1", "--json"]
    code, stdout, err = run(*args, *extra)
    assert code == 0, err
    return json.loads(stdout)


def diff_code(a: Path, b: Path) -> tuple[int, dict]:
    code, out, _ = run("diff", str(a), str(b), "--json")
    return code, json.loads(out)


@pytest.fixture
def built(tmp_path: Path, wide_model_200: Path) -> tuple[Path, Path, dict]:
    src = write_corpus(tmp_path / "src", CORPUS)
    report = build_json(src, tmp_path / "old.kbpack", wide_model_200)
    return src, tmp_path / "old.kbpack", report


def test_update_after_edits_equals_a_fresh_build_and_reuses(
    built: tuple[Path, Path, dict], tmp_path: Path, wide_model_200: Path
) -> None:
    src, old, first = built
    logs = src / "logs.md"
    logs.write_text(logs.read_text().replace("unless rotated", "unless rotated daily"))
    (src / "db.md").unlink()
    write_corpus(src, {"guide/new.md": "# New\n\nBackups run at midnight.\n"})

    report = update_json(old, src, wide_model_200, "-o", str(tmp_path / "updated.kbpack"))
    fresh = build_json(src, tmp_path / "fresh.kbpack", wide_model_200)

    # notes.txt and guide/install.md came from the old pack: no extraction, no embedding
    assert report["reused_documents"] == 2
    # logs.md: only the edited paragraph is new text; its other chunks keep their vectors
    assert 0 < report["vectors_embedded"] <= 2  # the edited chunk and new.md's
    assert fresh["vectors_embedded"] == fresh["counts"]["chunks"]
    assert report["vectors_embedded"] < fresh["vectors_embedded"]
    assert report["counts"] == fresh["counts"]

    code, d = diff_code(tmp_path / "updated.kbpack", tmp_path / "fresh.kbpack")
    assert code == 0, d["differences"]
    code, d = diff_code(old, tmp_path / "updated.kbpack")
    assert code == 1
    assert d["documents"]["added"] == ["guide/new.md"]
    assert d["documents"]["removed"] == ["db.md"]
    assert d["documents"]["changed"] == ["logs.md"]
    assert first["counts"]["documents_failed"] == report["counts"]["documents_failed"] == 1


def test_update_with_nothing_changed_embeds_nothing_and_replaces_in_place(
    built: tuple[Path, Path, dict], tmp_path: Path, wide_model_200: Path
) -> None:
    src, old, first = built
    keep = shutil.copy(old, tmp_path / "before.kbpack")
    report = update_json(old, src, wide_model_200)  # no -o: PACK itself is replaced, atomically
    assert report["path"] == str(old)
    assert report["vectors_embedded"] == 0
    assert report["reused_documents"] == first["counts"]["documents_ok"] == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["before.kbpack", "old.kbpack", "src"]
    code, d = diff_code(Path(keep), old)
    assert code == 0, d["differences"]


def test_update_with_another_model_reuses_nothing(
    built: tuple[Path, Path, dict], tmp_path: Path, tiny_model_b: Path
) -> None:
    src, old, _ = built
    out = tmp_path / "b.kbpack"
    report = update_json(old, src, tiny_model_b, "-o", str(out))
    assert report["reused_documents"] == 0
    assert report["vectors_embedded"] == report["counts"]["chunks"]
    with PackReader(out) as r:
        assert r.model is not None and r.model[F.M_NAME] == "tiny-b"
        assert max(r.column(F.CHUNK_TOKENS)) <= 24  # tiny-b's window: re-chunked for it
    fresh = build_json(src, tmp_path / "fresh-b.kbpack", tiny_model_b)
    assert fresh["counts"] == report["counts"]
    assert diff_code(out, tmp_path / "fresh-b.kbpack")[0] == 0


def test_a_newer_extractor_makes_documents_extracted_again(
    built: tuple[Path, Path, dict],
    tmp_path: Path,
    wide_model_200: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The old pack's md documents were extracted by md v1; pretend this kbpack has md v2."""
    from kbpack.extract.common import EXTRACTOR_VERSIONS

    src, old, _ = built
    monkeypatch.setitem(EXTRACTOR_VERSIONS, "md", EXTRACTOR_VERSIONS["md"] + 1)
    report = update_json(old, src, wide_model_200, "-o", str(tmp_path / "new.kbpack"))
    assert report["reused_documents"] == 1  # notes.txt only: txt is still v1


def test_update_of_a_bm25_only_pack(tmp_path: Path) -> None:
    src = write_corpus(tmp_path / "src", CORPUS)
    pack = tmp_path / "lex.kbpack"
    code, _, err = run("build", str(src), "-o", str(pack), "--no-vectors", "-q")
    assert code == 0, err
    (src / "notes.txt").write_text("Deploy to EU-WEST-2 now.\n")
    code, out, err = run("update", str(pack), str(src), "--no-vectors", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["reused_documents"] == 3 and report["model"] is None
    fresh = tmp_path / "fresh.kbpack"
    assert run("build", str(src), "-o", str(fresh), "--no-vectors", "-q")[0] == 0
    assert diff_code(pack, fresh)[0] == 0


def test_update_of_a_missing_pack_fails_in_one_line(tmp_path: Path, wide_model_200: Path) -> None:
    src = write_corpus(tmp_path / "src", {"a.md": "# A\n\ntext\n"})
    code, out, err = run(
        "update", str(tmp_path / "nope.kbpack"), str(src), "--model", str(wide_model_200)
    )
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [
        f"kbpack: error: {tmp_path / 'nope.kbpack'}: no such file; check the path"
    ]


def test_without_model_update_keeps_the_packs_model_or_refuses(
    tmp_path: Path, tiny_model: Path
) -> None:
    """Never a silent re-embedding with the default model: a pack that carries its model
    keeps it (and keeps carrying it); one that does not must be told which model to use."""
    src = write_corpus(tmp_path / "src", {"a.md": "# A\n\nThe pack is offline.\n"})
    carrying, bare = tmp_path / "carry.kbpack", tmp_path / "bare.kbpack"
    common = ["--model", str(tiny_model), "--threads", "1", "-q"]
    assert run("build", str(src), "-o", str(carrying), *common, "--embed-model")[0] == 0
    assert run("build", str(src), "-o", str(bare), *common)[0] == 0

    code, out, err = run("update", str(carrying), str(src), "--threads", "1", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["reused_documents"] == 1 and report["vectors_embedded"] == 0
    with PackReader(carrying) as r:
        assert r.has_embedded_model and r.model is not None and r.model[F.M_NAME] == "tiny-a"

    code, out, err = run("update", str(bare), str(src), "--threads", "1")
    assert code == 2 and out == ""
    assert "built with model tiny-a" in err and "pass --model FILE.gguf" in err
