"""Lone-heading chunks (issue 32 item 5): what a chunk that is only a heading costs and gives.

    python bench/quality_lone.py PACK [PACK...]

A leaf section with no text of its own ("## Empty", a page whose table of contents the
furniture rules removed) was kept by the chunker as a chunk holding its heading alone, which
``search()`` never shows (``heading_only``); packs built since issue 32's chunking rule have
none, unless a document is nothing but its heading (docs/quality.md, "Short chunks"); this
measures packs built before it. Per pack this prints:

* chunks, chunks under 40 characters, and how many of those are lone headings, so what is
  left short once they are set aside (the issue's <= 1% target);
* whether a lone heading's words are findable without its chunk: its title is in the header
  of another chunk of the same document (the dense side embeds headers), and every one of its
  words is in the BM25 vocabulary of some other chunk of that document;
* asking for the heading itself (the query is the heading's title, the one question such a
  chunk could answer), where the shipped ``search(k=5)`` lands: on a chunk of the same
  document, and on one right after the heading (the chunk that starts first after it in the
  same document: what merging the heading into its next chunk would have returned), or
  refused. It measures the rule in force (hidden) against what merging would offer: when the
  next chunk is already returned, merging gains nothing.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import numpy as np

import kbpack
from kbpack.pack import format as F
from kbpack.search.searcher import heading_only
from kbpack.text.analyze import tokenize

SHORT = 40


def measure(path: Path) -> None:
    with kbpack.open(path) as pack:
        s = pack.searcher
        r = s.r
        n = s.n_chunks()
        docs = np.array([r.value(F.CHUNK_DOCUMENT, c) for c in range(n)])
        starts = np.array([r.value(F.CHUNK_FROM, c) for c in range(n)])
        lone: list[int] = []
        short = 0
        results = {}
        for c in range(n):
            res = s._result(1, c, 0.0, None, None, None, "chunk")
            results[c] = res
            if len(res.content.strip()) < SHORT:
                short += 1
            if heading_only(tuple(tokenize(res.content)), res):
                lone.append(c)
        lone_short = sum(len(results[c].content.strip()) < SHORT for c in lone)
        print(
            f"{path.name}: {n} chunks, {short} under {SHORT} characters ({short / n:.2%}), "
            f"{len(lone)} lone headings ({lone_short} of them short); short once lone headings "
            f"are set aside: {short - lone_short} ({(short - lone_short) / n:.2%})"
        )
        if not lone:
            return
        lone_set = set(lone)
        in_header = in_bm25 = 0
        outcome: Counter[str] = Counter()
        for c in lone:
            res = results[c]
            mine = [o for o in np.flatnonzero(docs == docs[c]).tolist() if o not in lone_set]
            words = set(tokenize(res.content))
            title = res.section.split(" > ")[-1] if res.section else res.title
            if any(title in results[o].section or title == results[o].title for o in mine):
                in_header += 1
            held: set[str] = set()
            for o in mine:
                held |= set(tokenize(results[o].content))
            if words <= held:
                in_bm25 += 1
            after = [o for o in mine if starts[o] >= starts[c]]
            nxt = min(after, key=lambda o: starts[o]) if after else None
            resp = s.search(title, k=5)
            shown = [x.chunk for x in resp.results]
            if not resp.answered or not shown:
                outcome["refused"] += 1
            elif nxt is not None and nxt in shown:
                outcome["the next chunk shown"] += 1
            elif any(docs[x] == docs[c] for x in shown):
                outcome["same document, not the next chunk"] += 1
            else:
                outcome["other documents only"] += 1
        print(
            f"  title in another chunk's header: {in_header}/{len(lone)}; every word in another "
            f"chunk of the document: {in_bm25}/{len(lone)}"
        )
        print(
            "  query = the heading's title, search(k=5): "
            + ", ".join(f"{k} {v}" for k, v in outcome.most_common())
        )
        sample = [results[c] for c in lone[:8]]
        for res in sample:
            print(f"    e.g. {res.doc}: {res.content.strip()[:60]!r}")


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        measure(Path(arg))
