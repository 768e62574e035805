"""docs/quality.md: the development-set table, generated, and the paired tests behind each rule.

    python bench/quality_table.py PACK [--stem-pack PACK2] [--markdown]

PACK: a pack of fixtures/eval/corpus built with the default model (pieces on, the default).
PACK2 (optional): the same pack with ``--analyzer snowball-english``, e.g. made from PACK with
``kbpack update PACK fixtures/eval/corpus -o PACK2 --analyzer snowball-english`` (no
re-embedding), for the stemming rows.

For every question the scores are computed once: the dense score with pieces and the chunk's
own cosine (the pack's ``Searcher.dense_scores``: a pack with pieces gives both), and BM25 of
every chunk. Each rule then ranks the same scores, so rules differ only in how they combine
them:

* ``bm25``, ``dense`` (with / without pieces);
* ``hybrid``: kbpack's rule (``kbpack.search.fusion.convex``: 0.8 * minmax(cos) + 0.2 * bm25/max over
  dense top 100 union BM25 top 100), with and without pieces;
* ``hybrid, old rule``: weighted RRF (k = 60) with BM25 at full weight when the query holds a
  code-like word, else its top 3 at 0.25 (kbpack before issue 13);
* the lexical-weight candidates of issue 13 item 1 (``--idf``), the weight growing with how
  rare the query's terms are in the pack (see ``idf_weight_rules``).

Prints recall@1/8 with 95% Wilson intervals and MRR per phrasing ("doc": the document's words;
"ticket": a user's), exact sign tests on discordant pairs, and refusal at the pack's default
threshold (hybrid, k = 5, the shipped ``search``): out-of-domain refused, answerable refused.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from peers import rrf  # bench/peers.py (this script's directory is on sys.path)

import kbpack
from kbpack.ops.evaluate import (
    Question,
    load_queries,
    load_questions,
    mrr,
    normalize,
    paired,
    recall_at,
    wilson,
)
from kbpack.search.bm25 import top_k
from kbpack.search.fusion import DENSE_WEIGHT, convex
from kbpack.search.gating import heading_only
from kbpack.search.searcher import CANDIDATES, code_like_terms, content_terms, idf
from kbpack.text.analyze import tokenize

ROOT = Path(__file__).resolve().parent.parent
PHRASINGS = ("doc", "ticket")
KS = (1, 8)
# The rule kbpack used before the convex fusion: BM25 at full weight when the query holds a
# code-like term, else only its top 3 at weight 0.25 (RRF k = 60).
OLD_WEIGHT_PLAIN = 0.25
OLD_DEPTH_PLAIN = 3


@dataclass
class Scores:
    """One question's scores over every chunk of the pack."""

    question: Question
    gold: set[int]
    with_pieces: np.ndarray  # dense score: (cos + 0.5 * best piece cos) / 1.5
    cos: np.ndarray  # the chunk's own cosine
    bm25: np.ndarray  # BM25 of every chunk (0: no shared term), plain analyzer
    bm25_stem: np.ndarray | None  # the same under snowball-english, when a stem pack is given
    rarity: dict[str, float]  # query rarity measures (see idf_weight_rules)
    # issue 32 item 4 (see user_worded_rules): BM25 over the query's rarer half of content
    # words, and the share of the query's content words the BM25 top chunk holds
    bm25_rare: np.ndarray | None = None
    coverage: float = 1.0
    # issue 32 item 5: the pack's chunks whose words are all their heading path's or title's
    # (``searcher.heading_only``: search never shows them); one array shared by every row
    lone: np.ndarray | None = None


def dense_top(sims: np.ndarray) -> np.ndarray:
    n = min(CANDIDATES, sims.size)
    top = np.argpartition(-sims, n - 1)[:n] if n < sims.size else np.arange(sims.size)
    return top[np.lexsort((top, -sims[top]))]


def bm25_top(scores: np.ndarray) -> np.ndarray:
    ids = np.flatnonzero(scores > 0)
    return top_k(ids, scores[ids], CANDIDATES)[0]


def convex_rank(sims: np.ndarray, bm25: np.ndarray, dense_weight: float) -> list[int]:
    cands = np.union1d(dense_top(sims), bm25_top(bm25))
    ids, _ = convex(cands, sims[cands], bm25[cands], dense_weight)
    return ids.tolist()


def old_rank(sims: np.ndarray, bm25: np.ndarray, query: str) -> list[int]:
    de, bm = dense_top(sims).tolist(), bm25_top(bm25).tolist()
    if code_like_terms(query):
        return [c for c, _ in rrf([de, bm], [1.0, 1.0])]
    return [c for c, _ in rrf([de, bm[:OLD_DEPTH_PLAIN]], [1.0, OLD_WEIGHT_PLAIN])]


def rank_of(order: Sequence[int], gold: set[int]) -> int | None:
    for i, c in enumerate(order[:CANDIDATES], 1):
        if int(c) in gold:
            return i
    return None


def rarity(searcher: object, query: str, n: int, k1: float) -> dict[str, float]:
    """How rare the query's content words are in the pack, each on [0, 1]:

    * ``mean``/``max``: the mean / largest IDF of the query's content words that the pack holds,
      divided by the IDF of a term held by one chunk (the largest a held term can have);
    * ``reach``: the best chunk's BM25 over the score the query could reach at most (every
      content word the pack holds, at BM25's saturation (k1 + 1) * idf): 1 when one chunk
      holds all the query's terms many times, small when the best match holds only common ones.
    """
    top_idf = idf(1, n)
    held = [idf(df, n) for t in content_terms(query) if (df := searcher.doc_freq(t)) > 0]  # type: ignore[attr-defined]
    if not held:
        return {"mean": 0.0, "max": 0.0, "reach_max": 0.0}
    return {
        "mean": float(np.mean(held)) / top_idf,
        "max": max(held) / top_idf,
        "reach_max": sum(held) * (k1 + 1),
    }


def collect(pack_path: Path, stem_pack: Path | None, questions: list[Question]) -> list[Scores]:
    rows: list[Scores] = []
    stems: list[np.ndarray] | None = None
    if stem_pack is not None:
        stems = []
        with kbpack.open(stem_pack) as sp:
            s2 = sp.searcher
            for q in questions:
                ids, sc = s2._bm25_all(q.query, None)
                full = np.zeros(s2.n_chunks(), np.float64)
                full[ids] = sc
                stems.append(full)
    with kbpack.open(pack_path) as pack:
        s = pack.searcher
        assert s.embedder is not None, "the pack's model is needed"
        assert pack.reader.has_pieces, "a pack with pieces is needed (the default build)"
        contents = [normalize(c) for _, c in pack.iter_chunk_contents()]
        n = len(contents)
        lone = heading_only_mask(s, n)
        k1, _ = pack.reader.bm25_params
        for i, q in enumerate(questions):
            d = s.dense_scores(q.query)
            score, cos = d.score, d.cos
            ids, sc = s._bm25_all(q.query, None)
            full = np.zeros(n, np.float64)
            full[ids] = sc
            want = normalize(q.needle)
            rare, coverage = rarer_half(s, q.query, full, n)
            rows.append(
                Scores(
                    q,
                    {c for c, text in enumerate(contents) if want in text},
                    np.asarray(score, np.float64),
                    np.asarray(cos, np.float64),
                    full,
                    None if stems is None else stems[i],
                    rarity(s, q.query, n, k1),
                    rare,
                    coverage,
                    lone,
                )
            )
    return rows


def heading_only_mask(searcher: Any, n: int) -> np.ndarray:
    """True for each chunk whose words are all words of its heading path or document title,
    by the test ``search()`` applies before showing a result (``heading_only``)."""
    out = np.zeros(n, bool)
    for c in range(n):
        res = searcher._result(1, c, 0.0, None, None, None, "chunk")
        out[c] = heading_only(tuple(tokenize(res.content)), res)
    return out


def lone_heading_rules() -> dict[str, Rule]:
    """Issue 32 item 5: a chunk that is a lone heading (a leaf section with no text of its
    own) is kept by the chunker and never shown by ``search()``; does it still cost ranking?

    * ``shown``: kbpack's ranking with such chunks left out of the list afterwards, as
      ``search()`` shows it (the ranks a user sees);
    * ``out of the ranking``: such chunks removed before ranking (no candidate slot, not the
      top BM25 score that the lexical scores are divided by): what dropping them at chunking
      would do to ranking (BM25's statistics aside), or excluding them from ranking.
    """

    def shown(r: Scores) -> list[int]:
        order = convex_rank(r.with_pieces, r.bm25, DENSE_WEIGHT)
        return [c for c in order if not r.lone[c]]  # type: ignore[index]

    def out_of_ranking(r: Scores) -> list[int]:
        lone = r.lone
        assert lone is not None
        sims = np.where(lone, -np.inf, r.with_pieces)
        return convex_rank(sims, np.where(lone, 0.0, r.bm25), DENSE_WEIGHT)

    return {
        "hybrid (kbpack), pieces, lone headings not shown": shown,
        "hybrid, pieces, lone headings out of the ranking": out_of_ranking,
    }


def rarer_half(searcher: Any, query: str, bm25: np.ndarray, n: int) -> tuple[np.ndarray, float]:
    """BM25 of every chunk over the rarer half of the query's content words the pack holds
    (by IDF; all of them for a query of one or two), and the share of the query's content words
    that the BM25 top chunk holds (1.0 when nothing matches)."""
    held = [(idf(df, n), t) for t in content_terms(query) if (df := searcher.doc_freq(t)) > 0]
    held.sort(reverse=True)
    keep = [t for _, t in held[: max(2, (len(held) + 1) // 2)]]
    rare = np.zeros(n, np.float64)
    if keep:
        ids, sc = searcher._bm25_all(" ".join(keep), None)
        rare[ids] = sc
    words = content_terms(query)
    if not words or not bm25.any():
        return rare, 1.0
    top = int(np.argmax(bm25))
    tokens = set(tokenize(searcher.chunk_content(top)))
    return rare, sum(w in tokens for w in words) / len(words)


def user_worded_rules() -> dict[str, Rule]:
    """Issue 32 item 4: why hybrid loses to dense at rank 1 on long user-worded questions.

    Two parameter-free candidates against the fixed 0.2: the lexical list over the rarer half
    of the query's content words only (the common words of a long ticket match everywhere);
    the lexical weight times the share of the query's content words the BM25 top chunk holds
    (a top lexical match holding few of a long question's words is weak evidence).
    """
    return {
        "hybrid, BM25 over the rarer half": lambda r: convex_rank(
            r.with_pieces,
            r.bm25_rare,  # type: ignore[arg-type]
            DENSE_WEIGHT,
        ),
        "hybrid, lexical weight 0.2 * top coverage": lambda r: convex_rank(
            r.with_pieces, r.bm25, 1.0 - (1 - DENSE_WEIGHT) * r.coverage
        ),
    }


Rule = Callable[[Scores], list[int]]


def idf_weight_rules() -> dict[str, Rule]:
    """Issue 13 item 1: lexical evidence should weigh more when the query's terms are rare.

    Each candidate sets the lexical weight from one rarity measure x in [0, 1] as
    ``w = 2 * 0.2 * x``: the fixed weight 0.2 where x = 1/2, none for a query of common words,
    twice as much for one whose terms only one chunk holds. No constant is fitted.
    """

    def weighted(measure: str) -> Rule:
        def rule(r: Scores) -> list[int]:
            if measure == "reach":
                top, reach = float(r.bm25.max()), r.rarity["reach_max"]
                x = min(1.0, top / reach) if reach > 0 else 0.0
            else:
                x = r.rarity[measure]
            return convex_rank(r.with_pieces, r.bm25, 1.0 - 2 * (1 - DENSE_WEIGHT) * x)

        return rule

    return {
        "hybrid, lexical weight 0.4 * mean nIDF": weighted("mean"),
        "hybrid, lexical weight 0.4 * max nIDF": weighted("max"),
        "hybrid, lexical weight 0.4 * bm25 top / reachable": weighted("reach"),
    }


def rules(with_stem: bool) -> dict[str, Rule]:
    out: dict[str, Rule] = {
        "bm25": lambda r: bm25_top(r.bm25).tolist(),
        "dense, pieces": lambda r: dense_top(r.with_pieces).tolist(),
        "dense, no pieces": lambda r: dense_top(r.cos).tolist(),
        "hybrid (kbpack), pieces": lambda r: convex_rank(r.with_pieces, r.bm25, DENSE_WEIGHT),
        "hybrid (kbpack), no pieces": lambda r: convex_rank(r.cos, r.bm25, DENSE_WEIGHT),
        "hybrid, old rule, pieces": lambda r: old_rank(r.with_pieces, r.bm25, r.question.query),
        "hybrid, old rule, no pieces": lambda r: old_rank(r.cos, r.bm25, r.question.query),
    }
    if with_stem:
        out["bm25, snowball-english"] = lambda r: bm25_top(r.bm25_stem).tolist()  # type: ignore[arg-type]
        out["hybrid (kbpack), pieces, snowball-english"] = lambda r: convex_rank(
            r.with_pieces,
            r.bm25_stem,  # type: ignore[arg-type]
            DENSE_WEIGHT,
        )
    return out


def fmt_p(p: float) -> str:
    return f"{p:.2g}" if p < 0.01 else f"{p:.2f}"


def paired_cells(a: dict[str, Any], b: dict[str, Any], phrasings: Sequence[str]) -> str:
    """Ranks ``a`` against ``b`` per phrasing: "doc: @1 +w/-l p=.., @8 .., @20 .., MRR +x; ..."
    (+wins/-losses of ``a``, exact sign test on the discordant pairs)."""
    cells = []
    for ph in phrasings:
        tests = paired(a[ph], b[ph], (1, 8, 20))
        dm = mrr(a[ph]).value - mrr(b[ph]).value
        shown = ", ".join(f"@{t.k} +{t.wins}/-{t.losses} p={fmt_p(t.p_value)}" for t in tests)
        cells.append(f"{ph}: {shown}, MRR {dm:+.3f}")
    return "; ".join(cells)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pack", type=Path)
    ap.add_argument("--stem-pack", type=Path, default=None)
    ap.add_argument("--idf", action="store_true", help="also the IDF-dependent lexical weights")
    ap.add_argument("--no-refusal", action="store_true", help="skip the refusal count")
    ap.add_argument(
        "--user-worded", action="store_true", help="also the issue 32 item 4 candidates"
    )
    ap.add_argument(
        "--lone-headings", action="store_true", help="also the issue 32 item 5 candidates"
    )
    args = ap.parse_args()

    questions = load_questions(ROOT / "fixtures/eval/questions.jsonl")
    oods = load_queries(ROOT / "fixtures/eval/ood.jsonl")
    rows = collect(args.pack, args.stem_pack, questions)
    table = rules(args.stem_pack is not None)
    if args.idf:
        table |= idf_weight_rules()
    if args.user_worded:
        table |= user_worded_rules()
    if args.lone_headings:
        table |= lone_heading_rules()
    ranks = {
        name: {
            p: [rank_of(rule(r), r.gold) for r in rows if r.question.phrasing == p]
            for p in PHRASINGS
        }
        for name, rule in table.items()
    }
    n_needles = len({r.question.needle for r in rows})
    destroyed = len({r.question.needle for r in rows if not r.gold})
    print(
        f"{args.pack.name}: {len(rows)} questions ({n_needles} needles x doc/ticket), "
        f"{rows[0].cos.size} chunks; destroyed answers (no chunk holds the needle whole): "
        f"{destroyed}; R@k with 95% Wilson intervals, MRR with its normal-approximation interval"
    )
    shipped = list(rules(False))
    for title, names in (
        ("", shipped),
        (
            "\nCandidates measured against kbpack's rule (not adopted unless stated):\n",
            [n for n in table if n not in shipped],
        ),
    ):
        if not names:
            continue
        print(title)
        print("| rule | phrasing | R@1 | R@8 | R@20 | MRR |")
        print("|---|---|---|---|---|---|")
        for name in names:
            for p in PHRASINGS:
                r = ranks[name][p]
                print(
                    f"| {name} | {p} | {recall_at(r, 1)} | {recall_at(r, 8)} | "
                    f"{recall_at(r, 20).value:.2f} | {mrr(r)} |"
                )

    def compare(a: str, b: str) -> None:
        cells = []
        for p in PHRASINGS:
            tests = paired(ranks[a][p], ranks[b][p], (1, 8, 20))
            dm = mrr(ranks[a][p]).value - mrr(ranks[b][p]).value
            cells.append(
                f"{p}: "
                + ", ".join(f"@{t.k} +{t.wins}/-{t.losses} p={fmt_p(t.p_value)}" for t in tests)
                + f", MRR {dm:+.3f}"
            )
        print(f"* {a} vs {b}: " + "; ".join(cells))

    print("\nPaired (exact sign test on discordant pairs; +wins/-losses of the first):")
    base = "hybrid (kbpack), pieces"
    compare(base, "dense, pieces")
    compare(base, "bm25")
    compare(base, "hybrid, old rule, pieces")
    compare("hybrid (kbpack), no pieces", "hybrid, old rule, no pieces")
    compare(base, "hybrid (kbpack), no pieces")
    compare("dense, pieces", "dense, no pieces")
    if args.stem_pack is not None:
        compare("bm25, snowball-english", "bm25")
        compare("hybrid (kbpack), pieces, snowball-english", base)
    if args.idf:
        for name in idf_weight_rules():
            compare(name, base)
    if args.user_worded:
        for name in user_worded_rules():
            compare(name, base)
    if args.lone_headings:
        lone = rows[0].lone
        assert lone is not None
        at_top = sum(bool(r.bm25.any()) and bool(lone[int(np.argmax(r.bm25))]) for r in rows)
        print(
            f"* lone-heading chunks: {int(lone.sum())} of {lone.size}; the top BM25 score (the "
            f"divisor of every lexical score) is one of them for {at_top} of {len(rows)} questions"
        )
        shown, out = lone_heading_rules()
        compare(out, shown)

    if not args.no_refusal:
        refusal(args.pack, questions, [o.query for o in oods])
        near = load_queries(ROOT / "fixtures/eval/ood_near.jsonl")
        with kbpack.open(args.pack) as pack:
            answered = [o.query for o in near if pack.searcher.search(o.query, k=5).answered]
        lo, hi = wilson(len(near) - len(answered), len(near))
        print(
            f"Near misses (ood_near.jsonl): refused {len(near) - len(answered)}/{len(near)} "
            f"({(len(near) - len(answered)) / len(near):.0%} [{lo:.2f}, {hi:.2f}])"
        )
        for q in answered:
            print(f"  answered: {q}")


def refusal(pack_path: Path, questions: list[Question], oods: list[str]) -> None:
    """The shipped gate: ``search(k=5)`` in hybrid mode at the pack's default threshold."""
    with kbpack.open(pack_path) as pack:
        s = pack.searcher
        t = s.default_threshold()
        answered = [q for q in oods if s.search(q, k=5).answered]
        refused = sum(not s.search(q.query, k=5).answered for q in questions)
    italian = [q for q in oods if _italian(q)]
    it_answered = [q for q in answered if q in italian]
    lo, hi = wilson(len(oods) - len(answered), len(oods))
    flo, fhi = wilson(refused, len(questions))
    print(
        f"\nRefusal at the default threshold {t:.3f} (hybrid, k = 5): out-of-domain refused "
        f"{len(oods) - len(answered)}/{len(oods)} ({(len(oods) - len(answered)) / len(oods):.0%} "
        f"[{lo:.2f}, {hi:.2f}]); answerable falsely refused {refused}/{len(questions)} "
        f"({refused / len(questions):.1%} [{flo:.3f}, {fhi:.3f}]); Italian out-of-domain "
        f"answered {len(it_answered)}/{len(italian)}"
    )
    for q in answered:
        print(f"  answered: {q}")


_ITALIAN = {"come", "qual", "chi", "quanto", "si", "della", "del", "il", "la", "una", "un", "è"}


def _italian(query: str) -> bool:
    words = {w.strip("?'").lower() for w in query.replace("'", " ").split()}
    return len(words & _ITALIAN) >= 2


if __name__ == "__main__":
    main()
