"""``kbpack serve/mcp --exact/--probe``: a served pack with an approximate (IVF) index is searched
as ``kbpack query --exact/--probe`` searches it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from cli_run import run
from scale_corpus import PART_A, build_pack, write_folder

import kbpack
from kbpack.serve.library import Library

QUESTION = "How are old log files rotated?"


@pytest.fixture(scope="module")
def pack(tmp_path_factory: pytest.TempPathFactory, wide_model: Path) -> Path:
    root = tmp_path_factory.mktemp("serve-ivf")
    return build_pack(
        write_folder(root / "a", PART_A), root / "a.kbpack", wide_model, ivf=True, ivf_lists=4
    )


def _served(pack: Path, model: Path, **ivf: object) -> tuple[list[object], object]:
    with Library([pack], model=model, **ivf) as lib:  # type: ignore[arg-type]
        served = next(iter(lib.packs.values()))
        searcher = served.searcher
        scored = searcher.corpus.dense_scores(searcher.query_vector(QUESTION)).scored
        response = lib.search(served.name, QUESTION, k=5, mode="dense", refuse=False)
        return [(r.chunk, r.score) for r in response.results], scored


def test_served_packs_are_searched_as_query_searches_them(pack: Path, wide_model: Path) -> None:
    exact, scored = _served(pack, wide_model, exact=True)
    assert scored is None  # every vector scanned
    probed, scored = _served(pack, wide_model, probe=1)
    assert scored is not None and 0 < np.sum(scored) < np.size(scored)  # one list of four
    with kbpack.open(pack, model=wide_model) as p:
        for kw, got in (({"exact": True}, exact), ({"probe": 1}, probed)):
            want = p.search(QUESTION, k=5, mode="dense", refuse=False, **kw)  # type: ignore[arg-type]
            assert got == [(r.chunk, r.score) for r in want.results]


def test_serve_refuses_a_probe_of_zero_in_one_line() -> None:
    code, _, err = run("serve", "nothing.kbpack", "--probe", "0")
    assert code == 2 and "--probe" in err and "Traceback" not in err
