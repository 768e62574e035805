"""``kbpack eval`` on a pack: each question's rank per mode, the metrics per phrasing, destroyed
answers and the paired comparisons, as one JSON-able report (the command only prints it).

The pure statistics live in ``kbpack.ops.evaluate``; this module opens packs and searches them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kbpack.errors import UsageError
from kbpack.ops import evaluate as E

MODES = ("hybrid", "dense", "bm25")
RERANKED = "+rerank"  # suffix of a mode's name when the reranker reordered its results


def check_modes(pack: Any, modes: Sequence[str], asked: bool) -> list[str]:
    """Without vectors only bm25 can run: say so instead of reporting bm25 under another name."""
    if pack.reader.model is not None:
        return list(modes)
    if asked and any(m != "bm25" for m in modes):
        raise UsageError(
            f"{pack.path}: this pack has no vectors (built with --no-vectors); use --mode bm25"
        )
    return ["bm25"]


def ensure_dense(pack: Any, modes: Sequence[str]) -> None:
    """A dense mode needs the query-side model: a one-line error instead of a silent bm25."""
    if any(m != "bm25" for m in modes) and pack.embedder is None:
        why = "; ".join(pack.searcher.notes) or "the pack's model is not available"
        raise UsageError(
            f"{pack.path}: dense search cannot run ({why}); pass --model FILE.gguf or use --mode bm25"
        )


def ranks(
    pack: Any,
    questions: Sequence[E.Question],
    mode: str,
    depth: int,
    reranker: Any | None = None,
    rerank_top: int = 25,
) -> list[int | None]:
    """The rank of each question's needle in ``mode`` (reordered by ``reranker`` if given)."""
    searcher = pack.searcher
    searcher.reranker = reranker
    out = []
    for q in questions:
        resp = pack.search(q.query, k=depth, mode=mode, refuse=False, rerank_top=rerank_top)
        out.append(E.hit_rank((r.content for r in resp.results), q.needle))
    return out


def subsets(questions: Sequence[E.Question]) -> list[tuple[str, list[int]]]:
    """'all', then one subset per phrasing (doc, ticket, ...) when the file has them."""
    out = [("all", list(range(len(questions))))]
    for ph in sorted({q.phrasing for q in questions if q.phrasing}):
        out.append((ph, [i for i, q in enumerate(questions) if q.phrasing == ph]))
    return out


def metrics(ranks: Sequence[int | None], ks: Sequence[int]) -> dict[str, Any]:
    return {
        "n": len(ranks),
        "recall": {str(k): E.recall_at(ranks, k).as_dict() for k in ks},
        "mrr": E.mrr(ranks).as_dict(),
    }


def evaluate_pack(
    pack: Path,
    questions: Path,
    *,
    modes: Sequence[str] = (),
    ks: Sequence[int] = (1, 4, 8, 20),
    against: Path | None = None,
    show_ranks: bool = False,
    rerank: Path | None = None,
    rerank_top: int = 25,
    model: Path | None = None,
    threads: int | None = None,
) -> tuple[dict[str, Any], list[E.Question]]:
    """The ``kbpack eval`` report (spec/JSON.md) and the questions it was measured on.

    Without ``modes`` all three run (bm25 only without vectors). The paired tests compare the
    first mode with each other one, or PACK with ``against`` per mode, or each mode with itself
    reranked (``rerank``).
    """
    import kbpack

    if rerank is not None and against is not None:
        raise ValueError("rerank pairs each mode with itself, against pairs two packs: give one")
    cutoffs = sorted(ks)
    qs = E.load_questions(questions)
    depth = max(cutoffs)
    report: dict[str, Any] = {"pack": str(pack), "questions": str(questions), "k": cutoffs}
    with kbpack.open(str(pack), model=model, threads=threads) as p:
        run_modes = check_modes(p, modes or MODES, asked=bool(modes))
        ensure_dense(p, run_modes)
        gone = E.destroyed([q.needle for q in qs], (c for _, c in p.iter_chunk_contents()))
        needles = {q.needle for q in qs}
        gone_needles = {qs[i].needle for i in gone}
        report.update(
            chunks=p.n_chunks,
            n_questions=len(qs),
            n_needles=len(needles),
            destroyed={"needles": len(gone_needles), "ids": [qs[i].id for i in gone]},
        )
        found = {m: ranks(p, qs, m, depth) for m in run_modes}
        if rerank is not None:
            from kbpack.model.resolve import load_reranker

            reranker = load_reranker(rerank, threads)
            assert reranker is not None  # None only for no path
            for m in list(run_modes):
                found[m + RERANKED] = ranks(p, qs, m, depth, reranker, rerank_top)
            report["rerank"] = {"model": reranker.identity.as_dict(), "top": rerank_top}
            reranker.close()
    plain_modes = run_modes
    if rerank is not None:
        run_modes = [m for base in plain_modes for m in (base, base + RERANKED)]
    other: dict[str, list[int | None]] = {}
    if against is not None:
        with kbpack.open(str(against), model=model, threads=threads) as p2:
            ensure_dense(p2, check_modes(p2, run_modes, asked=True))
            other = {m: ranks(p2, qs, m, depth) for m in run_modes}

    parts = subsets(qs)
    report["modes"] = {
        m: {name: metrics([found[m][i] for i in idx], cutoffs) for name, idx in parts}
        for m in run_modes
    }
    comparisons: list[tuple[str, str, list[int | None], list[int | None]]] = []
    if other and against is not None:
        comparisons = [
            (f"{m} {pack.name}", f"{m} {against.name}", found[m], other[m]) for m in run_modes
        ]
        report["against"] = {
            "pack": str(against),
            "modes": {
                m: {name: metrics([other[m][i] for i in idx], cutoffs) for name, idx in parts}
                for m in run_modes
            },
        }
    elif rerank is not None:
        comparisons = [(m, m + RERANKED, found[m], found[m + RERANKED]) for m in plain_modes]
    else:
        comparisons = [(run_modes[0], m, found[run_modes[0]], found[m]) for m in run_modes[1:]]
    report["paired"] = [
        {
            "a": a,
            "b": b,
            "subset": name,
            "n": len(idx),
            "k": [
                x.as_dict() for x in E.paired([ra[i] for i in idx], [rb[i] for i in idx], cutoffs)
            ],
        }
        for a, b, ra, rb in comparisons
        for name, idx in parts
    ]
    if show_ranks:
        report["ranks"] = {m: {q.id: found[m][i] for i, q in enumerate(qs)} for m in run_modes}
    return report, qs
