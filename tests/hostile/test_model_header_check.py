"""Issue 30, item 3: a model from a pack is checked before llama.cpp sees it.

A pack's embedded GGUF with ``bert.block_count`` set to 0 (or 0xFFFFFFFF) and its true SHA-256
stamped passed ``verify``, and ``query``, ``serve`` and ``mcp`` aborted inside llama.cpp
(``GGML_ASSERT(n_layer_all > 0)``, exit 134, ~44 lines of backtrace). Now the header's
hyperparameters are checked against the tensors they describe first: ``verify`` reports
``model-invalid``; ``query`` answers lexical-only with one note (exit 0 when results are
found: the BM25 index is intact and digest-checked, only the model is refused), and so do
``serve`` and ``mcp``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import h5py
import numpy as np
import pytest
from test_model_hash_path import kbpack
from tiny_gguf import rewrite_gguf

from kbpack.errors import ModelError
from kbpack.model.gguf_header import check_hyperparameters
from kbpack.pack import format as F
from kbpack.pack.storage import create_dataset
from kbpack.testing.fuzz.pack_mutations import element_digests, restamp


def embed(pack: Path, gguf: Path, out: Path) -> Path:
    """``pack`` with ``gguf`` as its embedded model and that model's true SHA-256 stamped,
    every digest restamped: as a hostile pack maker can for an unsigned pack."""
    out.write_bytes(pack.read_bytes())
    raw = gguf.read_bytes()
    with h5py.File(out, "r+") as h:
        attrs = dict(h[F.MODEL_GGUF].attrs.items())
        del h[F.MODEL_GGUF]
        ds = create_dataset(h, F.MODEL_GGUF, data=np.frombuffer(raw, dtype=np.uint8))
        ds.attrs.update(attrs)
        h[F.MODEL].attrs[F.M_SHA256] = hashlib.sha256(raw).hexdigest()
        digests = element_digests(h)
    restamp(out, "elements", digests)
    return out


@pytest.mark.parametrize("blocks", [0, 0xFFFFFFFF])
def test_a_crafted_block_count_is_refused_before_llama_cpp(
    tmp_path: Path, carrying: Path, tiny_model: Path, blocks: int
) -> None:
    bad = rewrite_gguf(tiny_model, tmp_path / "bad.gguf", set_uint32={"bert.block_count": blocks})
    with pytest.raises(ModelError, match=r"bert.block_count is \d+, not in 1..1024"):
        check_hyperparameters(bad)
    pack = embed(carrying, bad, tmp_path / "hostile.kbpack")
    cache = tmp_path / "cache"

    v = kbpack("verify", str(pack), cache=cache, cwd=tmp_path)
    assert v.returncode == 1 and "model-invalid" in v.stdout, v.stdout + v.stderr

    q = kbpack("query", str(pack), "--", "pump seal", cache=cache, cwd=tmp_path)
    assert q.returncode == 0, (q.returncode, q.stderr)  # lexical-only results, not an abort
    said = q.stdout + q.stderr
    assert "GGML" not in said and "Traceback" not in said
    assert f"note: {pack}: /model/gguf is refused (GGUF bert.block_count is {blocks}" in said
    assert "lexical-only" in said and "a.md#char=" in q.stdout

    from kbpack.serve.library import Library
    from kbpack.serve.mcp_tools import search_tool

    with Library([pack], verify=False) as lib:  # serve's and mcp's library, model loading on
        served = lib.get(None)
        assert served.searcher.embedder is None
        assert any("/model/gguf is refused" in n for n in served.notes)
        out = search_tool(lib, {"query": "pump seal"})
        assert {r["doc"] for r in out["results"]} == {"a.md"}


def test_the_true_model_passes(tiny_model: Path, tmp_path: Path) -> None:
    check_hyperparameters(tiny_model)
    fewer = rewrite_gguf(tiny_model, tmp_path / "fewer.gguf", set_uint32={"bert.block_count": 1})
    with pytest.raises(ModelError, match="block_count is 1, the file holds 2 blocks"):
        check_hyperparameters(fewer)


def test_a_pack_model_is_first_loaded_in_a_child(
    tmp_path: Path, carrying: Path, tiny_model: Path
) -> None:
    """A model llama.cpp cannot load, though its header passes the checks (a feed-forward
    length the tensors do not have): the load fails in the child, and the query is one note
    and lexical-only results. A good model passes once and is remembered by its hash."""
    bad = rewrite_gguf(
        tiny_model, tmp_path / "ffn.gguf", set_uint32={"bert.feed_forward_length": 48}
    )
    check_hyperparameters(bad)  # the header alone looks fine
    pack = embed(carrying, bad, tmp_path / "ffn.kbpack")
    cache = tmp_path / "cache"
    q = kbpack("query", str(pack), "--", "pump seal", cache=cache, cwd=tmp_path)
    said = q.stdout + q.stderr
    assert q.returncode == 0, said
    assert "/model/gguf is refused (llama.cpp failed on it in a child process" in said, said
    assert "Traceback" not in said and "a.md#char=" in q.stdout
    assert not (cache / "loaded-models").exists() or not any((cache / "loaded-models").iterdir())

    good = kbpack("query", str(carrying), "--", "pump seal", cache=cache, cwd=tmp_path)
    assert good.returncode == 0 and "refused" not in good.stdout + good.stderr
    with h5py.File(carrying, "r") as h:
        sha = str(h[F.MODEL].attrs[F.M_SHA256])
    assert [p.name for p in (cache / "loaded-models").iterdir()] == [sha]


def test_a_passed_check_is_remembered_per_file_state(
    tmp_path: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cold query checks its model's header once per file state, not once per process; a
    file changed in place (size or time) is checked again and refused."""
    import os
    import shutil

    from kbpack.model import gguf_header

    monkeypatch.setenv("KBPACK_CACHE_DIR", str(tmp_path / "cache"))
    model = Path(shutil.copy(tiny_model, tmp_path / "m.gguf"))
    walks: list[Path] = []
    real = gguf_header.read_gguf_tensors
    monkeypatch.setattr(gguf_header, "read_gguf_tensors", lambda p: walks.append(p) or real(p))
    check_hyperparameters(model)
    check_hyperparameters(model)
    assert walks == [model]  # the second check is the memo's
    bad = rewrite_gguf(tiny_model, tmp_path / "bad.gguf", set_uint32={"bert.block_count": 0})
    os.replace(bad, model)  # another file state at the same path
    with pytest.raises(ModelError, match="block_count"):
        check_hyperparameters(model)
