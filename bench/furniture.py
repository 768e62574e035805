"""Furniture left in a pack (issue 32, item 3): navigation bars, tables of contents, admonition
sections, blocks repeated across a folder, numbered titles, private-use glyphs in headings.

    python bench/furniture.py PACK [PACK...]

Build each pack BM25-only from a real manual (``kbpack build /usr/share/doc/postgresql-doc-15/html
-o pg.kbpack --no-vectors``): the counts read what the pack holds, so the same script measures a
pack built before and after a change. Per pack:

* navigation chunks: a chunk holding a "Prev ... Next" bar (DocBook's navheader/navfooter,
  Texinfo's "Next: ... Previous: ... Up:"), and those that hold nothing else (under 40
  characters once the bar's words, "|" and the section's own title are taken out);
* table-of-contents chunks: holding "Table of Contents";
* admonition sections: sections titled Note, Tip, Caution, Warning or Important;
* repeated blocks: distinct blocks (runs of non-empty lines, not headings) found in at least
  half of a folder's documents and at least 3 of them (``kbpack/extract/repeated.py``'s rule);
* chunks under 40 characters (issue 32 item 5: at most 1% per corpus);
* numbered or generic titles: documents titled "1. Overview"-style; private-use: section
  titles holding a code point U+E000-U+F8FF.
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path
from posixpath import dirname

import kbpack
from kbpack.extract.html import says_nothing
from kbpack.pack import format as F

_NAV = re.compile(r"(?s)\b(Prev|Previous)\b.*\bNext\b|\bNext\b.*\b(Prev|Previous)\b")
_NAV_WORDS = re.compile(r"\b(Prev|Previous|Next|Up|Home)\b:?|\|")
_ADMONITION = {"note", "tip", "caution", "warning", "important"}
_BLOCK = re.compile(r"[^\n]+(?:\n[^\n]+)*")
_PUA = re.compile("[\ue000-\uf8ff]")
SHORT = 40  # issue 32 item 5: a chunk this short says little on its own


def count(path: Path) -> dict[str, int]:
    with kbpack.open(path, load_model=False) as pack:
        r = pack.searcher.r
        names = r.strings(F.DOC_NAME)
        titles = r.strings(F.DOC_TITLE)
        sec_titles = r.strings(F.SEC_TITLE)
        sec_doc = r.column(F.SEC_DOCUMENT)
        sec_from = r.column(F.SEC_FROM)
        sec_level = r.column(F.SEC_LEVEL)
        chunk_sec = r.column(F.CHUNK_SECTION)
        nav = nav_only = toc = short = 0
        for c in range(len(chunk_sec)):
            text = r.chunk_content(c)
            short += len(text) < SHORT
            if "Table of Contents" in text:
                toc += 1
            if _NAV.search(text):
                nav += 1
                rest = _NAV_WORDS.sub("", text.replace(sec_titles[int(chunk_sec[c])], ""))
                if len("".join(rest.split())) < 40:
                    nav_only += 1
        admonitions = sum(
            1 for t, lv in zip(sec_titles, sec_level, strict=True)
            if lv > 0 and t.strip(" :").casefold() in _ADMONITION
        )  # fmt: skip
        heads: dict[int, set[int]] = defaultdict(set)
        for d, start, lv in zip(sec_doc, sec_from, sec_level, strict=True):
            if lv > 0:
                heads[int(d)].add(int(start))
        folders: dict[str, list[set[str]]] = defaultdict(list)
        for d, name in enumerate(names):
            text = r.text(d)
            blocks = {
                " ".join(m.group().casefold().split())
                for m in _BLOCK.finditer(text)
                if m.start() not in heads[d]
            }
            folders[dirname(name)].append(blocks)
        repeated = 0
        for docs in folders.values():
            if len(docs) < 3:
                continue
            seen: dict[str, int] = defaultdict(int)
            for blocks in docs:
                for b in blocks:
                    seen[b] += 1
            repeated += sum(1 for n in seen.values() if n >= max(3, len(docs) / 2))
    return {
        "documents": len(names),
        "chunks": len(chunk_sec),
        "navigation chunks": nav,
        "navigation-only chunks": nav_only,
        "table-of-contents chunks": toc,
        "admonition sections": admonitions,
        "repeated blocks": repeated,
        f"chunks under {SHORT} characters": short,
        "numbered or generic titles": sum(1 for t in titles if says_nothing(t)),
        "private-use in headings": sum(1 for t in sec_titles if _PUA.search(t)),
    }


def main() -> None:
    packs = [Path(p) for p in sys.argv[1:]]
    rows = {f"{p.parent.name}/{p.name}": count(p) for p in packs}
    keys = list(next(iter(rows.values())))
    print("| pack | " + " | ".join(keys) + " |")
    print("|---|" + "---|" * len(keys))
    for name, row in rows.items():
        print(f"| {name} | " + " | ".join(str(row[k]) for k in keys) + " |")


if __name__ == "__main__":
    main()
