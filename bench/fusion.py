"""Which fusion earns its place? Candidate rules on the development evaluation, both phrasings.

    python bench/fusion.py [PACK]      # default: builds /tmp/kbpack-eval.kbpack from fixtures/eval

For every question the dense similarities and BM25 scores are computed once (the pack's own
model), then each fusion rule is applied to the same scores, so the rules differ only in fusion.
Prints recall@1/4/8/20 and MRR per phrasing ("doc": the document's words; "ticket": a
paraphrase), the paired sign test of each rule against dense alone, and, last, kbpack's rule
(``kbpack.search.fusion.convex``) against the rule it replaced (weighted RRF switched by code-like
terms), paired, per phrasing.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
from peers import rrf  # bench/peers.py (this script's directory is on sys.path)

import kbpack
from kbpack.ops.evaluate import load_questions, normalize, paired
from kbpack.pack import format as F
from kbpack.search.bm25 import top_k
from kbpack.search.fusion import DENSE_WEIGHT, convex
from kbpack.search.searcher import CANDIDATES, code_like_terms
from kbpack.text.analyze import tokenize

# The rule kbpack used before the convex fusion (kbpack <= 0.x, RRF k = 60): BM25 at full
# weight when the query holds a code-like term, else only its top 3 at weight 0.25.
OLD_WEIGHT_PLAIN = 0.25
OLD_DEPTH_PLAIN = 3

ROOT = Path(__file__).resolve().parent.parent
KS = (1, 4, 8, 20)


def main() -> None:
    pack_path = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("/tmp/kbpack-eval.kbpack")
    if not pack_path.exists():
        subprocess.run(
            [
                "kbpack",
                "build",
                str(ROOT / "fixtures/eval/corpus"),
                "-o",
                str(pack_path),
                "--quiet",
            ],
            check=True,
        )
    questions = load_questions(ROOT / "fixtures/eval/questions.jsonl")
    with kbpack.open(pack_path) as pack:
        s = pack.searcher
        assert s.embedder is not None, "the pack's model is needed"
        contents = [normalize(c) for _, c in pack.iter_chunk_contents()]
        indptr = pack.reader.column(F.BM25_INDPTR)
        n_chunks = len(contents)
        lookup = s.corpus.postings.lookup()  # type: ignore[attr-defined]
        rows = []
        for q in questions:
            de, _ = s._dense(q.query, None)
            bm_all = s._bm25_all(q.query, None)
            bm, _ = top_k(*bm_all, CANDIDATES)
            sims = s.dense_similarities(q.query)
            scores = (sims, dict(zip(bm_all[0].tolist(), bm_all[1].tolist(), strict=True)))
            gold = {i for i, c in enumerate(contents) if normalize(q.needle) in c}
            dfs = []
            for t in set(tokenize(q.query)):
                r = lookup.find(t)
                if r is not None:
                    dfs.append(int(indptr[r + 1] - indptr[r]))
            rows.append((q, [int(x) for x in de], [int(x) for x in bm], gold, (dfs, scores)))

    def rank_of(order: list[int], gold: set[int]) -> int | None:
        for i, c in enumerate(order[:CANDIDATES], 1):
            if c in gold:
                return i
        return None

    rare = max(5, n_chunks // 200)  # a term in at most 0.5% of chunks (or 5) is "rare"
    old = f"OLD: code ? 1 : {OLD_WEIGHT_PLAIN} on bm25 top {OLD_DEPTH_PLAIN}"
    new = f"KBPACK: convex {DENSE_WEIGHT:g} minmax(cos) + bm25/max"
    rules: dict[str, Callable[..., list[int]]] = {
        "dense": lambda q, de, bm, dfs: de,
        new: lambda q, de, bm, dfs: by_scores(de, bm, dfs[1], DENSE_WEIGHT),
        "convex 0.7": lambda q, de, bm, dfs: by_scores(de, bm, dfs[1], 0.7),
        "convex 0.9": lambda q, de, bm, dfs: by_scores(de, bm, dfs[1], 0.9),
        "bm25": lambda q, de, bm, dfs: bm,
        "rrf 1:1": lambda q, de, bm, dfs: fuse(de, bm, 1.0),
        "rrf 1:0.5": lambda q, de, bm, dfs: fuse(de, bm, 0.5),
        "rrf 1:0.25": lambda q, de, bm, dfs: fuse(de, bm, 0.25),
        "code ? 1 : 0.5": lambda q, de, bm, dfs: fuse(
            de, bm, 1.0 if code_like_terms(q.query) else 0.5
        ),
        "code ? 1 : 0.25": lambda q, de, bm, dfs: fuse(
            de, bm, 1.0 if code_like_terms(q.query) else 0.25
        ),
        "code ? 1 : 0.1": lambda q, de, bm, dfs: fuse(
            de, bm, 1.0 if code_like_terms(q.query) else 0.1
        ),
        "code ? 1 : 0": lambda q, de, bm, dfs: fuse(
            de, bm, 1.0 if code_like_terms(q.query) else 0.0
        ),
        f"code|rare(df<={rare}) ? 1 : 0.25": lambda q, de, bm, dfs: fuse(
            de, bm, 1.0 if code_like_terms(q.query) or any(d <= rare for d in dfs[0]) else 0.25
        ),
        "rrf 1:1, bm25 top 5 only": lambda q, de, bm, dfs: fuse(de, bm[:5], 1.0),
        old: lambda q, de, bm, dfs: (
            fuse(de, bm, 1.0)
            if code_like_terms(q.query)
            else fuse(de, bm[:OLD_DEPTH_PLAIN], OLD_WEIGHT_PLAIN)
        ),
    }
    ranks: dict[str, dict[str, list[int | None]]] = {}
    for name, rule in rules.items():
        for phrasing in ("doc", "ticket"):
            ranks.setdefault(name, {})[phrasing] = [
                rank_of(rule(q, de, bm, dfs), gold)
                for q, de, bm, gold, dfs in rows
                if q.phrasing == phrasing
            ]

    print(
        f"{len(rows)} questions, {n_chunks} chunks; recall@k and MRR; paired vs dense at k=1 and k=8 (wins/losses p)"
    )
    header = (
        f"{'rule':<40} {'phrasing':<7} "
        + " ".join(f"R@{k:<4}" for k in KS)
        + "  MRR    vs dense @1        @8"
    )
    print(header)
    for name in rules:
        for phrasing in ("doc", "ticket"):
            got = ranks[name][phrasing]
            rec = " ".join(f"{np.mean([x is not None and x <= k for x in got]):.2f} " for k in KS)
            mrr = np.mean([1 / x if x else 0 for x in got])
            p1, p8 = paired(got, ranks["dense"][phrasing], (1, 8))
            print(
                f"{name:<40} {phrasing:<7} {rec} {mrr:.3f}  "
                f"+{p1.wins}/-{p1.losses} p={p1.p_value:.3f}  +{p8.wins}/-{p8.losses} p={p8.p_value:.3f}"
            )
    print(f"\npaired: {new} vs {old} (wins = only the new rule finds the needle in the top k)")
    for phrasing in ("doc", "ticket"):
        cells = "  ".join(
            f"@{t.k} +{t.wins}/-{t.losses} p={t.p_value:.3f}"
            for t in paired(ranks[new][phrasing], ranks[old][phrasing], KS)
        )
        print(f"  {phrasing:<7} {cells}")


def by_scores(
    dense: list[int], lexical: list[int], scores: tuple[np.ndarray, dict[int, float]], w: float
) -> list[int]:
    sims, bm25 = scores
    cands = np.union1d(np.asarray(dense, np.int64), np.asarray(lexical, np.int64))
    ids, _ = convex(cands, sims[cands], np.array([bm25.get(int(c), 0.0) for c in cands]), w)
    return ids.tolist()


def fuse(dense: list[int], lexical: list[int], w_lex: float) -> list[int]:
    return [c for c, _ in rrf([dense, lexical], [1.0, w_lex])]


if __name__ == "__main__":
    main()
