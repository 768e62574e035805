"""diff shows the change (a word diff with context, no internal counters); update's summary
counts agree with each other (issue 33)."""

from __future__ import annotations

import json
from pathlib import Path

from cli_run import run
from test_update import CORPUS, build_json, update_json, write_corpus

from kbpack.pack import format as F
from kbpack.pack.read import PackReader
from kbpack.text.worddiff import word_diff

FILLER = " ".join(f"filler{i}" for i in range(60))


def test_word_diff_marks_only_the_changed_words_with_context() -> None:
    old = f"# Guide\n\n{FILLER} The quick brown fox jumps over the lazy dog. {FILLER}\n"
    new = old.replace("quick brown fox jumps", "slow red fox walks")
    (p,) = word_diff(old, new)
    assert p.text == (
        "filler53 filler54 filler55 filler56 filler57 filler58 filler59 The [-quick brown-]{+slow red+} "
        "fox [-jumps-]{+walks+} over the lazy dog. filler0 filler1 filler2 filler3"
    )
    assert new[p.start : p.end].startswith("filler53") and new[p.end - 7 : p.end] == "filler3"
    assert new[p.at :].startswith("slow red") and old[p.old_start :].startswith("quick brown")
    assert word_diff(old, old) == []
    assert word_diff(old, old.replace("\n\n", "\n")) == []  # whitespace alone is no change


def test_word_diff_keeps_far_apart_changes_in_separate_passages() -> None:
    old = f"alpha {FILLER} omega"
    new = f"ALPHA {FILLER} omega!"
    first, second = word_diff(old, new)
    assert first.text.startswith("[-alpha-]{+ALPHA+} filler0")
    assert second.text.endswith("filler59 [-omega-]{+omega!+}")
    assert [p.text for p in word_diff("", "x y")] == ["{+x y+}"]
    assert [p.text for p in word_diff("x y", "")] == ["[-x y-]"]


def test_diff_shows_the_edited_paragraph_and_no_internal_counters(
    tmp_path: Path, wide_model_200: Path
) -> None:
    long = "# Rotating logs\n\n" + FILLER + " Logs grow without bound unless rotated.\n\n"
    src = write_corpus(tmp_path / "a", {**CORPUS, "logs.md": long + "## Limits\n\nSet it.\n"})
    build_json(src, tmp_path / "old.kbpack", wide_model_200)
    (src / "logs.md").write_text(
        (src / "logs.md").read_text().replace("unless rotated", "unless rotated daily")
    )
    (src / "more.md").write_text("# More\n\nA new page about tape backups and restores.\n")
    build_json(src, tmp_path / "new.kbpack", wide_model_200)

    code, out, _ = run("diff", str(tmp_path / "old.kbpack"), str(tmp_path / "new.kbpack"))
    assert code == 1
    lines = out.splitlines()
    at = lines.index(next(x for x in lines if x.startswith("  ~ logs.md:")))
    assert lines[at + 1] == "      @@ Rotating logs @@"
    assert "unless [-rotated.-]{+rotated daily.+}" in lines[at + 2]
    assert "filler59 Logs grow without bound" in lines[at + 2]
    for internal in ("terms_plus_one", "terms_bytes", "postings", "model_bytes", "dense_"):
        assert internal not in out
    assert any(x.startswith("terms ") for x in lines)  # the vocabulary grew: a user count

    code, out, _ = run("diff", str(tmp_path / "old.kbpack"), str(tmp_path / "new.kbpack"), "--json")
    d = json.loads(out)
    assert list(d) == [
        "schema",
        "command",
        "same_content",
        "differences",
        "old",
        "new",
        "documents",
        "changes",
        "model",
        "pipeline",
        "format",
        "extractors",
        "counts",
        "size",
        "vectors",
    ]
    (change,) = d["changes"]
    assert list(change) == ["name", "what", "old", "new", "chunks_added", "chunks_removed"]
    assert "terms_bytes" in d["counts"]  # --json keeps every count


def chunks(pack: Path) -> list[tuple[str, int]]:
    """(content, tokens) of every chunk."""
    with PackReader(pack) as r:
        rows = zip(
            r.column(F.CHUNK_DOCUMENT),
            r.column(F.CHUNK_FROM),
            r.column(F.CHUNK_TO),
            r.column(F.CHUNK_TOKENS),
            strict=True,
        )
        return [(r.text(int(d))[int(a) : int(b)], int(t)) for d, a, b, t in rows]


def new_chunk_tokens(old: Path, new: Path) -> list[int]:
    """Tokens of the chunks of ``new`` whose text ``old`` does not have: what must be embedded."""
    before = {text for text, _ in chunks(old)}
    return [t for text, t in chunks(new) if text not in before]


def test_update_counts_agree(tmp_path: Path, wide_model_200: Path) -> None:
    src = write_corpus(tmp_path / "src", CORPUS)
    old = tmp_path / "old.kbpack"
    build_json(src, old, wide_model_200)
    logs = src / "logs.md"
    logs.write_text(logs.read_text().replace("unless rotated", "unless rotated daily"))
    new = tmp_path / "new.kbpack"
    report = update_json(old, src, wide_model_200, "-o", str(new))
    # the tokens reported are those of the chunk texts the model read, no more
    fresh = new_chunk_tokens(old, new)
    assert report["vectors_embedded"] == len(fresh) == 1
    assert report["tokens_embedded"] == sum(fresh)

    logs.write_text(logs.read_text().replace("daily", "weekly"))
    code, out, err = run(
        "update", str(new), str(src), "--model", str(wide_model_200), "--threads", "1", "-o",
        str(tmp_path / "third.kbpack"),
    )  # fmt: skip
    assert code == 0, err
    rows = {line.split()[0]: line for line in out.splitlines() if line and line[0] != " "}
    assert "unchanged documents; 1 chunk embedded" in rows["reused"]
    assert int(rows["tokens"].split()[1]) == sum(new_chunk_tokens(new, tmp_path / "third.kbpack"))
