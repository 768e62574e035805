"""Can a build skip embedding chunks that have sentence pieces, and derive their vectors from
the pieces' instead? (issue 35 item 1: "a length-weighted mean, re-normalised").

    python bench/build_derive.py DEV.kbpack

DEV.kbpack: ``kbpack build fixtures/eval/corpus`` (pieces on, the default). A chunk of one
piece has no pieces (kbpack/index/pieces.py) and keeps its own vector. For every chunk with
pieces the candidate vector is the mean of its pieces' stored vectors weighted by the pieces'
lengths in characters ("chars") or unweighted ("uniform"), re-normalised. Each question's dense
score is then computed as the pack's (``kbpack.search.dense``: the chunk's cosine blended with
its best piece's, PIECE_WEIGHT) from the embedded and from the derived chunk vectors; BM25 is
the pack's. Prints R@1/R@8/MRR per phrasing and exact sign tests of each derived variant
against the embedded vectors, for dense and hybrid (kbpack's convex rule). Vectors are the
stored float16 ones (a build would average the float32 ones: ~1e-3 apart). A script: it
asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import h5py
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from quality_table import PHRASINGS, convex_rank, dense_top, paired_cells, rank_of  # noqa: E402

import kbpack  # noqa: E402
from kbpack.ops.evaluate import load_questions, mrr, normalize, recall_at  # noqa: E402
from kbpack.pack import format as F  # noqa: E402
from kbpack.search.fusion import DENSE_WEIGHT  # noqa: E402


def derived(
    chunks: np.ndarray,
    owner: np.ndarray,
    lengths: np.ndarray,
    pieces: np.ndarray,
    weighted: bool,
    unit: bool = True,
) -> np.ndarray:
    """``chunks`` with each chunk that has pieces replaced by their (weighted) mean, unit
    (``unit``) or as it is."""
    out = chunks.copy()
    w = lengths.astype(np.float64) if weighted else np.ones(len(owner))
    sums = np.zeros_like(chunks, dtype=np.float64)
    np.add.at(sums, owner, pieces.astype(np.float64) * w[:, None])
    totals = np.zeros(len(chunks))
    np.add.at(totals, owner, w)
    has = np.unique(owner)
    v = sums[has] / totals[has, None]
    out[has] = (v / np.linalg.norm(v, axis=1, keepdims=True) if unit else v).astype(np.float32)
    return out


def headerless(pack: Any, cache: Path) -> np.ndarray:
    """Every piece's content embedded alone (behind the document prefix, without the chunk's
    header), as float16-rounded unit vectors like the stored ones; kept in ``cache``."""
    if cache.exists():
        return np.asarray(np.load(cache), np.float32)
    r = pack.reader
    owner = r.column(F.PIECE_CHUNK)
    start, end = r.column(F.PIECE_FROM), r.column(F.PIECE_TO)
    doc_of = r.column(F.CHUNK_DOCUMENT)
    texts = [
        r.text(int(doc_of[int(c)]))[int(a) : int(b)]
        for c, a, b in zip(owner, start, end, strict=True)
    ]
    vectors = pack.searcher.embedder.embed_documents(texts).astype(np.float16)
    np.save(cache, vectors)
    return np.asarray(vectors, np.float32)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pack", type=Path)
    ap.add_argument(
        "--headerless",
        type=Path,
        help="also pieces embedded without their chunk's header (vectors cached in this .npy)",
    )
    args = ap.parse_args()
    with h5py.File(args.pack, "r") as f:
        chunks = f[F.VEC_DATA][...].astype(np.float32)
        pieces = f[F.PIECE_DATA][...].astype(np.float32)
        owner = f[F.PIECE_CHUNK][...].astype(np.int64)
        lengths = f[F.PIECE_TO][...] - f[F.PIECE_FROM][...]
    with kbpack.open(args.pack) as pack:
        bare = headerless(pack, args.headerless) if args.headerless else None
    variants = {
        "embedded": chunks,
        "chars-weighted mean": derived(chunks, owner, lengths, pieces, True),
        "uniform mean": derived(chunks, owner, lengths, pieces, False),
        # not re-normalised: a chunk's cosine is then the weighted mean of its pieces' cosines
        "chars-weighted mean, not normalised": derived(chunks, owner, lengths, pieces, True, False),
    }
    piece_sets = {name: pieces for name in variants}
    if bare is not None:  # the chunks' own vectors, pieces embedded without their header
        variants["pieces without header"] = chunks
        piece_sets["pieces without header"] = bare
    has = np.unique(owner)
    for name, v in variants.items():
        if v is not chunks:
            agree = np.sum(v[has] * chunks[has], axis=1)
            print(
                f"{name}: cosine to the embedded chunk vector over {has.size} chunks with "
                f"pieces of {len(chunks)}: median {np.median(agree):.4f}, min {agree.min():.4f}"
            )
    questions = load_questions(ROOT / "fixtures/eval/questions.jsonl")
    starts = np.r_[0, np.flatnonzero(np.diff(owner)) + 1]
    ranks: dict[str, dict[str, list[int | None]]] = {}
    with kbpack.open(args.pack) as pack:
        s = pack.searcher
        contents = [normalize(c) for _, c in pack.iter_chunk_contents()]
        n = len(contents)
        for q in questions:
            qv = s.query_vector(q.query).astype(np.float32)
            ids, sc = s._bm25_all(q.query, None)
            bm25 = np.zeros(n, np.float64)
            bm25[ids] = sc
            want = normalize(q.needle)
            gold = {c for c, text in enumerate(contents) if want in text}
            piece_cos_of = {id(m): m @ qv for m in piece_sets.values()}
            for name, v in variants.items():
                piece_cos = piece_cos_of[id(piece_sets[name])]
                cos = (v @ qv).astype(np.float64)
                best = cos.copy()
                best[owner[starts]] = np.maximum.reduceat(piece_cos, starts)
                score = (cos + F.PIECE_WEIGHT * best) / (1 + F.PIECE_WEIGHT)
                for rule, order in (
                    ("dense", dense_top(score).tolist()),
                    ("hybrid", convex_rank(score, bm25, DENSE_WEIGHT)),
                ):
                    key = f"{rule}, {name}"
                    ranks.setdefault(key, {p: [] for p in PHRASINGS})[str(q.phrasing)].append(
                        rank_of(order, gold)
                    )
    print(f"\n{args.pack.name}: {len(questions)} questions, {n} chunks\n")
    print("| rule, chunk vectors | phrasing | R@1 | R@8 | MRR |")
    print("|---|---|---|---|---|")
    for key, by in ranks.items():
        for p in PHRASINGS:
            r = by[p]
            print(f"| {key} | {p} | {recall_at(r, 1)} | {recall_at(r, 8)} | {mrr(r)} |")
    print("\nPaired against the embedded chunk vectors (+wins/-losses of the derived):")
    for rule in ("dense", "hybrid"):
        for name in variants:
            if name == "embedded":
                continue
            a, b = ranks[f"{rule}, {name}"], ranks[f"{rule}, embedded"]
            print(f"* {rule}, {name}: " + paired_cells(a, b, PHRASINGS))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
