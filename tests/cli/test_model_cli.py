"""``kbpack model info|import|embed`` through the real entry point: output and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kbpack.cli.main import main
from kbpack.model import identify_gguf
from kbpack.model.embedder import Embedder


def run(capfd: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run the CLI in-process; capfd also catches what C code writes to fds 1 and 2."""
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    out, err = capfd.readouterr()
    return int(exit_info.value.code or 0), out, err


def test_info_json_is_the_identity(capfd: pytest.CaptureFixture[str], tiny_model: Path) -> None:
    code, out, err = run(capfd, "model", "info", str(tiny_model), "--json")
    assert (code, err) == (0, "")
    record = json.loads(out)
    assert record == {
        "schema": 1,
        "command": "model info",
        "path": str(tiny_model),
        "size": tiny_model.stat().st_size,
        **identify_gguf(tiny_model).as_dict(),
        "role": "embedding",
        "family": None,  # tiny-a is no known family: no prefixes by default
        "query_prefix": "",
        "doc_prefix": "",
    }


def test_info_text_lists_every_field(capfd: pytest.CaptureFixture[str], tiny_model: Path) -> None:
    code, out, _ = run(capfd, "model", "info", str(tiny_model))
    assert code == 0
    fields = dict(line.split(None, 1) for line in out.splitlines())
    assert fields["dims"] == "32" and fields["window"] == "16" and fields["pooling"] == "mean"
    assert fields["sha256"] == identify_gguf(tiny_model).sha256


def test_info_on_a_non_gguf_is_one_line_exit_1(
    capfd: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bogus = tmp_path / "x.gguf"
    bogus.write_bytes(b"PK\x03\x04 a zip, not a model")
    code, out, err = run(capfd, "model", "info", str(bogus))
    assert (code, out) == (1, "")
    assert (
        err
        == f"kbpack: error: {bogus}: not a GGUF model file (starts with b'PK\\x03\\x04', not b'GGUF')\n"
    )


def test_import_converts_and_refuses_to_overwrite(
    capfd: pytest.CaptureFixture[str], tiny_model: Path, tmp_path: Path
) -> None:
    src = tiny_model.with_name(tiny_model.stem + "-src")
    out_file = tmp_path / "imported.gguf"
    code, out, err = run(capfd, "model", "import", str(src), "-o", str(out_file), "--json")
    assert (code, err) == (0, "")
    assert json.loads(out)["sha256"] == identify_gguf(out_file).sha256
    assert json.loads(out)["name"] == src.name  # default name: the folder's
    same_weights = [Embedder(m).embed(["the pack"]) for m in (out_file, tiny_model)]
    np.testing.assert_allclose(*same_weights, atol=1e-6)
    code, out, err = run(capfd, "model", "import", str(src), "-o", str(out_file))
    assert code == 2
    assert err == (
        f"kbpack: error: {out_file}: already exists; choose another -o, or pass --force to replace it\n"
    )
    code, _, _ = run(capfd, "model", "import", str(src), "-o", str(out_file), "--force")
    assert code == 0


def test_embed_json_gives_the_embedder_vectors(
    capfd: pytest.CaptureFixture[str], tiny_model: Path
) -> None:
    texts = ["the pack", "", "a " * 30]
    code, out, err = run(capfd, "model", "embed", *texts, "--model", str(tiny_model), "--json")
    assert (code, err) == (0, "")  # llama.cpp's log stays off the terminal
    doc = json.loads(out)
    assert doc["model"] == identify_gguf(tiny_model).as_dict()
    assert [it["tokens"] for it in doc["items"]] == [4, 2, 32]
    assert [it["truncated"] for it in doc["items"]] == [False, False, True]
    vectors = np.array([it["vector"] for it in doc["items"]], dtype=np.float32)
    np.testing.assert_allclose(vectors, Embedder(tiny_model).embed(texts), atol=1e-6)


def test_embed_text_output_flags_truncation(
    capfd: pytest.CaptureFixture[str], tiny_model: Path
) -> None:
    code, out, _ = run(capfd, "model", "embed", "the pack", "a " * 30, "--model", str(tiny_model))
    lines = out.splitlines()
    assert code == 0 and len(lines) == 3
    assert lines[0].startswith("model tiny-a sha256:") and lines[0].endswith("dims 32")
    assert lines[1].startswith("4 tokens  [") and "cut to" not in lines[1]
    assert lines[2].startswith("32 tokens, cut to 16  [")


def test_embed_without_text_is_a_usage_error(capfd: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capfd, "model", "embed")
    assert code == 2
    assert err == "kbpack: error: kbpack model embed: give at least one TEXT (or --stdin)\n"


def test_embed_with_a_missing_model_file(capfd: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capfd, "model", "embed", "x", "--model", str(tmp_path / "none.gguf"))
    assert code == 1
    assert (
        err
        == f"kbpack: error: {tmp_path / 'none.gguf'}: model file not found; pass an existing FILE.gguf\n"
    )


def test_embed_reads_stdin_one_text_per_line(
    capfd: pytest.CaptureFixture[str], tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO("the pack\r\nmodel vector\n"))
    code, out, _ = run(capfd, "model", "embed", "--stdin", "--json", "--model", str(tiny_model))
    assert code == 0
    assert [it["text"] for it in json.loads(out)["items"]] == ["the pack", "model vector"]
