"""Would Snowball stemming for BM25 earn its place? Paired on the development set, both phrasings.

    pip install snowballstemmer        # bench only: kbpack does not stem
    python bench/stemming.py PACK      # a pack of fixtures/eval/corpus

Two in-memory BM25 indexes over the pack's chunk contents (k1 = 1.2, b = 0.75, Lucene idf, as
kbpack scores): kbpack's tokens as they are, and the same tokens with every purely alphabetic
one replaced by its Snowball English stem (codes and identifiers stay whole). Each is ranked
alone and fused with the pack's dense scores by kbpack's rule (``kbpack.search.fusion.convex``). Prints
MRR and the paired sign test stem vs plain at k = 1, 4, 8, 20 for each mode and phrasing.
Issue 13's rule: adopt only if it wins on both phrasings, with margin.
"""

from __future__ import annotations

import math
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import snowballstemmer  # bench only

import kbpack
from kbpack.ops.evaluate import load_questions, normalize, paired
from kbpack.search.fusion import convex
from kbpack.text.analyze import tokenize

ROOT = Path(__file__).resolve().parent.parent
K1, B = 1.2, 0.75
_stemmer = snowballstemmer.stemmer("english")
_memo: dict[str, str] = {}


def stem_tokens(text: str) -> list[str]:
    out = []
    for t in tokenize(text):
        if t.isalpha():
            if t not in _memo:
                _memo[t] = _stemmer.stemWord(t)
            out.append(_memo[t])
        else:
            out.append(t)
    return out


class BM25:
    def __init__(self, docs: Sequence[str], tok: Callable[[str], list[str]]) -> None:
        self.tok = tok
        tfs = [Counter(tok(d)) for d in docs]
        self.length = np.array([sum(c.values()) for c in tfs], float)
        self.avg = float(self.length.mean())
        self.n = len(docs)
        self.post: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for i, c in enumerate(tfs):
            for t, f in c.items():
                self.post[t].append((i, f))

    def scores(self, query: str) -> np.ndarray:
        s = np.zeros(self.n)
        for t in set(self.tok(query)):
            postings = self.post.get(t, [])
            df = len(postings)
            idf = math.log1p((self.n - df + 0.5) / (df + 0.5))
            for i, f in postings:
                s[i] += idf * f * (K1 + 1) / (f + K1 * (1 - B + B * self.length[i] / self.avg))
        return s


def mrr(ranks: Sequence[int | None]) -> float:
    return float(np.mean([1 / r if r else 0 for r in ranks]))


def main() -> None:
    qs = load_questions(ROOT / "fixtures/eval/questions.jsonl")
    runs: dict[tuple[str, str], list[int | None]] = defaultdict(list)
    with kbpack.open(sys.argv[1]) as pack:
        contents = [c for _, c in pack.iter_chunk_contents()]
        indexes = {"plain": BM25(contents, tokenize), "stem": BM25(contents, stem_tokens)}
        norm = [normalize(c) for c in contents]
        for q in qs:
            gold = {i for i, c in enumerate(norm) if normalize(q.needle) in c}
            sims = pack.searcher.dense_similarities(q.query)
            dense = np.argsort(-sims, kind="stable")[:100]
            for name, index in indexes.items():
                s = index.scores(q.query)
                lexical = [int(i) for i in np.argsort(-s, kind="stable")[:100] if s[i] > 0]
                cands = np.union1d(dense, np.array(lexical, dtype=np.int64))
                fused, _ = convex(cands, sims[cands], s[cands])
                for mode, order in (("bm25", lexical), ("hybrid", fused.tolist())):
                    rank = next((k + 1 for k, c in enumerate(order[:100]) if c in gold), None)
                    runs[(mode, name)].append(rank)
    for mode in ("bm25", "hybrid"):
        for phrasing in ("doc", "ticket"):
            idx = [i for i, q in enumerate(qs) if q.phrasing == phrasing]
            a = [runs[(mode, "stem")][i] for i in idx]
            b = [runs[(mode, "plain")][i] for i in idx]
            cells = "  ".join(
                f"@{t.k} +{t.wins}/-{t.losses} p={t.p_value:.3f}"
                for t in paired(a, b, (1, 4, 8, 20))
            )
            print(f"{mode:6} {phrasing:6} MRR stem {mrr(a):.3f} plain {mrr(b):.3f}  {cells}")


if __name__ == "__main__":
    main()
