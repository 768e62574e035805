"""What a user of ``search()`` gets, refusal included (issue 32): per query, the rank of the
answer in the shipped results and whether the query was answered, on the development set's
questions, its out-of-domain queries and its near misses.

    python bench/shipped_search.py PACK OUT.json [--no-absent]   # measure (any kbpack version)
    python bench/shipped_search.py --compare A.json B.json        # paired tests, A against B

``bench/quality_table.py`` ranks without refusal; this runs ``search(k=20)`` as shipped (hybrid,
the pack's default threshold), so a result the refusal gate hides counts as missed and a
refused question as unanswered. It uses only what every kbpack since 0.2 has (``search``,
``answered``, ``results``), so the same script measures the code before and after a change on
the same pack. ``--no-absent``: words the pack never mentions are reported but refuse nothing
(``Searcher.use_absent``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import kbpack
from kbpack.ops import evaluate as E

ROOT = Path(__file__).resolve().parent.parent
K = 20
SETS = {"ood": "fixtures/eval/ood.jsonl", "near": "fixtures/eval/ood_near.jsonl"}


def measure(pack_path: Path, out: Path, use_absent: bool) -> None:
    questions = E.load_questions(ROOT / "fixtures/eval/questions.jsonl")
    rows: dict[str, dict[str, object]] = {}
    with kbpack.open(pack_path) as pack:
        s = pack.searcher
        if not use_absent:
            s.use_absent = False
        for q in questions:
            resp = s.search(q.query, k=K)
            rank = E.hit_rank([r.content for r in resp.results], q.needle)
            rows[q.id] = {
                "set": q.phrasing,
                "answered": resp.answered,
                "rank": rank,
                "absent": list(getattr(resp, "not_in_pack", [])),
            }
        for name, path in SETS.items():
            for o in E.load_queries(ROOT / path):
                resp = s.search(o.query, k=5)
                rows[o.id] = {
                    "set": name,
                    "answered": resp.answered,
                    "rank": None,
                    "absent": list(getattr(resp, "not_in_pack", [])),
                    "best": min(
                        (r.distance for r in resp.results if r.distance is not None), default=None
                    ),
                }
    out.write_text(json.dumps(rows, indent=0) + "\n", encoding="utf-8")
    report(rows, out.name)


# the near misses by when they were written: nm53-nm104 before the corpus was checked, nm105-
# nm154 before any refusal rule ran on them (fixtures/eval/README.md)
NEAR_PARTS = {"nm01-nm52": (1, 52), "nm53-nm104": (53, 104), "nm105-nm154": (105, 154)}


def near_part(qid: str, part: str) -> bool:
    lo, hi = NEAR_PARTS[part]
    return qid.startswith("nm") and lo <= int(qid[2:]) <= hi


def report(rows: dict[str, dict[str, object]], label: str) -> None:
    print(f"{label}: shipped search (hybrid, refusal on, k = {K} for questions, 5 for the rest)")
    print("| phrasing | R@1 | MRR | R@20 | falsely refused |")
    print("|---|---|---|---|---|")
    for p in ("doc", "ticket"):
        mine = [r for r in rows.values() if r["set"] == p]
        ranks = [r["rank"] for r in mine]  # type: ignore[misc]
        refused = sum(not r["answered"] for r in mine)
        print(
            f"| {p} | {E.recall_at(ranks, 1)} | {E.mrr(ranks)} | "  # type: ignore[arg-type]
            f"{E.recall_at(ranks, 20).value:.2f} | {refused}/{len(mine)} |"  # type: ignore[arg-type]
        )
    for name in SETS:
        mine = [r for r in rows.values() if r["set"] == name]
        refused = sum(not r["answered"] for r in mine)
        lo, hi = E.wilson(refused, len(mine))
        flagged = sum(bool(r["absent"]) for r in mine)
        print(
            f"{name}: refused {refused}/{len(mine)} ({refused / len(mine):.0%} [{lo:.2f}, {hi:.2f}]); "
            f"a word not in the pack in {flagged}"
        )
    for part in NEAR_PARTS:
        mine = [r for i, r in rows.items() if near_part(i, part)]
        print(f"  {part}: refused {sum(not r['answered'] for r in mine)}/{len(mine)}")
    asked = [r for r in rows.values() if r["set"] in ("doc", "ticket")]
    flagged = sum(bool(r["absent"]) for r in asked)
    print(f"answerable questions with a word not in the pack: {flagged}/{len(asked)}")


def compare(a_path: Path, b_path: Path) -> None:
    a = json.loads(a_path.read_text(encoding="utf-8"))
    b = json.loads(b_path.read_text(encoding="utf-8"))
    print(f"paired, {a_path.name} against {b_path.name} (+wins/-losses of the first, sign test):")
    for p in ("doc", "ticket"):
        ids = [i for i, r in a.items() if r["set"] == p and i in b]
        tests = E.paired([a[i]["rank"] for i in ids], [b[i]["rank"] for i in ids], (1, 20))
        dm = E.mrr([a[i]["rank"] for i in ids]).value - E.mrr([b[i]["rank"] for i in ids]).value
        cells = ", ".join(f"@{t.k} +{t.wins}/-{t.losses} p={t.p_value:.3g}" for t in tests)
        refused = [(not a[i]["answered"], not b[i]["answered"]) for i in ids]
        print(f"* {p}: {cells}, MRR {dm:+.3f}; falsely refused {_pairs(refused, want=False)}")
    for name in SETS:
        ids = [i for i, r in a.items() if r["set"] == name and i in b]
        refused = [(not a[i]["answered"], not b[i]["answered"]) for i in ids]
        print(f"* {name} refused: {_pairs(refused, want=True)}")
    for part in NEAR_PARTS:
        ids = [i for i in a if near_part(i, part) and i in b]
        refused = [(not a[i]["answered"], not b[i]["answered"]) for i in ids]
        print(f"  * {part} refused: {_pairs(refused, want=True)}")


def _pairs(pairs: list[tuple[bool, bool]], want: bool) -> str:
    """``want``: whether True is the good outcome; wins are pairs where the first is good and
    the second is not."""
    wins = sum((x == want) and (y != want) for x, y in pairs)
    losses = sum((y == want) and (x != want) for x, y in pairs)
    first, second = sum(x for x, _ in pairs), sum(y for _, y in pairs)
    return f"{first} vs {second} (+{wins}/-{losses}, p={E.sign_test(wins, losses):.3g})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs=2, type=Path)
    ap.add_argument("--compare", action="store_true")
    ap.add_argument("--no-absent", action="store_true")
    args = ap.parse_args()
    if args.compare:
        compare(*args.paths)
    else:
        measure(args.paths[0], args.paths[1], not args.no_absent)


if __name__ == "__main__":
    main()
