"""BM25 over the chunk's header as well as its content (issue 32): paired, on the same pack.

    python bench/quality_headers.py OLD.kbpack NEW.kbpack          # development set
    python bench/quality_headers.py --titles OLD.kbpack NEW.kbpack  # title lookups, any pack
    python bench/quality_headers.py --titles --no-refusal OLD.kbpack NEW.kbpack

OLD and NEW hold the same documents, chunks and vectors and differ only in ``/bm25``: OLD
indexes each chunk's content (kbpack 0.2.x), NEW its header (document title and section path,
spec/FORMAT.md 3.4, the text the model embeds before the content) and its content. NEW is OLD
re-written by ``kbpack migrate`` (which re-indexes from the stored text and copies every
vector), so nothing but the lexical index changes.

Development set (OLD and NEW built from fixtures/eval/corpus with the default model): the dense
scores come from OLD (the vectors are the same), BM25 from each; bm25 alone and kbpack's hybrid
(with and without pieces) are ranked on both and compared per phrasing with exact sign tests
(bench/quality_table.py's code, so the rows are that table's).

``--titles`` (any pair of packs, BM25-only ones included): every document title is asked as a
query, and ``search(k=5)`` as shipped is scored by where the first result from a document of
that title lands (rank 1-5, or missed); then the same for each lone-heading chunk's title
(bench/quality_lone.py's question: the page's own ``<h1>`` on SQLite's docs), scored by the
heading's document. ``--no-refusal``: the ranking alone (``search(refuse=False)``); in bm25
mode (and a BM25-only pack) refusal asks each result for a query word in its content, which a
chunk that holds the title only in its header lacks.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

import numpy as np
import quality_table as Q

import kbpack
from kbpack.ops.evaluate import load_questions, mrr, paired, recall_at
from kbpack.pack import format as F
from kbpack.search.searcher import heading_only
from kbpack.text.analyze import tokenize

TITLE_K = 5


def dev(old: Path, new: Path) -> None:
    questions = load_questions(Q.ROOT / "fixtures/eval/questions.jsonl")
    # collect's second pack supplies a second BM25 row per question (bm25_stem): NEW's
    rows = Q.collect(old, new, questions)
    table: dict[str, Q.Rule] = {
        "bm25, content": lambda r: Q.bm25_top(r.bm25).tolist(),
        "bm25, header + content": lambda r: Q.bm25_top(r.bm25_stem).tolist(),  # type: ignore[arg-type]
        "hybrid, pieces, content": lambda r: Q.convex_rank(r.with_pieces, r.bm25, Q.DENSE_WEIGHT),
        "hybrid, pieces, header + content": lambda r: Q.convex_rank(
            r.with_pieces,
            r.bm25_stem,  # type: ignore[arg-type]
            Q.DENSE_WEIGHT,
        ),
        "hybrid, no pieces, content": lambda r: Q.convex_rank(r.cos, r.bm25, Q.DENSE_WEIGHT),
        "hybrid, no pieces, header + content": lambda r: Q.convex_rank(
            r.cos,
            r.bm25_stem,  # type: ignore[arg-type]
            Q.DENSE_WEIGHT,
        ),
    }
    ranks = {
        name: {
            p: [Q.rank_of(rule(r), r.gold) for r in rows if r.question.phrasing == p]
            for p in Q.PHRASINGS
        }
        for name, rule in table.items()
    }
    print(f"{len(rows)} questions, {rows[0].cos.size} chunks")
    print("| BM25 indexes | rule | phrasing | R@1 | R@8 | R@20 | MRR |")
    print("|---|---|---|---|---|---|---|")
    for name in table:
        rule, fields = name.rsplit(", ", 1)
        for p in Q.PHRASINGS:
            r = ranks[name][p]
            print(
                f"| {fields} | {rule} | {p} | {recall_at(r, 1)} | {recall_at(r, 8)} | "
                f"{recall_at(r, 20).value:.2f} | {mrr(r)} |"
            )
    print("\nPaired, header + content against content (+wins/-losses, exact sign test):")
    for rule in ("bm25", "hybrid, pieces", "hybrid, no pieces"):
        cells = []
        for p in Q.PHRASINGS:
            a, b = ranks[f"{rule}, header + content"][p], ranks[f"{rule}, content"][p]
            tests = paired(a, b, (1, 8, 20))
            dm = mrr(a).value - mrr(b).value
            cells.append(
                f"{p}: "
                + ", ".join(f"@{t.k} +{t.wins}/-{t.losses} p={Q.fmt_p(t.p_value)}" for t in tests)
                + f", MRR {dm:+.3f}"
            )
        print(f"* {rule}: " + "; ".join(cells))


def _first_rank(
    pack: kbpack.Pack, query: str, gold: set[int], docs: np.ndarray, refuse: bool
) -> int | None:
    resp = pack.searcher.search(query, k=TITLE_K, refuse=refuse)
    if not resp.answered:
        return None
    for i, res in enumerate(resp.results, 1):
        if int(docs[res.chunk]) in gold:
            return i
    return None


def title_questions(path: Path) -> tuple[list[tuple[str, set[int]]], list[tuple[str, set[int]]]]:
    """(page titles, lone-heading titles), each with the documents that answer it: for a page
    title every document of that title; for a lone heading its own document."""
    with kbpack.open(path) as pack:
        s = pack.searcher
        r = s.r
        n = s.n_chunks()
        docs = np.array([r.value(F.CHUNK_DOCUMENT, c) for c in range(n)])
        by_title: dict[str, set[int]] = defaultdict(set)
        lone: dict[str, set[int]] = defaultdict(set)
        for c in range(n):
            res = s._result(1, c, 0.0, None, None, None, "chunk")
            if res.title.strip():
                by_title[res.title.strip()].add(int(docs[c]))
            if heading_only(tuple(tokenize(res.content)), res):
                title = res.section.split(" > ")[-1] if res.section else res.title
                lone[title].add(int(docs[c]))
    return sorted(by_title.items()), sorted(lone.items())


def titles(old: Path, new: Path, refuse: bool) -> None:
    pages, lone = title_questions(old)
    for what, qs in (("page titles", pages), ("lone-heading titles", lone)):
        ranks: dict[str, list[int | None]] = {}
        for path in (old, new):
            with kbpack.open(path) as pack:
                r = pack.reader
                n = pack.searcher.n_chunks()
                docs = np.array([r.value(F.CHUNK_DOCUMENT, c) for c in range(n)])
                ranks[path.name] = [_first_rank(pack, q, gold, docs, refuse) for q, gold in qs]
        a, b = ranks[new.name], ranks[old.name]
        how = f"search(k={TITLE_K}{'' if refuse else ', refuse=False'})"
        print(f"{old.name} vs {new.name}: {len(qs)} {what} asked, {how}")
        for name, rr in ((old.name, b), (new.name, a)):
            print(
                f"  {name}: its document first {recall_at(rr, 1)}, in the top {TITLE_K} "
                f"{recall_at(rr, TITLE_K)}, MRR {mrr(rr)}"
            )
        tests = paired(a, b, (1, TITLE_K))
        print(
            f"  {new.name} against {old.name}: "
            + ", ".join(f"@{t.k} +{t.wins}/-{t.losses} p={Q.fmt_p(t.p_value)}" for t in tests)
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--titles", action="store_true", help="title lookups instead of the dev set")
    ap.add_argument("--no-refusal", action="store_true", help="titles: rank without refusal")
    args = ap.parse_args()
    if args.titles:
        titles(args.old, args.new, not args.no_refusal)
    else:
        dev(args.old, args.new)


if __name__ == "__main__":
    main()
