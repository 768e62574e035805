"""How well does build-time grouping find copies? Precision and recall against exact labels.

    python bench/copies.py PACK [--same MANUAL_RE ...]

PACK is a BM25-only build of real copies, e.g. (nothing of it is committed; apt-installed):

    mkdir -p /tmp/c/r /tmp/c/devref
    cp /usr/share/R/doc/manual/R-{FAQ,data,intro,admin}.{html,pdf} /tmp/c/r/
    cp /usr/share/developers-reference/*.html /usr/share/developers-reference/*.pdf /tmp/c/devref/
    rm /tmp/c/devref/{index,search}.html
    zcat /usr/share/developers-reference/developers-reference.txt.gz > /tmp/c/devref/developers-reference.txt
    kbpack build /tmp/c -o /tmp/real.kbpack --no-vectors

Labels are computed exactly, independently of the MinHash: a pair of chunks of *different*
documents is a real copy when the two documents are copies of one manual (the same name up to
the extension, or any two files under one folder given by ``--same``, e.g. ``devref/``: the
manual split in pages, single-page HTML, PDF and text) and the exact word-3-shingle Jaccard of
the two chunks is at least ``--label-jaccard`` (0.5: mostly the same words; a chunk cut at other
boundaries that overlaps a copy by half is not one passage). Every other pair is not a copy,
including chunks of different manuals that share boilerplate and sections of one manual with
the same frame. Prints, for each MinHash threshold, the pairs linked (same group), precision,
recall and the time fingerprinting and grouping took.
"""

from __future__ import annotations

import argparse
import re
import time
from collections import defaultdict
from pathlib import PurePosixPath

import numpy as np

from kbpack.pack import format as F
from kbpack.pack.copies import SHINGLE, CopyFinder, normal_words
from kbpack.pack.read import PackReader

COMMON = 64  # a shingle in more chunks than this is boilerplate: left out of the exact counts


def same_manual(a: str, b: str, folders: list[str]) -> bool:
    if a == b:
        return False
    pa, pb = PurePosixPath(a), PurePosixPath(b)
    if pa.with_suffix("") == pb.with_suffix(""):
        return True
    return any(a.startswith(f) and b.startswith(f) for f in folders)


def exact_pairs(
    shingles: list[set[tuple[str, ...]]], docs: np.ndarray
) -> dict[tuple[int, int], float]:
    """Exact Jaccard of every pair of chunks of different documents sharing a shingle."""
    holders: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for row, s in enumerate(shingles):
        for x in s:
            holders[x].append(row)
    common: dict[tuple[int, int], int] = defaultdict(int)
    for rows in holders.values():
        if len(rows) > COMMON:
            continue
        for i, a in enumerate(rows):
            for b in rows[i + 1 :]:
                if docs[a] != docs[b]:
                    common[(a, b)] += 1
    return {(a, b): n / (len(shingles[a]) + len(shingles[b]) - n) for (a, b), n in common.items()}


def linked(groups: list[list[int]]) -> set[tuple[int, int]]:
    out = set()
    for g in groups:
        for i, a in enumerate(g):
            for b in g[i + 1 :]:
                out.add((a, b))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("pack")
    ap.add_argument("--same", action="append", default=["devref/"])
    ap.add_argument("--label-jaccard", type=float, default=0.5)
    ap.add_argument("--thresholds", default="0.5,0.6,0.7,0.8,0.9")
    ap.add_argument("--show", type=int, default=0, help="print N wrong pairs at the default")
    args = ap.parse_args()
    r = PackReader(args.pack)
    names = r.strings(F.DOC_NAME)
    doc_of = r.column(F.CHUNK_DOCUMENT)
    n = len(doc_of)
    texts = [r.chunk_content(c) for c in range(n)]
    print(f"{args.pack}: {len(names)} documents, {n} chunks")

    shingles = []
    for t in texts:
        w = normal_words(t)
        shingles.append({tuple(w[i : i + SHINGLE]) for i in range(len(w) - SHINGLE + 1)})
    exact = exact_pairs(shingles, doc_of)
    truth = {
        p
        for p, j in exact.items()
        if j >= args.label_jaccard
        and same_manual(names[doc_of[p[0]]], names[doc_of[p[1]]], args.same)
    }
    print(
        f"labelled copies: {len(truth)} pairs (exact Jaccard >= {args.label_jaccard}, same manual)"
    )

    for th in [float(x) for x in args.thresholds.split(",")]:
        t0 = time.perf_counter()
        finder = CopyFinder(threshold=th)
        for d in range(len(names)):
            rows = np.flatnonzero(doc_of == d)
            finder.add(d, [texts[c] for c in rows])
        t1 = time.perf_counter()
        groups = finder.groups()
        t2 = time.perf_counter()
        got = {p for p in linked(groups.members()) if doc_of[p[0]] != doc_of[p[1]]}
        tp = len(got & truth)
        prec = tp / len(got) if got else 1.0
        rec = tp / len(truth) if truth else 1.0
        members = int(groups.chunk.size)
        print(
            f"threshold {th:.2f}: {groups.n_groups} groups, {members} chunks in groups, "
            f"{len(got)} cross-document pairs linked, precision {prec:.3f}, recall {rec:.3f}; "
            f"fingerprints {1e3 * (t1 - t0) / n:.2f} ms/chunk, grouping {t2 - t1:.2f} s"
        )
        if args.show:
            wrong = sorted(got - truth)[: args.show] + sorted(truth - got)[: args.show]
            for a, b in wrong:
                kind = "FP" if (a, b) in got else "FN"
                print(
                    f"--- {kind} exact J={exact.get((a, b), 0):.2f} {names[doc_of[a]]} / {names[doc_of[b]]}"
                )
                print("  A:", re.sub(r"\s+", " ", texts[a])[:300])
                print("  B:", re.sub(r"\s+", " ", texts[b])[:300])


if __name__ == "__main__":
    main()
