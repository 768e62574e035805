"""Furniture in real manuals: what of a site's navigation, banners and admonition labels ends up
indexed as if it were content (issue 32). One BM25-only pack per corpus, built from the installed
Debian packages as a user would (vectors change nothing counted here), then per corpus:

* navigation chunks: chunks holding a page-navigation bar ("Prev | Up | Next", "Home", "Table
  of Contents" lists); nav-only: those with little else (under 25 words of other text);
* admonition sections: sections titled only "Note", "Tip", "Caution", "Warning", "Important";
* banner chunks: chunks holding a paragraph found in at least half the documents of their
  folder (3 documents at least), the same normalised text;
* numbered titles: documents whose title is a numbered heading ("1. Overview");
* private-use characters in section titles (U+E000-U+F8FF, e.g. a permalink glyph);
* short chunks: under 40 characters, as a share of all (target <= 1%).

    python bench/furniture.py                    # every corpus installed
    python bench/furniture.py --only sqlite3-doc --json

The manuals are third-party: read from /usr/share, never copied into the repository.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kbpack.extract import Limits  # noqa: E402
from kbpack.ops.build import BuildOptions, build  # noqa: E402
from kbpack.pack.read import PackReader  # noqa: E402

OUT = ROOT / "out" / "bench" / "furniture"
CORPORA = {  # name -> (source folder, follow symlinks)
    "postgresql-15-html": (Path("/usr/share/doc/postgresql-doc-15/html"), False),
    "sqlite3-doc": (Path("/usr/share/doc/sqlite3"), True),
    "developers-reference": (Path("/usr/share/developers-reference"), False),
    "r-doc-html": (Path("/usr/share/doc/r-doc-html/manual"), True),
}
NAV = re.compile(r"\b(?:Prev|Previous)\b[^\n]{0,80}\b(?:Up|Home)\b[^\n]{0,80}\bNext\b", re.I)
TOC = re.compile(r"^\s*Table of Contents\s*$", re.M)
ADMONITION = {"note", "tip", "caution", "warning", "important", "danger", "attention", "hint"}
NUMBERED = re.compile(r"^\s*\d+(?:\.\d+)*\.?\s")
PRIVATE_USE = re.compile("[\ue000-\uf8ff]")
WORDS = re.compile(r"\w+")
TINY = 40


def measure(name: str, source: Path, follow: bool) -> dict[str, object]:
    out = OUT / f"{name}.kbpack"
    out.parent.mkdir(parents=True, exist_ok=True)
    opts = BuildOptions(
        sources=[source],
        out=out,
        vectors=False,
        follow_symlinks=follow,
        allow_empty=True,
        limits=Limits(max_pages=3000, timeout_s=600),
    )
    t = time.perf_counter()
    report = build(opts)
    seconds = time.perf_counter() - t
    with PackReader(out) as r:
        names, status = r.strings("/documents/name"), r.strings("/documents/status")
        doc_titles = r.strings("/documents/title")
        titles = r.strings("/sections/title")
        doc_col, start, end = (r.column(f"/chunks/{c}") for c in ("document", "from", "to"))
        texts = {i: r.text(i) for i in range(len(names)) if status[i] == "ok"}
    contents = [texts[int(d)][int(a) : int(b)] for d, a, b in zip(doc_col, start, end, strict=True)]
    # paragraphs repeated across the documents of one folder
    by_folder: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    docs_in: collections.Counter[str] = collections.Counter()
    for i, text in texts.items():
        folder = names[i].rpartition("/")[0]
        docs_in[folder] += 1
        by_folder[folder].update({" ".join(p.split()) for p in text.split("\n\n") if p.strip()})
    banners = {
        para
        for folder, counts in by_folder.items()
        for para, n in counts.items()
        if docs_in[folder] >= 3 and n >= max(3, docs_in[folder] / 2) and len(para) >= 12
    }
    nav_chunks = nav_only = banner_chunks = 0
    for c in contents:
        navs = NAV.findall(c) + TOC.findall(c)
        if navs:
            nav_chunks += 1
            rest = NAV.sub(" ", TOC.sub(" ", c))
            nav_only += len(WORDS.findall(rest)) < 25
        paras = {" ".join(p.split()) for p in c.split("\n\n")}
        banner_chunks += bool(paras & banners)
    return {
        "corpus": name,
        "build_s": round(seconds, 1),
        "documents_ok": report.counts["documents_ok"],
        "chunks": len(contents),
        "navigation_chunks": nav_chunks,
        "navigation_only_chunks": nav_only,
        "admonition_sections": sum(
            1 for t in titles if t.strip().rstrip(":").lower() in ADMONITION
        ),
        "banner_chunks": banner_chunks,
        "banner_paragraphs": len(banners),
        "numbered_titles": sum(1 for i in texts if NUMBERED.match(doc_titles[i] or "")),
        "private_use_in_titles": sum(1 for t in titles if PRIVATE_USE.search(t)),
        "short_chunks_pct": round(
            100 * sum(len(c.strip()) < TINY for c in contents) / max(len(contents), 1), 2
        ),
        "furniture_removed": getattr(report, "furniture", None),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--only", action="append", choices=sorted(CORPORA))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = []
    for name in args.only or CORPORA:
        source, follow = CORPORA[name]
        if not source.is_dir():
            print(f"{name}: {source} not installed (apt-get install it), skipped", file=sys.stderr)
            continue
        rows.append(measure(name, source, follow))
    if args.json:
        print(json.dumps(rows, indent=2, default=str))
        return
    keys = [k for k in rows[0] if k != "corpus"] if rows else []
    print(f"{'':24}" + "".join(f"{r['corpus'][:22]:>24}" for r in rows))
    for k in keys:
        print(f"{k:24}" + "".join(f"{r[k]!s:>24}" for r in rows))


if __name__ == "__main__":
    main()
