"""Does the refusal gate say no when it should? The identifier gate before and after issue 13.

    python bench/refusal.py [PACK]     # default: builds /tmp/kbpack-eval.kbpack from fixtures/eval

Hybrid search, k = 5, on the development set's answerable questions and out-of-domain queries.
For each query the ranking is computed once (``refuse=False``) and both gates are applied to it:

* old: a result passes below the threshold, or when it holds every code-like query term and
  one of them is rare in the pack (kbpack before issue 13);
* new: the same, but the chunk must also hold content words carrying at least half of the
  query's IDF weight (``kbpack.search.searcher.IdentifierGate``).

Prints, at the default threshold and at each gate's calibrated threshold: out-of-domain queries
refused, answerable questions falsely refused and answered correctly; then the paired sign
test of the two gates on the same queries (refused OOD, answered answerable).
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import kbpack
from kbpack.ops import evaluate as E
from kbpack.search.searcher import IdentifierGate

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = 0.675
K = 5
DEPTH = 200


def main() -> None:
    pack_path = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("/tmp/kbpack-eval.kbpack")
    if not pack_path.exists():
        corpus = ROOT / "fixtures/eval/corpus"
        subprocess.run(
            ["kbpack", "build", str(corpus), "-o", str(pack_path), "--quiet"], check=True
        )
    questions = E.load_questions(ROOT / "fixtures/eval/questions.jsonl")
    oods = E.load_queries(ROOT / "fixtures/eval/ood.jsonl")
    gates: dict[str, tuple[list[E.Gate], list[E.Gate]]] = {"old": ([], []), "new": ([], [])}
    with kbpack.open(pack_path) as pack:
        s = pack.searcher
        for text, needle, kind in [(q.query, q.needle, 0) for q in questions] + [
            (o.query, None, 1) for o in oods
        ]:
            resp = pack.search(text, k=DEPTH, mode="hybrid", refuse=False)
            new = s.identifier_gate(text)
            old = IdentifierGate(new.codes, ()) if new is not None else None  # codes only
            want = E.normalize(needle) if needle else None
            hits = tuple(want is not None and want in E.normalize(r.content) for r in resp.results)
            for name, gate in (("old", old), ("new", new)):
                d = tuple(
                    -math.inf
                    if gate is not None and gate.opens(r.content)
                    else (math.inf if r.distance is None else r.distance)
                    for r in resp.results
                )
                gates[name][kind].append(E.Gate(d, hits))

    print(f"{pack_path}: {len(questions)} answerable, {len(oods)} out-of-domain; hybrid, k={K}")
    print(f"{'gate':<5} {'threshold':<18} {'OOD refused':<13} {'falsely refused':<16} correct")
    outcome: dict[str, tuple[list[bool], list[bool]]] = {}
    for name, (qg, og) in gates.items():
        best = E.recommend(E.sweep(qg, og, E.threshold_grid(), K))
        for label, t in (("default", DEFAULT), ("calibrated", best.threshold if best else None)):
            if t is None:
                continue
            row = E.sweep(qg, og, [t], K)[0]
            print(
                f"{name:<5} {label + f' {t:.3f}':<18} {row.ood - row.bluffed:>2}/{row.ood:<10} "
                f"{row.falsely_refused:>3}/{row.questions:<12} {row.answered_correctly}/{row.questions}"
            )
        outcome[name] = (
            [any(d <= DEFAULT for d in g.distances) for g in qg],
            [not any(d <= DEFAULT for d in g.distances) for g in og],
        )
    for i, what in ((1, "OOD refused"), (0, "answerable answered")):
        by_new, by_old = outcome["new"][i], outcome["old"][i]
        wins = sum(a and not b for a, b in zip(by_new, by_old, strict=True))
        losses = sum(b and not a for a, b in zip(by_new, by_old, strict=True))
        print(
            f"paired at {DEFAULT}: {what}, new vs old: +{wins}/-{losses}, "
            f"p={E.sign_test(wins, losses):.3f}"
        )


if __name__ == "__main__":
    main()
