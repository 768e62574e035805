"""Builds on a Dask LocalCluster (2 worker processes) equal the one-process build."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scale_corpus import PART_A, PART_B, assert_same_content, build_pack, write_folder

from kbpack.ops.build import BuildOptions
from kbpack.pack.read import PackReader

pytest.importorskip("distributed")

from kbpack.ops.cluster import cluster_build

# more documents than one batch (8), so that two workers share the work
FILES = {
    **PART_A,
    **PART_B,
    **{
        f"more/note-{i:02d}.md": f"# Note {i}\n\nThe handler {i} rotates logs daily.\n"
        for i in range(12)
    },
    # a section long enough (~330 characters, under the 400-token window) for sentence pieces
    "long.md": "# Retention\n\n"
    + " ".join(
        f"Old log file {i} is deleted after {i + 3} days unless the handler keeps it longer."
        for i in range(4)
    )
    + "\n",
}


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(sources, model, the one-process build)."""
    from tiny_gguf import build_tiny_gguf

    root = tmp_path_factory.mktemp("cluster")
    # positions 512, window 400: chunks long enough to have sentence pieces (a context of
    # 400 tokens aborted llama.cpp before kbpack rounded it to 512: kbpack/model/embedder.py)
    model = build_tiny_gguf(root / "wide.gguf", name="wide", positions=512, window=400)
    src = write_folder(root / "src", FILES)
    return src, model, build_pack(src, root / "single.kbpack", model)


def cluster_pack(src: Path, model: Path, out: Path, pieces: bool = False) -> Path:
    opts = BuildOptions(sources=[src], out=out, model=model, threads=1, pieces=pieces)
    report = cluster_build(opts, workers=2)
    assert report.path == out
    return out


def assert_equal_build(got: Path, want: Path) -> None:
    """Every dataset equal; vectors to cosine > 0.999 (llama.cpp's result for a text moves in
    its last bits with the other texts of its batch, and the batches differ)."""
    assert_same_content(got, want, skip=("/vectors/data", "/pieces/data"))
    with PackReader(got) as a, PackReader(want) as b:
        pairs = [(a.vectors(), b.vectors())]
        if b.has_pieces:
            pairs.append((a.piece_vectors(), b.piece_vectors()))
    for va, vb in pairs:
        assert va.shape == vb.shape and len(va) > 0
        assert float(np.min(np.sum(va * vb, axis=1))) > 0.999


def test_local_cluster_build_equals_the_single_build(
    setup: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    src, model, single = setup
    assert_equal_build(cluster_pack(src, model, tmp_path / "cluster.kbpack"), single)


def test_local_cluster_build_with_pieces(setup: tuple[Path, Path, Path], tmp_path: Path) -> None:
    src, model, _ = setup
    single = build_pack(src, tmp_path / "single.kbpack", model, pieces=True)
    got = cluster_pack(src, model, tmp_path / "cluster.kbpack", pieces=True)
    with PackReader(got) as r:
        assert r.has_pieces and r.counts["pieces"] > 0
    assert_equal_build(got, single)


def test_a_worker_killed_mid_build_still_gives_the_whole_pack(
    setup: tuple[Path, Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src, model, single = setup
    monkeypatch.setenv("KBPACK_TEST_KILL_ONCE", "more/note-05.md")
    monkeypatch.setenv("KBPACK_TEST_KILL_MARKERS", str(tmp_path))
    out = cluster_pack(src, model, tmp_path / "killed.kbpack")
    assert list(tmp_path.glob("killed-*"))  # the hook did kill a worker
    assert_equal_build(out, single)


def test_a_document_that_kills_workers_twice_is_recorded_as_failed(
    setup: tuple[Path, Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src, model, _ = setup
    monkeypatch.setenv("KBPACK_TEST_KILL_ALWAYS", "gamma.md")
    opts = BuildOptions(sources=[src], out=tmp_path / "x.kbpack", model=model, threads=1)
    report = cluster_build(opts, workers=2)
    assert [f["name"] for f in report.failed if f["stage"] == "crash"] == ["gamma.md"]
    with PackReader(report.path) as r:
        names = r.strings("/documents/name")
        status = r.strings("/documents/status")
        assert status[names.index("gamma.md")] == "failed"
        assert sum(s == "ok" for s in status) == len(FILES) - 2  # gamma.md and broken.pdf


def test_a_local_cluster_whose_nannies_gave_up_is_scaled_back_instead_of_waited_on(
    tmp_path: Path,
) -> None:
    """A nanny does not restart a worker that dies while starting (a loaded machine and a
    document that kills workers): the build then waited forever for a result. Here both nannies
    are closed, as if they had given up; the result still comes, from a new worker."""
    import os

    import dask
    from distributed import Client, LocalCluster

    from kbpack.ops.cluster import _Results

    # the scheduler forgets a lost worker after this; 1 s instead of 15 keeps the test short
    with dask.config.set({"distributed.deploy.lost-worker-timeout": "1s"}):
        cluster = LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        )
        try:
            with Client(cluster) as client:
                for nanny in list(cluster.workers.values()):
                    client.sync(nanny.close)
                opts = BuildOptions(sources=[tmp_path], out=tmp_path / "x.kbpack", vectors=False)
                results = _Results(client, [], opts, workers=2, local=cluster)
                pid = results._result(client.submit(os.getpid, pure=False))
                assert pid != os.getpid() and client.scheduler_info()["workers"]
        finally:
            cluster.close()
