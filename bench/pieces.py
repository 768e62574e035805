"""Do sentence pieces earn their cost? Quality with vs without, paired, and what they cost.

    python bench/pieces.py [--out DIR] [--scan-chunks N]

1. Builds the development corpus (fixtures/eval/corpus) without pieces (timed), then
   ``kbpack update --pieces`` from it: every chunk vector is reused, so the update's time is
   exactly the cost of cutting and embedding the pieces. Prints vectors, pack size and build
   time of both packs, and their ratios.
2. Quality on fixtures/eval/questions.jsonl, both phrasings, dense and hybrid, on the pack
   with pieces: once scoring chunks with their pieces, once by chunk vectors alone (the same
   pack, ``bench/switches.py``'s ``variant(pieces=False)``), so only the scoring differs. Recall@1/4/8/20, MRR
   and the exact sign test on discordant pairs; then refusal at the pack's default threshold:
   out-of-domain queries answered (bluffs) and answerable questions refused.
3. The dense scan: kbpack's scoring (``kbpack.search.dense.chunk_scores``: chunk matmul, piece
   matmul, per-chunk max) against a bare numpy matmul over the same chunk + piece vectors, on
   random unit vectors with the dev pack's pieces-per-chunk ratio, median of repeats. The issue's
   target is <= 1.2x.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from switches import variant  # bench/switches.py (this script's directory is on sys.path)

import kbpack
from kbpack.ops.evaluate import load_queries, load_questions, mrr, normalize, paired, recall_at
from kbpack.pack import format as F
from kbpack.search.dense import PieceIndex, chunk_scores

ROOT = Path(__file__).resolve().parent.parent
KS = (1, 4, 8, 20)


def kbpack_json(*args: str) -> tuple[dict, float]:
    t = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "kbpack", *args, "--json", "--quiet"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out), time.perf_counter() - t


def cost(out: Path) -> tuple[Path, float]:
    plain, with_pieces = out / "dev.kbpack", out / "dev-pieces.kbpack"
    corpus = str(ROOT / "fixtures/eval/corpus")
    a, ta = kbpack_json("build", corpus, "-o", str(plain), "--force", "--no-pieces")
    b, tb = kbpack_json("update", str(plain), corpus, "-o", str(with_pieces), "--pieces")
    na, nb = a["counts"]["vectors"], b["counts"]["vectors"] + b["counts"]["pieces"]
    sa, sb = plain.stat().st_size, with_pieces.stat().st_size
    print("== cost (dev corpus, default model)")
    print(f"vectors      {na} chunks -> {nb} chunk + piece vectors   {nb / na:.2f}x")
    print(f"pack size    {sa / 1e6:.2f} MB -> {sb / 1e6:.2f} MB   {sb / sa:.2f}x")
    print(
        f"build time   {ta:.1f} s; pieces add {tb:.1f} s (update --pieces reusing every chunk "
        f"vector; {b['pieces_embedded']} pieces embedded)   {(ta + tb) / ta:.2f}x"
    )
    return with_pieces, b["counts"]["pieces"] / b["counts"]["chunks"]


def ranks_of(pack_path: Path, use_pieces: bool, mode: str) -> dict[str, list[int | None]]:
    questions = load_questions(ROOT / "fixtures/eval/questions.jsonl")
    out: dict[str, list[int | None]] = {"doc": [], "ticket": []}
    with kbpack.open(pack_path) as pack:
        s = variant(pack.searcher, pieces=use_pieces)
        contents = {i: normalize(c) for i, c in pack.iter_chunk_contents()}
        for q in questions:
            resp = s.search(q.query, k=20, mode=mode, refuse=False)
            want = normalize(q.needle)
            rank = next((r.rank for r in resp.results if want in contents[r.chunk]), None)
            out[q.phrasing or "doc"].append(rank)
    return out


def refusal(pack_path: Path, use_pieces: bool) -> tuple[int, int, int, int]:
    """(out-of-domain answered, of n; answerable refused, of n) at the default threshold."""
    ood = load_queries(ROOT / "fixtures/eval/ood.jsonl")
    questions = load_questions(ROOT / "fixtures/eval/questions.jsonl")
    with kbpack.open(pack_path) as pack:
        s = variant(pack.searcher, pieces=use_pieces)
        bluffs = sum(s.search(q.query, k=5).answered for q in ood)
        refused = sum(not s.search(q.query, k=5).answered for q in questions)
    return bluffs, len(ood), refused, len(questions)


def quality(pack_path: Path) -> None:
    n = len(load_questions(ROOT / "fixtures/eval/questions.jsonl"))
    print(
        f"\n== quality (fixtures/eval: {n} questions, two phrasings; same pack and chunk vectors)"
    )
    print(
        f"{'mode':<7} {'phrasing':<7} {'pieces':<7} " + " ".join(f"R@{k:<4}" for k in KS) + " MRR"
    )
    for mode in ("dense", "hybrid"):
        arms = {flag: ranks_of(pack_path, flag, mode) for flag in (True, False)}
        for phrasing in ("doc", "ticket", "all"):
            for flag in (True, False):
                r = arms[flag]
                sub = r["doc"] + r["ticket"] if phrasing == "all" else r[phrasing]
                rec = " ".join(f"{recall_at(sub, k).value:.2f} " for k in KS)
                print(
                    f"{mode:<7} {phrasing:<7} {'with' if flag else 'without':<7} {rec}"
                    f"{mrr(sub).value:.3f}"
                )
            a = (
                arms[True]["doc"] + arms[True]["ticket"]
                if phrasing == "all"
                else arms[True][phrasing]
            )
            b = (
                arms[False]["doc"] + arms[False]["ticket"]
                if phrasing == "all"
                else arms[False][phrasing]
            )
            tests = paired(a, b, KS)
            print(
                f"{mode:<7} {phrasing:<7} with vs without: "
                + "  ".join(f"@{t.k} +{t.wins}/-{t.losses} p={t.p_value:.3f}" for t in tests)
            )
    print("\n== refusal at the default threshold (hybrid, k=5)")
    for flag in (True, False):
        bluffs, n_ood, refused, n_q = refusal(pack_path, flag)
        print(
            f"{'with' if flag else 'without':<7} pieces: {bluffs}/{n_ood} out-of-domain answered, "
            f"{refused}/{n_q} answerable refused"
        )


def scan(n_chunks: int, per_chunk: float, dims: int = 384, repeats: int = 15) -> None:
    rng = np.random.default_rng(0)

    def unit(n: int) -> np.ndarray:
        v = rng.standard_normal((n, dims)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    n_pieces = int(n_chunks * per_chunk)
    chunks, pieces = unit(n_chunks), unit(n_pieces)
    owner = np.sort(rng.integers(0, n_chunks, n_pieces))
    index = PieceIndex.from_columns(pieces, owner)
    both = np.concatenate([chunks, pieces])
    q = unit(1)[0]

    def median(f: object, repeats: int) -> float:
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            f()  # type: ignore[operator]
            times.append(time.perf_counter() - t)
        return float(np.median(times))

    # interleaved, so that load from other processes falls on both alike
    bare_t, ours_t = [], []
    for _ in range(repeats):
        bare_t.append(median(lambda: both @ q, 1))
        ours_t.append(median(lambda: chunk_scores(chunks, q, index), 1))
    bare, ours = float(np.median(bare_t)), float(np.median(ours_t))
    print(
        f"\n== dense scan: {n_chunks} chunks + {n_pieces} pieces x {dims} float32, median of "
        f"{repeats}"
    )
    print(f"numpy matmul over all {n_chunks + n_pieces} vectors  {bare * 1e3:.2f} ms")
    print(f"kbpack chunk_scores (with pieces)         {ours * 1e3:.2f} ms   {ours / bare:.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=Path("/tmp/kbpack-pieces-bench"))
    ap.add_argument("--scan-chunks", type=int, default=100_000)
    ap.add_argument("--skip-build", action="store_true", help="reuse the packs in --out")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.skip_build:
        pack = args.out / "dev-pieces.kbpack"
        with kbpack.open(pack) as p:
            ratio = p.reader.counts["pieces"] / p.reader.counts["chunks"]
            assert p.reader.column(F.PIECE_CHUNK).size == p.reader.counts["pieces"]
    else:
        pack, ratio = cost(args.out)
    quality(pack)
    scan(args.scan_chunks, ratio)


if __name__ == "__main__":
    main()
