"""Real documentation trees in: Debian's developers-reference and the R manuals (HTML and PDF).

Builds one pack per corpus from the installed Debian packages, as a user would (BM25-only:
embedding tens of thousands of chunks on a laptop is the embed benchmark's business, and the
vectors change nothing counted here), and prints per corpus: documents ok/failed/skipped with
their reasons, chunks, chunks under 40 characters, chunks that are only a heading or a page
number, duplicate-content groups, the characters of `¶` or navigation text in section paths,
and for every PDF the glued-word rate of kbpack's text beside poppler's ``pdftotext`` (the
peer) from the same run, as a ratio.

Glued-word rate: alphabetic runs of 20 or more letters per 1000 words. English has few such
words ("internationalization" is one), so a run like ``Alistofpackagesinneedofanewmaintainer``
is words an extractor glued together; BM25 cannot find any of them.

    python bench/corpora.py --install   # apt-get install the three packages first (root)
    python bench/corpora.py             # the packages must be installed
    python bench/corpora.py --only developers-reference --pypdf   # + the old engine's rate

The manuals are third-party: they are read from /usr/share, never copied into the repository.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from kbpack.extract import Limits
from kbpack.ops.build import BuildOptions, build
from kbpack.pack.read import PackReader

PACKAGES = ("developers-reference", "r-doc-html", "r-doc-pdf", "poppler-utils")
OUT = Path("out/bench/corpora")
WORD = re.compile(r"[^\W\d_]+")
GLUED = re.compile(r"[A-Za-z]{20,}")
TINY = 40
PAGE_NUMBER = re.compile(r"^(?:page\s+)?\d{1,5}$", re.I)


@dataclass
class Corpus:
    name: str
    source: Path
    follow_symlinks: bool = False
    max_pages: int = 2000
    notes: list[str] = field(default_factory=list)


CORPORA = [
    Corpus("developers-reference", Path("/usr/share/developers-reference")),
    Corpus("r-doc-html", Path("/usr/share/doc/r-doc-html/manual"), follow_symlinks=True),
    Corpus("r-doc-pdf", Path("/usr/share/doc/r-doc-pdf/manual"), True, max_pages=3000),
]


def glued_per_1000(text: str) -> float:
    words = WORD.findall(text)
    return 1000 * sum(1 for w in words if GLUED.fullmatch(w)) / max(len(words), 1)


def pdftotext(path: Path) -> str:
    done = subprocess.run(
        ["pdftotext", "-enc", "UTF-8", str(path), "-"], capture_output=True, check=True
    )
    return done.stdout.decode("utf-8", "replace")


def pypdf_text(path: Path) -> str:
    """The text kbpack read from PDFs before PDFium: pypdf's plain mode (a dev dependency)."""
    from pypdf import PdfReader

    return "\n\n".join(page.extract_text() or "" for page in PdfReader(path).pages)


def install() -> None:
    if shutil.which("apt-get") is None:
        sys.exit("apt-get not found: install " + " ".join(PACKAGES) + " with your package manager")
    subprocess.run(["apt-get", "install", "-y", "-q", *PACKAGES], check=True)


def measure(corpus: Corpus, with_pypdf: bool = False) -> dict[str, object]:
    out = OUT / f"{corpus.name}.kbpack"
    out.parent.mkdir(parents=True, exist_ok=True)
    opts = BuildOptions(
        sources=[corpus.source],
        out=out,
        vectors=False,
        follow_symlinks=corpus.follow_symlinks,
        allow_empty=True,
        limits=Limits(max_pages=corpus.max_pages, timeout_s=600),
    )
    t = time.perf_counter()
    report = build(opts)
    seconds = time.perf_counter() - t
    result: dict[str, object] = {
        "corpus": corpus.name,
        "source": str(corpus.source),
        "build_s": round(seconds, 1),
        "documents": {
            "ok": report.counts["documents_ok"],
            "failed": report.failed,
            "skipped": collections.Counter(s["reason"] for s in report.skipped),
        },
        "filtered": report.filtered,
        "chunks": report.counts["chunks"],
    }
    with PackReader(out) as r:
        names = r.strings("/documents/name")
        status = r.strings("/documents/status")
        titles = r.strings("/sections/title")
        doc_col, sec_col = r.column("/chunks/document"), r.column("/chunks/section")
        start, end = r.column("/chunks/from"), r.column("/chunks/to")
        texts = {i: r.text(i) for i in range(len(names)) if status[i] == "ok"}
        contents = [
            texts[int(d)][int(a) : int(b)] for d, a, b in zip(doc_col, start, end, strict=True)
        ]
        heading_only = sum(
            1
            for c, s in zip(contents, sec_col, strict=True)
            if " ".join(c.split()).endswith(" ".join(titles[int(s)].split()))
            and len(c) <= len(titles[int(s)]) + 12
        )
        paths = {" > ".join(r.section_path(int(s))) for s in set(sec_col.tolist())}
        pdfs = [(names[i], texts[i]) for i in texts if names[i].lower().endswith(".pdf")]
    groups = collections.Counter(" ".join(c.split()) for c in contents)
    result.update(
        {
            "tiny_chunks": sum(1 for c in contents if len(c.strip()) < TINY),
            "page_number_chunks": sum(1 for c in contents if PAGE_NUMBER.match(c.strip())),
            "heading_only_chunks": heading_only,
            "duplicate_groups": sum(1 for n in groups.values() if n > 1),
            "duplicate_chunks": sum(n - 1 for n in groups.values() if n > 1),
            "noise_in_section_paths": sum(
                1 for p in paths if "¶" in p or "Next:" in p or "Previous:" in p
            ),
        }
    )
    glued = []
    for name, text in pdfs:
        path = corpus.source / name
        peer = glued_per_1000(pdftotext(path)) if shutil.which("pdftotext") else None
        ours = glued_per_1000(text)
        row = {
            "pdf": name,
            "kbpack": round(ours, 2),
            "pdftotext": None if peer is None else round(peer, 2),
            "ratio": None if not peer else round(ours / peer, 2),
        }
        if with_pypdf:
            row["pypdf"] = round(glued_per_1000(pypdf_text(path)), 2)
        glued.append(row)
    result["glued_per_1000_words"] = glued
    return result


def show(result: dict[str, object]) -> None:
    docs = result["documents"]
    assert isinstance(docs, dict)
    skipped = docs["skipped"]
    print(f"\n== {result['corpus']}  ({result['source']}, built in {result['build_s']} s)")
    print(
        f"documents  {docs['ok']} ok, {len(docs['failed'])} failed, {sum(skipped.values())} "
        f"skipped, {result['filtered']} filtered"
    )
    for f in docs["failed"]:
        print(f"  failed   {f['name']}: {f['reason']}")
    for reason, n in skipped.most_common():
        print(f"  skipped  {n} x {reason}")
    print(
        f"chunks     {result['chunks']}  (under {TINY} chars: {result['tiny_chunks']}; only a "
        f"heading: {result['heading_only_chunks']}; only a page number: "
        f"{result['page_number_chunks']})"
    )
    print(
        f"duplicates {result['duplicate_groups']} groups, {result['duplicate_chunks']} extra "
        f"chunks;  ¶/navigation in section paths: {result['noise_in_section_paths']}"
    )
    glued = result["glued_per_1000_words"]
    assert isinstance(glued, list)
    if glued:
        print("glued-word runs per 1000 words   kbpack   pdftotext   ratio   (pypdf)")
        for g in glued:
            old = f"{g['pypdf']:>9}" if "pypdf" in g else ""
            print(
                f"  {g['pdf']:<30} {g['kbpack']:>8} {g['pdftotext']!s:>11} {g['ratio']!s:>7}{old}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--install", action="store_true", help="apt-get install the packages")
    parser.add_argument("--only", action="append", help="corpus name (repeatable)")
    parser.add_argument("--json", action="store_true", help="one JSON line per corpus")
    parser.add_argument(
        "--pypdf", action="store_true", help="also the rate of pypdf, kbpack's old PDF engine"
    )
    args = parser.parse_args()
    if args.install:
        install()
    for corpus in CORPORA:
        if args.only and corpus.name not in args.only:
            continue
        if not corpus.source.exists():
            print(
                f"{corpus.source}: missing; run with --install (or apt-get install {corpus.name})"
            )
            continue
        result = measure(corpus, args.pypdf)
        if args.json:
            print(json.dumps(result, default=dict))
        else:
            show(result)


if __name__ == "__main__":
    main()
