"""Issue 32 item 4: why user-worded ("ticket") questions lose rank 1 under hybrid where dense
alone has the answer first, and the fusion rules measured against kbpack's on both phrasings.

    python bench/quality_tickets.py PACK                         # the development set
    python bench/quality_tickets.py PACK --questions FILE.jsonl  # another set (e.g. pg_tickets)

PACK: a pack of the questions' corpus built with the default model (pieces on). For every
question the scores are computed once (``bench/quality_table.collect``) plus each query term's
BM25 contributions and the best BM25 of each chunk's sentence pieces, so every rule ranks the
same scores. Prints:

* the diagnosis: for each ticket that dense ranks first and hybrid does not, where the hybrid
  winner's lexical lead comes from (query words only the winner holds, words both hold,
  stopwords) and how far behind it is on the dense side (min-max units of the candidates);
* R@1/8/20 and MRR per phrasing for bm25, dense, hybrid (kbpack) and each candidate, and each
  candidate against kbpack's rule paired (exact sign test on discordant pairs).

The candidates, none with a fitted constant:

* ``BM25 over content words``: the query's stopwords (``kbpack.text.stopwords``) left out of
  the lexical scores (the "how do I ... my ..." of a ticket match FAQ lists);
* ``lexical weight 0.2 * min(1, 4 / content words)``: lexical evidence weighs less the longer
  the question (4: a round value, to see the direction; doc questions hold 6 here, tickets 7);
* ``lexical from pieces``: the lexical score of a chunk is ``(bm25(chunk) + 0.5 * best
  bm25(piece)) / 1.5``, as the dense score blends a chunk with its best piece (PIECE_WEIGHT),
  so that the query's words count when they meet in one sentence; each piece scored with its
  chunk's header, the pack's IDF and the pieces' average length;
* ``dense range from the dense list``: min-max of the dense scores over the dense top 100
  only (BM25-only candidates can no longer stretch the range and shrink dense differences).
"""

from __future__ import annotations

import argparse
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

import numpy as np
import quality_table as qt  # bench/quality_table.py (this script's directory is on sys.path)

import kbpack
from kbpack.ops.evaluate import load_questions, mrr
from kbpack.pack import format as F
from kbpack.pack.format import PIECE_WEIGHT
from kbpack.search.bm25 import idf_weights
from kbpack.search.fusion import DENSE_WEIGHT
from kbpack.text.analyze import analyzer, query_terms
from kbpack.text.stopwords import STOPWORDS

ROOT = Path(__file__).resolve().parent.parent
TermScores = dict[str, tuple[np.ndarray, np.ndarray]]  # term -> (chunk ids, contributions)


def term_scores(pack_path: Path, rows: list[qt.Scores]) -> list[TermScores]:
    """Each question's BM25 contributions per query term (the pack's baked postings)."""
    out: list[TermScores] = []
    with kbpack.open(pack_path) as pack:
        s = pack.searcher
        for _ in range(2):  # a second query makes the corpus bake its postings (BM25Index)
            s._bm25_all("x", None)
        index = s.corpus.postings._index  # type: ignore[attr-defined]
        assert index is not None
        for r in rows:
            d: TermScores = {}
            for t in query_terms(r.question.query, s.analyzer_name):
                row = index._row(t)
                if row is not None:
                    lo, hi = int(index.indptr[row]), int(index.indptr[row + 1])
                    d[t] = (index.chunk[lo:hi].copy(), index.contrib[lo:hi].copy())
            out.append(d)
    return out


def piece_bm25(pack_path: Path, rows: list[qt.Scores]) -> list[np.ndarray]:
    """Per question, the best BM25 among each chunk's pieces (a chunk without pieces is its
    own piece): header + piece text, the pack's document frequencies, k1 and b, the length
    normalised by the pieces' average."""
    with kbpack.open(pack_path) as pack:
        s, r = pack.searcher, pack.reader
        n = s.n_chunks()
        an = analyzer(s.analyzer_name)
        pc = np.asarray(r.column(F.PIECE_CHUNK))
        pf, pt = np.asarray(r.column(F.PIECE_FROM)), np.asarray(r.column(F.PIECE_TO))
        cd = np.asarray(r.column(F.CHUNK_DOCUMENT))
        cf, ct = np.asarray(r.column(F.CHUNK_FROM)), np.asarray(r.column(F.CHUNK_TO))
        texts = r.strings(F.DOC_TEXT)
        owners: list[int] = []
        lengths: list[int] = []
        postings: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for c in range(n):
            res = s._result(1, c, 0.0, None, None, None, "chunk")
            head = " ".join(p for p in (res.title, res.section) if p)
            spans = list(zip(pf[pc == c], pt[pc == c], strict=True)) or [(cf[c], ct[c])]
            for a, b in spans:
                terms = an.terms(head) + an.terms(texts[cd[c]][a:b])
                for t, f in Counter(terms).items():
                    postings[t].append((len(owners), f))
                owners.append(c)
                lengths.append(len(terms))
        k1, b = r.bm25_params
        length = np.asarray(lengths, np.float64)
        norm = k1 * (1 - b + b * length / length.mean())
        owner = np.asarray(owners)
        out = []
        for row in rows:
            score = np.zeros(len(owners))
            for t in query_terms(row.question.query, s.analyzer_name):
                df = s.doc_freq(t)
                if df == 0 or t not in postings:
                    continue
                w = float(idf_weights(np.array([df]), n, k1)[0])
                ids = np.array([i for i, _ in postings[t]])
                tf = np.array([x for _, x in postings[t]], np.float64)
                score[ids] += w * tf / (tf + norm[ids])
            best = np.zeros(n)
            np.maximum.at(best, owner, score)
            out.append(best)
    return out


def bm25_of(d: TermScores, n: int, keep: Callable[[str], bool]) -> np.ndarray:
    out = np.zeros(n)
    for t, (ids, c) in d.items():
        if keep(t):
            np.add.at(out, ids, c)
    return out


def rank_fused(sims: np.ndarray, lexical: np.ndarray, listed: np.ndarray, w: float) -> list[int]:
    """kbpack's fusion with the lexical scores ``lexical`` (the BM25 list from ``listed``)."""
    cands = np.union1d(qt.dense_top(sims), qt.bm25_top(listed))
    ids, _ = qt.convex(cands, sims[cands], lexical[cands], w)
    return [int(c) for c in ids]


def dense_range(r: qt.Scores) -> list[int]:
    sims = r.with_pieces
    top = qt.dense_top(sims)
    cands = np.union1d(top, qt.bm25_top(r.bm25))
    lo, hi = float(sims[top].min()), float(sims[top].max())
    dense = (sims[cands] - lo) / (hi - lo) if hi > lo else np.ones(cands.size)
    bm = r.bm25[cands]
    lexical = bm / bm.max() if bm.max() > 0 else bm
    fused = DENSE_WEIGHT * dense + (1 - DENSE_WEIGHT) * lexical
    return [int(c) for c in cands[np.lexsort((cands, -fused))]]


Rule = Callable[[qt.Scores, TermScores, np.ndarray], list[int]]


def rules() -> dict[str, Rule]:
    def content_words(d: TermScores) -> int:
        return sum(t not in STOPWORDS for t in d)

    return {
        "bm25": lambda r, d, p: qt.bm25_top(r.bm25).tolist(),
        "dense": lambda r, d, p: qt.dense_top(r.with_pieces).tolist(),
        "hybrid (kbpack)": lambda r, d, p: qt.convex_rank(r.with_pieces, r.bm25, DENSE_WEIGHT),
        "BM25 over content words": lambda r, d, p: rank_fused(
            r.with_pieces,
            lexical := bm25_of(d, r.bm25.size, lambda t: t not in STOPWORDS),
            lexical,
            DENSE_WEIGHT,
        ),
        "lexical weight 0.2 * min(1, 4 / content words)": lambda r, d, p: qt.convex_rank(
            r.with_pieces,
            r.bm25,
            1 - (1 - DENSE_WEIGHT) * min(1.0, 4 / max(1, content_words(d))),
        ),
        "lexical from pieces": lambda r, d, p: rank_fused(
            r.with_pieces, (r.bm25 + PIECE_WEIGHT * p) / (1 + PIECE_WEIGHT), r.bm25, DENSE_WEIGHT
        ),
        "dense range from the dense list": lambda r, d, p: dense_range(r),
    }


def diagnose(rows: list[qt.Scores], terms: list[TermScores]) -> None:
    """Tickets dense ranks first and hybrid does not: what the BM25 side adds to the winner."""
    lead: dict[str, float] = defaultdict(float)
    gaps: list[float] = []
    held: list[tuple[int, int, int]] = []
    by_stopwords = 0
    for r, d in zip(rows, terms, strict=True):
        if r.question.phrasing != "ticket":
            continue
        de = qt.dense_top(r.with_pieces).tolist()
        hy = qt.convex_rank(r.with_pieces, r.bm25, DENSE_WEIGHT)
        if qt.rank_of(de, r.gold) != 1 or qt.rank_of(hy, r.gold) == 1:
            continue
        gold, win = de[0], hy[0]
        cands = np.union1d(qt.dense_top(r.with_pieces), qt.bm25_top(r.bm25))
        top = float(r.bm25[cands].max())
        sims = r.with_pieces[cands]
        gap = float(r.with_pieces[gold] - r.with_pieces[win]) / float(sims.max() - sims.min())
        gaps.append(gap)

        def at(c: int, d: TermScores = d) -> dict[str, float]:
            return {t: float(x[ids == c][0]) for t, (ids, x) in d.items() if (ids == c).any()}

        g, w = at(gold), at(win)
        for t in set(g) | set(w):
            part = "stopwords" if t in STOPWORDS else "both" if t in g and t in w else "winner"
            if part == "winner" and t in g:
                part = "gold only"
            lead[part] += (w.get(t, 0.0) - g.get(t, 0.0)) / top
        stop = sum(v for t, v in w.items() if t in STOPWORDS) - sum(
            v for t, v in g.items() if t in STOPWORDS
        )
        lex = float(r.bm25[win] - r.bm25[gold]) - stop
        by_stopwords += (1 - DENSE_WEIGHT) * lex / top < DENSE_WEIGHT * gap
        held.append(
            (
                sum(t not in STOPWORDS for t in w),
                sum(t not in STOPWORDS for t in g),
                sum(t not in STOPWORDS for t in d),
            )
        )
    n = len(gaps)
    if not n:
        print("no ticket that dense ranks first and hybrid does not")
        return
    print(
        f"Tickets dense ranks first and hybrid does not: {n}. The gold's dense lead over the "
        f"hybrid winner (min-max units of the candidates): median {np.median(gaps):.3f}, mean "
        f"{np.mean(gaps):.3f}. The winner's lexical lead (in units of the top BM25 score), mean "
        f"per question: "
        + ", ".join(f"{k} {v / n:+.3f}" for k, v in sorted(lead.items(), key=lambda kv: -kv[1]))
        + f". Content words of the query held: winner {np.mean([a for a, _, _ in held]):.1f}, "
        f"gold {np.mean([b for _, b, _ in held]):.1f}, of {np.mean([c for _, _, c in held]):.1f}; "
        f"the winner holds more of them in {sum(a > b for a, b, _ in held)}; without the "
        f"stopwords' BM25 the gold would be first in {by_stopwords}."
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pack", type=Path)
    ap.add_argument("--questions", type=Path, default=ROOT / "fixtures/eval/questions.jsonl")
    args = ap.parse_args()
    questions = load_questions(args.questions)
    rows = qt.collect(args.pack, None, questions)
    terms = term_scores(args.pack, rows)
    pieces = piece_bm25(args.pack, rows)
    destroyed = sum(not r.gold for r in rows)
    print(
        f"{args.pack.name}: {len(rows)} questions, {destroyed} without a chunk holding the needle"
    )
    diagnose(rows, terms)
    phrasings = sorted({str(r.question.phrasing) for r in rows})
    ranks = {
        name: {
            ph: [
                qt.rank_of(rule(r, d, p), r.gold)
                for r, d, p in zip(rows, terms, pieces, strict=True)
                if r.question.phrasing == ph
            ]
            for ph in phrasings
        }
        for name, rule in rules().items()
    }
    print("\n| rule | phrasing | R@1 | R@8 | R@20 | MRR |\n|---|---|---|---|---|---|")
    for name, per in ranks.items():
        for ph, rk in per.items():
            r1, r8, r20 = (np.mean([x is not None and x <= k for x in rk]) for k in (1, 8, 20))
            print(f"| {name} | {ph} | {r1:.2f} | {r8:.2f} | {r20:.2f} | {mrr(rk).value:.3f} |")
    print("\nPaired against hybrid (kbpack) (+wins/-losses of the rule, exact sign test):")
    base = ranks["hybrid (kbpack)"]
    for name, per in ranks.items():
        if name == "hybrid (kbpack)":
            continue
        print(f"* {name}: " + qt.paired_cells(per, base, phrasings))


if __name__ == "__main__":
    main()
