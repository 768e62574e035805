"""kbpack migrate: format steps, re-embedding from stored text, only stale work, staleness."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from cli_run import run
from click.testing import CliRunner
from tiny_gguf import build_tiny_gguf

import kbpack
from kbpack.cli.main import cli
from kbpack.errors import NewerFormatError, PackError
from kbpack.ops.migrate import STEPS, plan_format_steps, staleness
from kbpack.pack import format as F
from kbpack.pack.manifest import encode_header, hash_hdf5_bytes, read_header, write_header
from kbpack.pack.read import PackReader
from kbpack.verify.pipeline import verify_pack
from tests.paths import REPO_ROOT

GOLDEN = sorted((REPO_ROOT / "fixtures" / "golden").glob("v*.kbpack"))

CORPUS = {
    "pack.md": "# The pack\n\nThe pack is offline.\n\n## Search\n\nSearch the text file.\n\n"
    "## Vector\n\nThe vector is not the model.\n",
    "model.md": "# Model\n\nThe model is a file.\n\n## Offline\n\nThe offline model is not text.\n",
    "broken.pdf": "not a pdf",
}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def pack_a(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Path:
    """A pack of CORPUS built with tiny_model (treated as read-only by every test)."""
    tmp = tmp_path_factory.mktemp("migrate")
    for name, text in CORPUS.items():
        (tmp / "src").mkdir(exist_ok=True)
        (tmp / "src" / name).write_text(text)
    out = tmp / "a.kbpack"
    args = ["build", str(tmp / "src"), "-o", str(out), "--model", str(tiny_model)]
    code, _, err = run(*args, "--threads", "1", "-q")
    assert code == 0, err
    return out


def migrate_json(*args: str) -> dict:
    code, out, err = run("migrate", *args, "--threads", "1", "--json")
    assert code == 0, err
    return json.loads(out)


# -- re-embedding with another model ---------------------------------------------------------


def test_migrate_to_another_model_then_query_uses_it(
    pack_a: Path, tmp_path: Path, tiny_model: Path, tiny_model_b: Path
) -> None:
    before = sha256(pack_a)
    out = tmp_path / "b.kbpack"
    report = migrate_json(str(pack_a), "-o", str(out), "--model", str(tiny_model_b))
    assert sha256(pack_a) == before  # the source is only read
    assert report["model"]["changed"] is True
    assert report["model"]["to"]["sha256"] == sha256(tiny_model_b)
    # tiny-b reads 24 tokens, tiny-a 16: every document is chunked again to fit the new window
    assert report["documents"]["rechunked"] == 2 and report["documents"]["kept"] == 0
    assert report["vectors_embedded"] == report["chunks"]["to_embed"] == report["counts"]["chunks"]
    assert report["verified"] == "kbpack verify: intact"
    with PackReader(out) as r:
        assert r.model is not None and r.model[F.M_SHA256] == sha256(tiny_model_b)
        assert r.vectors().shape[1] == 48
        assert 0 < max(r.column(F.CHUNK_TOKENS)) <= 24
        assert r.counts["documents_failed"] == 1  # the failed document is carried over
    with kbpack.open(str(out), model=tiny_model_b) as pack:
        response = pack.search("offline model", k=3)
        assert not response.lexical_only and response.results
    with kbpack.open(str(out), model=tiny_model) as pack:  # the old model is refused
        assert pack.search("offline model", k=3).lexical_only


def test_a_pack_carrying_its_model_carries_the_new_one(
    pack_a: Path, tmp_path: Path, tiny_model: Path, tiny_model_b: Path
) -> None:
    src = pack_a.parent / "src"
    carrying = tmp_path / "carry.kbpack"
    args = ["build", str(src), "-o", str(carrying), "--model", str(tiny_model), "--embed-model"]
    assert run(*args, "--threads", "1", "-q")[0] == 0
    copy = tmp_path / "copy.kbpack"
    assert migrate_json(str(carrying), "-o", str(copy))["vectors_embedded"] == 0
    out = tmp_path / "b.kbpack"
    migrate_json(str(copy), "-o", str(out), "--model", str(tiny_model_b))
    with PackReader(out) as r:
        assert r.has_embedded_model and r.counts["model_bytes"] == tiny_model_b.stat().st_size
    with kbpack.open(str(out)) as pack:  # no model given: the one inside the pack is used
        assert not pack.search("offline model", k=3).lexical_only


def test_a_bm25_only_pack_gains_vectors(pack_a: Path, tmp_path: Path, tiny_model_b: Path) -> None:
    lexical = tmp_path / "lex.kbpack"
    assert (
        run("build", str(pack_a.parent / "src"), "-o", str(lexical), "--no-vectors", "-q")[0] == 0
    )
    out = tmp_path / "dense.kbpack"
    report = migrate_json(str(lexical), "-o", str(out), "--model", str(tiny_model_b))
    assert report["model"]["from"] is None and report["documents"]["rechunked"] == 2
    with PackReader(out) as r:
        assert r.counts["vectors"] == r.counts["chunks"] > 0
        assert max(r.column(F.CHUNK_TOKENS)) <= 24


def test_migrating_twice_is_a_no_op(pack_a: Path, tmp_path: Path, tiny_model_b: Path) -> None:
    once, twice = tmp_path / "once.kbpack", tmp_path / "twice.kbpack"
    migrate_json(str(pack_a), "-o", str(once), "--model", str(tiny_model_b))
    report = migrate_json(str(once), "-o", str(twice), "--model", str(tiny_model_b))
    assert report["needs_work"] is False and report["vectors_embedded"] == 0
    assert report["documents"]["kept"] == 2
    assert sha256(once) == sha256(twice)  # nothing recomputed: the very same bytes
    report = migrate_json(str(once), "-o", str(tmp_path / "thrice.kbpack"))  # no --model
    assert report["vectors_embedded"] == 0 and report["model"]["changed"] is False


def test_same_window_and_tokenizer_keeps_the_chunks_and_re_embeds(
    pack_a: Path, tmp_path: Path
) -> None:
    """Another model with tiny-a's vocabulary and window: chunks stay, vectors are new."""
    other = build_tiny_gguf(tmp_path / "tiny-c.gguf", name="tiny-c", seed=7)
    out = tmp_path / "c.kbpack"
    report = migrate_json(str(pack_a), "-o", str(out), "--model", str(other))
    assert report["documents"]["reembedded"] == 2 and report["documents"]["rechunked"] == 0
    assert report["chunks"]["before"] == report["chunks"]["after"] == report["vectors_embedded"]
    code, d = run("diff", str(pack_a), str(out), "--json")[:2]
    d = json.loads(d)
    assert code == 1 and d["model"]["changed"] is True
    assert d["documents"]["changed"] == []  # same chunks, same tokens: only the model changed


def test_dry_run_says_how_much_work_and_writes_nothing(
    pack_a: Path, tmp_path: Path, tiny_model_b: Path
) -> None:
    out = tmp_path / "b.kbpack"
    report = migrate_json(str(pack_a), "-o", str(out), "--model", str(tiny_model_b), "--dry-run")
    assert report["dry_run"] is True and report["needs_work"] is True
    assert report["chunks"]["to_embed"] == report["chunks"]["after"] > 0
    assert not out.exists() and sorted(tmp_path.iterdir()) == []
    real = migrate_json(str(pack_a), "-o", str(out), "--model", str(tiny_model_b))
    assert real["vectors_embedded"] == report["chunks"]["to_embed"]
    code, text, _ = run("migrate", str(pack_a), "--dry-run", "--model", str(tiny_model_b))
    assert code == 0 and "dry run    nothing written" in text


def test_an_older_pipeline_is_rechunked_from_stored_text_reusing_vectors(
    pack_a: Path, tmp_path: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """This kbpack pretends to have pipeline 2: the pack's pipeline 1 chunks are stale. The
    chunks come out the same, so every vector is reused and nothing is embedded."""
    monkeypatch.setattr(F, "PIPELINE_VERSION", F.PIPELINE_VERSION + 1)
    code, _, err = run("migrate", str(pack_a), "-o", str(tmp_path / "x.kbpack"))
    assert code == 1  # re-chunking needs the pack's model, which is not the default one
    assert (
        "re-chunking or new prefixes need the pack's model" in err
        and "pass --model FILE.gguf" in err
    )
    out = tmp_path / "p2.kbpack"
    report = migrate_json(str(pack_a), "-o", str(out), "--model", str(tiny_model))
    assert report["pipeline"] == {"from": F.PIPELINE_VERSION - 1, "to": F.PIPELINE_VERSION}
    assert report["documents"]["rechunked"] == 2
    assert report["chunks"]["vectors_reused"] == report["chunks"]["after"]
    assert report["vectors_embedded"] == 0
    with PackReader(out) as r:
        assert r.root_attrs[F.R_PIPELINE_VERSION] == F.PIPELINE_VERSION


def test_an_interrupted_migrate_leaves_nothing(
    pack_a: Path, tmp_path: Path, tiny_model_b: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kbpack.model.embedder import Embedder

    def interrupted(self: Embedder, tokenized: list[list[int]]) -> None:
        raise KeyboardInterrupt

    # every embedding, query or build, reaches the model through embed_tokens
    monkeypatch.setattr(Embedder, "embed_tokens", interrupted)
    before = sha256(pack_a)
    r = CliRunner().invoke(
        cli,
        ["migrate", str(pack_a), "-o", str(tmp_path / "b.kbpack"), "--model", str(tiny_model_b)],
    )
    assert r.exit_code != 0
    assert sorted(tmp_path.iterdir()) == []  # no output, no temp file
    assert sha256(pack_a) == before


def test_migrate_refuses_to_overwrite_its_source(pack_a: Path, tmp_path: Path) -> None:
    copy = shutil.copy(pack_a, tmp_path / "a.kbpack")
    code, _, err = run("migrate", str(copy), "-o", str(copy))
    assert code == 2 and "is also an input" in err
    code, _, err = run("migrate", str(copy))
    assert code == 2 and "give -o OUT" in err


# -- format versions ---------------------------------------------------------------------------


def test_a_newer_format_is_refused_with_upgrade_kbpack(pack_a: Path, tmp_path: Path) -> None:
    newer = Path(shutil.copy(pack_a, tmp_path / "newer.kbpack"))
    header = read_header(newer)
    header.manifest.format_version = F.FORMAT_VERSION + 1
    write_header(newer, encode_header(header.manifest.to_json_bytes()))
    code, _, err = run("migrate", str(newer), "-o", str(tmp_path / "out.kbpack"))
    assert code == 1 and "Upgrade kbpack." in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out.kbpack").exists()


def test_every_older_format_has_a_step() -> None:
    assert all(v in STEPS for v in range(1, F.FORMAT_VERSION))
    assert plan_format_steps(F.FORMAT_VERSION) == []


def test_format_steps_are_planned_in_order_and_gaps_refused() -> None:
    def one(src: Path, dst: Path) -> None: ...

    def two(src: Path, dst: Path) -> None: ...

    steps = {1: one, 2: two}
    assert plan_format_steps(1, current=3, steps=steps) == [(1, one), (2, two)]
    assert plan_format_steps(2, current=3, steps=steps) == [(2, two)]
    with pytest.raises(PackError, match="no migration step from format 3 to 4"):
        plan_format_steps(1, current=4, steps=steps)
    with pytest.raises(NewerFormatError, match=r"format 5 is newer .* Upgrade kbpack\."):
        plan_format_steps(5, current=4, steps=steps)


def _stamp_format(src: Path, dst: Path, version: int) -> None:
    """A format step as a future version would write one: copy, change what the new format
    changes (here only the version stamps), re-digest what changed."""
    import h5py

    from kbpack.pack.digest import attrs_digest

    shutil.copyfile(src, dst)
    with h5py.File(dst, "r+", locking=False) as h:
        h.attrs[F.R_FORMAT_VERSION] = version
        h.attrs[F.A_VERSION] = version
        root = {k: (v.item() if hasattr(v, "item") else v) for k, v in h.attrs.items()}
    manifest = read_header(src).manifest
    manifest.format_version = version
    manifest.elements["/@attrs"] = attrs_digest(root)
    manifest.file_size, manifest.hdf5_sha256 = hash_hdf5_bytes(dst)
    write_header(dst, encode_header(manifest.to_json_bytes()))


def test_a_registered_step_upgrades_an_old_pack_end_to_end(
    pack_a: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pretend this kbpack writes the next format and registers its step: a current pack goes
    through the step, comes out stamped with the next version, verified, content unchanged."""
    now, nxt = F.FORMAT_VERSION, F.FORMAT_VERSION + 1
    ran: list[tuple[Path, Path]] = []

    def step_to_next(src: Path, dst: Path) -> None:
        ran.append((src, dst))
        _stamp_format(src, dst, nxt)

    monkeypatch.setattr(F, "FORMAT_VERSION", nxt)
    monkeypatch.setitem(STEPS, now, step_to_next)
    out = tmp_path / "next.kbpack"
    report = migrate_json(str(pack_a), "-o", str(out))
    assert len(ran) == 1 and ran[0][0] == pack_a
    assert report["format"] == {"from": now, "to": nxt, "steps": [f"format {now} -> {nxt}"]}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["next.kbpack"]  # step's temp removed
    assert read_header(out).manifest.format_version == nxt
    assert verify_pack(out).intact
    code, d = run("diff", str(pack_a), str(out), "--json")[:2]
    assert code == 1 and json.loads(d)["differences"] == [f"format version {now} -> {nxt}"]
    assert json.loads(d)["documents"] == {"added": [], "removed": [], "changed": [], "unchanged": 3}


@pytest.mark.parametrize("golden", GOLDEN, ids=lambda p: p.name)
def test_every_golden_pack_migrates_to_current_and_verifies(golden: Path, tmp_path: Path) -> None:
    before = sha256(golden)
    out = tmp_path / "current.kbpack"
    report = migrate_json(str(golden), "-o", str(out))
    assert report["format"]["to"] == F.FORMAT_VERSION
    assert report["verified"] == "kbpack verify: intact"
    assert verify_pack(out).intact
    assert read_header(out).manifest.format_version == F.FORMAT_VERSION
    assert sha256(golden) == before
    code, d = run("diff", str(golden), str(out), "--json")[:2]
    version = read_header(golden).manifest.format_version
    with PackReader(golden) as r:
        pipeline = r.root_attrs[F.R_PIPELINE_VERSION]
    expected = []
    if version != F.FORMAT_VERSION:
        expected.append(f"format version {version} -> {F.FORMAT_VERSION}")
    if pipeline != F.PIPELINE_VERSION:
        expected.append(f"pipeline version {pipeline} -> {F.PIPELINE_VERSION}")
    docs = json.loads(d)["documents"]
    changed = docs["changed"]
    assert code == (1 if expected or changed else 0)
    # the versions are the only difference besides chunks: no document added or removed; one
    # is changed only where a newer pipeline chunks it otherwise, and then as a build today does
    assert (
        json.loads(d)["differences"]
        == ([f"{len(changed)} documents changed"] if changed else []) + expected
    )
    assert not docs["added"] and not docs["removed"]
    assert not changed or pipeline != F.PIPELINE_VERSION
    with (
        PackReader(out) as now,
        PackReader(REPO_ROOT / "fixtures" / "golden" / "v2.kbpack") as built,
    ):
        for name in changed:
            text, spans = chunk_spans(now, name)
            built_text, built_spans = chunk_spans(built, name)
            assert spans == built_spans or text != built_text  # v1's PDF text was pypdf's


def chunk_spans(r: PackReader, name: str) -> tuple[str, list[tuple[int, int]]]:
    """A document's canonical text and its chunks' (from, to), by name."""
    d = r.strings(F.DOC_NAME).index(name)
    docs, starts, ends = (r.column(p) for p in (F.CHUNK_DOCUMENT, F.CHUNK_FROM, F.CHUNK_TO))
    return r.text(d), [
        (int(a), int(b)) for k, a, b in zip(docs, starts, ends, strict=True) if k == d
    ]


# -- staleness (for inspect) -------------------------------------------------------------------


def test_staleness_names_documents_and_the_command_that_fixes_them(
    pack_a: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kbpack.extract.common import EXTRACTOR_VERSIONS

    with PackReader(pack_a) as r:
        model_sha = r.model[F.M_SHA256] if r.model else None
        assert staleness(r, default_sha=model_sha) == []
        monkeypatch.setitem(EXTRACTOR_VERSIONS, "md", EXTRACTOR_VERSIONS["md"] + 1)
        monkeypatch.setattr(F, "PIPELINE_VERSION", F.PIPELINE_VERSION + 1)
        found = {e["stale"]: e for e in staleness(r, default_sha="f" * 64)}
    assert set(found) == {"extractor", "pipeline", "model"}
    assert found["extractor"]["documents"] == ["model.md", "pack.md"]
    assert found["extractor"]["fix"].startswith("kbpack update ")
    assert found["pipeline"]["documents"] == ["model.md", "pack.md"]  # not the failed one
    assert found["pipeline"]["fix"] == f"kbpack migrate {pack_a} -o NEW.kbpack"
    assert "not the default model" in found["model"]["detail"]
    assert found["model"]["fix"].endswith("--model FILE.gguf")


def test_the_refusal_threshold_stays_with_its_model(
    pack_a: Path,
    tmp_path: Path,
    tiny_model: Path,
    tiny_model_b: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kbpack.pack.rewrite import rewrite_search_settings

    calibrated = tmp_path / "calibrated.kbpack"
    rewrite_search_settings(pack_a, calibrated, 0.4, {"threshold": 0.4, "rule": "test"})

    def threshold(path: Path) -> dict:
        with PackReader(path) as r:
            return r.search_defaults

    copy = tmp_path / "copy.kbpack"
    migrate_json(str(calibrated), "-o", str(copy))
    assert threshold(copy) == threshold(calibrated)
    other = tmp_path / "other.kbpack"
    report = migrate_json(str(calibrated), "-o", str(other), "--model", str(tiny_model_b))
    assert threshold(other) == {"max_distance": F.DEFAULT_MAX_DISTANCE}
    assert any("run kbpack calibrate" in n for n in report["notes"])
    monkeypatch.setattr(F, "PIPELINE_VERSION", F.PIPELINE_VERSION + 1)
    rechunked = tmp_path / "rechunked.kbpack"
    report = migrate_json(str(calibrated), "-o", str(rechunked), "--model", str(tiny_model))
    assert report["documents"]["rechunked"] == 2
    assert threshold(rechunked) == threshold(calibrated)  # same model: still calibrated
