"""Do copies of one document crowd the results? Top-5 slots taken by a second copy of a passage.

    python bench/duplicates.py [PACK]   # default: builds out/bench/dup.kbpack

The pack holds fixtures/docs and fixtures/eval/corpus together, so `sqlite/datatype3.html`
is in it twice (the same manual shipped twice, as issue 13 found with HTML, PDF and .rst.txt
copies). For every development question: how many of the top 5 results (hybrid, the default
refusal gate) repeat the words of a result above them, whether the needle is in the top 5, and
how many results list other copies (``also``). Run it at any commit to compare: before
copies were collapsed (1aca4eb) it printed 23 duplicate slots over 17 questions.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import kbpack
from kbpack.evaluate import hit_rank, load_questions
from kbpack.lexical import tokenize

ROOT = Path(__file__).resolve().parent.parent


def build(out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(ROOT / "fixtures/docs", Path(tmp) / "docs")
        shutil.copytree(ROOT / "fixtures/eval/corpus", Path(tmp) / "eval")
        subprocess.run(["kbpack", "build", tmp, "-o", str(out), "--quiet"], check=True)


def main() -> None:
    pack_path = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "out/bench/dup.kbpack"
    if not pack_path.exists():
        build(pack_path)
    questions = load_questions(ROOT / "fixtures/eval/questions.jsonl")
    slots = crowded = found = listed = 0
    with kbpack.open(pack_path) as pack:
        for q in questions:
            results = pack.search(q.query, k=5).results
            keys = [tuple(tokenize(r.content)) for r in results]
            repeats = len(keys) - len(set(keys))
            slots += repeats
            crowded += repeats > 0
            found += hit_rank([r.content for r in results], q.needle) is not None
            listed += sum(1 for r in results if getattr(r, "also", None))
    print(f"{pack_path}: {len(questions)} questions, hybrid, top 5")
    print(f"slots taken by a second copy: {slots} (in {crowded} questions)")
    print(f"needle in the top 5: {found}/{len(questions)}")
    print(f"results listing other copies (also): {listed}")


if __name__ == "__main__":
    main()
