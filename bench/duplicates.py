"""Do copies of one document crowd the results? Top-5 slots taken by a second copy of a passage.

    python bench/duplicates.py [PACK]   # default: builds out/bench/dup.kbpack

The pack holds fixtures/docs and fixtures/eval/corpus together, so `sqlite/datatype3.html`
is in it twice (an identical copy), plus a PDF copy of every HTML page of the evaluation corpus
printed by headless Chromium (`--print-to-pdf`: real near copies, with the page furniture a
browser adds: date, title, URL, page numbers; skipped when chromium is missing). That is the
same manual shipped as HTML and PDF, as issue 13 found with HTML, PDF and .rst.txt copies.

For every development question, searched twice on the same pack (hybrid, top 5, the default
refusal gate): with the pack's stored copy groups (`/copies`), and without them (the rule of
kbpack 0.2.0: only chunks of identical words collapse). Prints the result slots taken by a
second copy of a passage above (same stored group or same words), whether the needle is in the
top 5 (paired, per phrasing, with a two-sided sign test), and how many results list copies.
Before copies were collapsed at all (1aca4eb) this pack without the PDFs gave 23 duplicate
slots over 17 questions.
"""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from switches import variant  # bench/switches.py (this script's directory is on sys.path)

import kbpack
import kbpack.search.searcher
from kbpack.ops.evaluate import hit_rank, load_questions
from kbpack.text.analyze import tokenize

ROOT = Path(__file__).resolve().parent.parent


def print_pdf_copies(src: Path, out: Path) -> int:
    """PDF copies of the HTML pages under ``src`` (headless Chromium); how many were made."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        return 0
    made = 0
    for page in sorted(src.rglob("*.html")):
        target = out / page.relative_to(src).with_suffix(".pdf")
        target.parent.mkdir(parents=True, exist_ok=True)
        args = ["--headless", "--no-sandbox", "--disable-gpu", f"--print-to-pdf={target}"]
        subprocess.run([chromium, *args, page.resolve().as_uri()], capture_output=True, timeout=120)
        made += target.exists()
    return made


def build(out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(ROOT / "fixtures/docs", Path(tmp) / "docs")
        shutil.copytree(ROOT / "fixtures/eval/corpus", Path(tmp) / "eval")
        made = print_pdf_copies(ROOT / "fixtures/eval/corpus", Path(tmp) / "eval-pdf")
        print(f"{made} PDF copies printed")
        subprocess.run(["kbpack", "build", tmp, "-o", str(out), "--quiet"], check=True)


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact sign test p-value (ties dropped)."""
    n = wins + losses
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(wins, losses) + 1)) / 2**n
    return min(1.0, 2 * tail)


def crowding(searcher: kbpack.search.searcher.Searcher, results: list) -> int:  # type: ignore[type-arg]
    """Results that repeat a result above: the same stored group (read from the pack whether
    or not the search used it) or the same words."""
    groups = searcher.r.copy_groups()
    seen_groups, seen_words, repeats = set(), set(), 0
    for r in results:
        g = int(groups[r.chunk]) if groups is not None and groups[r.chunk] >= 0 else None
        words = tuple(tokenize(r.content))
        repeats += (g is not None and g in seen_groups) or words in seen_words
        seen_words.add(words)
        if g is not None:
            seen_groups.add(g)
    return repeats


def main() -> None:
    pack_path = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "out/bench/dup.kbpack"
    if not pack_path.exists():
        build(pack_path)
    questions = load_questions(ROOT / "fixtures/eval/questions.jsonl")
    with kbpack.open(pack_path) as pack:
        kinds = {"0.2.0": variant(pack.searcher, copies=False), "groups": pack.searcher}
        print(f"{pack_path}: {pack.reader.counts.get('copies', 0)} chunks in copy groups")
        stats = {name: {"slots": 0, "crowded": 0, "listed": 0} for name in ("0.2.0", "groups")}
        found: dict[str, dict[str, bool]] = {"0.2.0": {}, "groups": {}}
        for q in questions:
            for name, s in kinds.items():
                results = s.search(q.query, k=5).results
                repeats = crowding(s, results)
                st = stats[name]
                st["slots"] += repeats
                st["crowded"] += repeats > 0
                st["listed"] += sum(1 for r in results if r.also)
                hit = hit_rank([r.content for r in results], q.needle) is not None
                found[name][q.id] = hit
    print(f"{len(questions)} questions, hybrid, top 5; 0.2.0 rule vs stored groups")
    for name, st in stats.items():
        n_found = sum(found[name].values())
        print(
            f"  {name:6}: slots taken by a second copy {st['slots']} (in {st['crowded']} "
            f"questions); needle in top 5 {n_found}/{len(questions)}; results listing copies "
            f"{st['listed']}"
        )
    for phrasing in sorted({q.phrasing or "-" for q in questions}):
        ids = [q.id for q in questions if (q.phrasing or "-") == phrasing]
        wins = sum(found["groups"][i] and not found["0.2.0"][i] for i in ids)
        losses = sum(found["0.2.0"][i] and not found["groups"][i] for i in ids)
        print(
            f"  needle, {phrasing}: groups {sum(found['groups'][i] for i in ids)}/{len(ids)} vs "
            f"0.2.0 {sum(found['0.2.0'][i] for i in ids)}/{len(ids)}: +{wins}/-{losses}, "
            f"sign test p = {sign_test(wins, losses):.2f}"
        )


if __name__ == "__main__":
    main()
