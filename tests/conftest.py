"""Shared fixtures: tiny real GGUF models built by the tests, and the default model if its
weights are installed. Every test run uses a private model cache, never the user's."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # tests/tiny_gguf.py

from tiny_gguf import build_tiny_gguf


@pytest.fixture(scope="session", autouse=True)
def private_model_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """KBPACK_CACHE_DIR -> a session temp dir, so tests neither read nor fill ~/.cache."""
    path = tmp_path_factory.mktemp("kbpack-cache")
    old = os.environ.get("KBPACK_CACHE_DIR")
    os.environ["KBPACK_CACHE_DIR"] = str(path)
    yield path
    if old is None:
        os.environ.pop("KBPACK_CACHE_DIR", None)
    else:
        os.environ["KBPACK_CACHE_DIR"] = old


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer, 32-dim random BERT GGUF (~68 KB), mean pooling, 16-token window."""
    return build_tiny_gguf(tmp_path_factory.mktemp("tiny-a") / "tiny-a.gguf", name="tiny-a")


@pytest.fixture(scope="session")
def tiny_model_b(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Another tiny model: different weights and dims (48), 24-token window: its vectors are
    not comparable with tiny_model's (for model-mismatch tests)."""
    out = tmp_path_factory.mktemp("tiny-b") / "tiny-b.gguf"
    return build_tiny_gguf(out, name="tiny-b", seed=1, hidden=48, heads=4, window=24)


@pytest.fixture(scope="session")
def wide_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tiny_model with a 256-token window, so that whole sentences and chunks fit (tiny_model's
    16 tokens split every sentence): the model of most build-and-search tests, built once."""
    out = tmp_path_factory.mktemp("tiny-wide") / "tiny-wide.gguf"
    return build_tiny_gguf(out, name="tiny-wide", window=256)


@pytest.fixture(scope="session")
def wide_model_200(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tiny_model with 256 positions and a 200-token window: chunks hold whole sentences and a
    paragraph of the model's own words fits, so chunk differences read like the edit that caused
    them (update, diff and pieces tests), built once."""
    out = tmp_path_factory.mktemp("tiny-wide-200") / "tiny-wide.gguf"
    return build_tiny_gguf(out, name="tiny-wide", positions=256, window=200)


@pytest.fixture(scope="session")
def default_model(private_model_cache: Path) -> Path:
    """The real all-MiniLM-L6-v2 GGUF (converted into the private cache), or skip."""
    from kbpack.errors import ModelError
    from kbpack.model import INSTALL_HINT, default_model_path
    from kbpack.model.cache import default_weights_dir

    try:
        default_weights_dir()
    except ModelError:
        pytest.skip(f"default model weights not installed ({INSTALL_HINT})")
    return default_model_path()  # a conversion failure here is a real failure, not a skip


@pytest.fixture(scope="module")
def carrying(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Path:
    """A pack that embeds its (tiny, real) model: ``build --embed-model``; the hostile model
    tests craft their packs from it."""
    from click.testing import CliRunner

    from kbpack.cli.main import cli

    root = tmp_path_factory.mktemp("carrying")
    src = root / "src"
    src.mkdir()
    (src / "a.md").write_text("# Pump\n\nHold the reset button to clear the pump seal alarm.\n")
    pack = root / "p.kbpack"
    args = ["build", str(src), "-o", str(pack), "--model", str(tiny_model), "--embed-model"]
    r = CliRunner().invoke(cli, [*args, "-q"])
    assert r.exit_code == 0, r.output
    return pack
