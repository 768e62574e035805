"""kbpack diff: what changed between two packs, and an exit code scripts can trust."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from cli_run import run
from packs import SAMPLE, failed_doc, markdown_doc, write_pack

from kbpack.ops.diff import diff_packs
from kbpack.pack import format as F
from kbpack.pack.read import PackReader

CORPUS = {
    "logs.md": "# Rotating logs\n\nLogs grow without bound unless rotated.\n\n## Limits\n\n"
    "Set max_bytes to 10485760 in the handler.\n",
    "db.md": "# Database\n\n## Threads\n\nShare one connection between threads and lock it.\n",
    "notes.txt": "Deploy to EU-WEST-1 first.\n\nUse %z in strftime for the UTC offset.\n",
}


def build(src: Path, out: Path, model: Path) -> Path:
    code, _, err = run(
        "build", str(src), "-o", str(out), "--model", str(model), "--threads", "1", "-q"
    )
    assert code == 0, err
    return out


def write_corpus(root: Path, docs: dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in docs.items():
        (root / name).write_text(text)
    return root


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory, wide_model_200: Path) -> tuple[Path, Path]:
    """(source folder, pack built from it with wide_model_200)."""
    tmp = tmp_path_factory.mktemp("diff")
    src = write_corpus(tmp / "src", CORPUS)
    return src, build(src, tmp / "base.kbpack", wide_model_200)


def test_a_pack_has_the_same_content_as_itself(base: tuple[Path, Path]) -> None:
    _, pack = base
    code, out, _ = run("diff", str(pack), str(pack), "--json")
    assert code == 0
    d = json.loads(out)
    assert d["same_content"] is True and d["differences"] == []
    assert d["documents"] == {"added": [], "removed": [], "changed": [], "unchanged": 3}
    assert d["vectors"]["compared"] == d["new"]["counts"]["chunks"] > 0
    code, out, _ = run("diff", str(pack), str(pack))
    assert code == 0 and out.rstrip().endswith("same content")


def test_two_builds_from_different_folders_are_the_same_content(
    base: tuple[Path, Path], tmp_path: Path, wide_model_200: Path
) -> None:
    """Build times and source paths as typed differ between builds; the content does not."""
    src, pack = base
    other = shutil.copytree(src, tmp_path / "elsewhere")
    again = build(other, tmp_path / "again.kbpack", wide_model_200)
    with PackReader(pack) as a, PackReader(again) as b:
        assert a.strings(F.DOC_SOURCE_PATH) != b.strings(F.DOC_SOURCE_PATH)
    code, out, _ = run("diff", str(pack), str(again), "--json")
    assert code == 0, out
    assert json.loads(out)["vectors"]["max_distance"] < 1e-3


def test_edited_added_and_removed_documents(
    base: tuple[Path, Path], tmp_path: Path, wide_model_200: Path
) -> None:
    _, pack = base
    changed = dict(CORPUS)
    changed["logs.md"] = CORPUS["logs.md"].replace(
        "Logs grow without bound unless rotated.", "Rotate logs daily at midnight."
    )
    del changed["db.md"]
    changed["new.md"] = "# New\n\nA brand new document about backups.\n"
    new_src = write_corpus(tmp_path / "src", changed)
    new = build(new_src, tmp_path / "new.kbpack", wide_model_200)

    code, out, _ = run("diff", str(pack), str(new), "--json")
    assert code == 1
    d = json.loads(out)
    assert d["documents"]["added"] == ["new.md"]
    assert d["documents"]["removed"] == ["db.md"]
    assert d["documents"]["changed"] == ["logs.md"]
    assert d["documents"]["unchanged"] == 1  # notes.txt
    (change,) = d["changes"]
    assert {"source", "text"} <= set(change["what"])
    assert change["old"]["source_sha256"] != change["new"]["source_sha256"]
    added, removed = " ".join(change["chunks_added"]), " ".join(change["chunks_removed"])
    assert "midnight" in added and "midnight" not in removed
    assert "unless rotated" in removed and "unless rotated" not in added
    # chunks present in both versions are neither added nor removed
    assert not any("10485760" in c for c in change["chunks_added"] + change["chunks_removed"])
    assert d["model"]["changed"] is False
    assert "documents" not in d["counts"]  # only counts that differ are listed: 3 and 3

    code, out, _ = run("diff", str(pack), str(new))
    assert code == 1
    lines = out.splitlines()
    assert "  + new.md" in lines and "  - db.md" in lines
    assert any(line.startswith("  ~ logs.md: source, text") for line in lines)
    assert lines[-1].startswith("differ: 1 documents added; 1 documents removed")


def test_model_change_is_a_difference(
    base: tuple[Path, Path], tmp_path: Path, tiny_model_b: Path
) -> None:
    src, pack = base
    other = build(src, tmp_path / "b.kbpack", tiny_model_b)
    code, out, _ = run("diff", str(pack), str(other), "--json")
    assert code == 1
    d = json.loads(out)
    assert d["model"]["changed"] is True
    assert d["model"]["old"]["name"] == "tiny-wide" and d["model"]["new"]["name"] == "tiny-b"
    assert d["model"]["old"]["sha256"] != d["model"]["new"]["sha256"]
    assert any(line.startswith("model tiny-wide") for line in d["differences"])
    assert d["vectors"] == {}  # vectors of two models are never compared
    assert d["documents"]["added"] == d["documents"]["removed"] == []


def test_vectors_that_differ_under_the_same_model_stamp_are_a_difference(tmp_path: Path) -> None:
    """Same documents and chunks, same model stamp, other vectors: not the same content."""
    docs = [markdown_doc("a.md", SAMPLE)]
    write_pack(tmp_path / "one.kbpack", docs, dims=8, seed=0)
    write_pack(tmp_path / "two.kbpack", docs, dims=8, seed=1)
    d = diff_packs(tmp_path / "one.kbpack", tmp_path / "two.kbpack")
    assert d.added == d.removed == [] and d.changed == []
    assert not d.same_content
    assert d.vectors["max_distance"] > 0.1
    assert "vectors of the same chunks differ" in d.differences[0]


def test_a_document_that_now_fails_is_changed(tmp_path: Path) -> None:
    write_pack(tmp_path / "ok.kbpack", [markdown_doc("a.md", SAMPLE)])
    write_pack(tmp_path / "bad.kbpack", [failed_doc("a.md", "cannot parse")])
    d = diff_packs(tmp_path / "ok.kbpack", tmp_path / "bad.kbpack")
    (change,) = d.changed
    assert "status" in change["what"] and change["new"]["status"] == "failed"
    assert change["chunks_added"] == [] and len(change["chunks_removed"]) == change["old"]["chunks"]


def test_diff_of_a_missing_pack_is_one_line(tmp_path: Path, base: tuple[Path, Path]) -> None:
    _, pack = base
    code, out, err = run("diff", str(pack), str(tmp_path / "nope.kbpack"))
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [
        f"kbpack: error: {tmp_path / 'nope.kbpack'}: no such file; check the path"
    ]
