"""The "never mentions" rule's names (issue 32): the rule before and after names known by their
capital and the sentence that asks, paired on the same pack.

    python bench/quality_names.py PACK OUT.json --rule RULE  # shipped search under RULE
    python bench/shipped_search.py --compare A.json B.json     # paired tests of two rules
    python bench/quality_names.py PACK --environment sentence|inside|question   # the exposure

Rules (``RULES``; each switched on in this process only, so the JSON files pair on the same pack
and queries):

* ``rare``: the rule of kbpack 0.3's first issue-32 release: a word the pack never mentions
  counts when it is rare in the query's language (Zipf < 2), and any such word of the query
  refuses it (unless a chunk is within ``NEAR_DISTANCE``);
* ``capital``: ``rare`` plus a word the pack never mentions written with a capital inside a
  sentence, whatever its frequency (``kbpack.search.absent.capitalised_names``; the candidate
  rejected before because of the exposure below);
* ``asking``: ``rare``, but only words in the sentence that asks decide
  (``kbpack.search.absent.deciding_words``);
* ``shipped``: both (``capital`` words, deciding only in the sentence that asks): kbpack now.

``--environment``: every answerable ticket asked again with a product the asker runs and the
pack never mentions: as a sentence of its own before the question ("We run this on NAME. ...",
``sentence``), as an aside inside it ("... (we are on NAME)?", ``inside``), or as part of the
question itself ("... on NAME?", ``question``). NAME is a frequent product (Jenkins, Docker:
only the capital reports them) or a rare one (Heroku: every rule reports it). The share
refused, per rule: the exposure of a rule to questions that name the asker's own setting
(the development tickets seldom do).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import shipped_search
from wordfreq import zipf_frequency

import kbpack
import kbpack.search.gating as gating_module  # where the refusal calls deciding_words
import kbpack.search.words as words_module  # where search calls absent_words
from kbpack.ops import evaluate as E
from kbpack.search import absent as A

RULES = ("rare", "capital", "asking", "shipped")


def rare_absent_words(query: str, in_pack: Callable[[str], bool]) -> list[str]:
    """``kbpack.search.absent.absent_words`` without rule 6 (names by their capital)."""
    words = A.letter_words(query)
    missing = [w for w in words if not in_pack(w)]
    if not missing:
        return []
    lang = A.language(words)
    out = []
    for word in missing:
        z = A._zipf(word, lang)
        if z < A.RARE_ZIPF and not (A._CAMEL.search(word) and z <= 0.0):
            out.append(word)
    return out


def every_word_decides(query: str, words: Sequence[str]) -> list[str]:
    return list(words)


@contextmanager
def rule(name: str) -> Iterator[None]:
    """Search under rule ``name`` (``RULES``) until the block ends."""
    absent, deciding = words_module._absent_words, gating_module.deciding_words
    if name in ("rare", "asking"):
        words_module._absent_words = rare_absent_words  # type: ignore[assignment]
    if name in ("rare", "capital"):
        gating_module.deciding_words = every_word_decides  # type: ignore[assignment]
    try:
        yield
    finally:
        words_module._absent_words = absent  # type: ignore[assignment]
        gating_module.deciding_words = deciding  # type: ignore[assignment]


ENVIRONMENTS = ("Jenkins", "Docker", "Heroku")
TEMPLATES = {
    "sentence": "We run this on {name}. {query}",
    "inside": "{bare} (we are on {name})?",
    "question": "{bare} on {name}?",
}


def environment(pack_path: Path, template: str) -> None:
    questions = [
        q
        for q in E.load_questions(shipped_search.ROOT / "fixtures/eval/questions.jsonl")
        if q.phrasing == "ticket"
    ]
    with kbpack.open(pack_path) as pack:
        s = pack.searcher
        print(f"{len(questions)} tickets, each as {TEMPLATES[template]!r}: refused by")
        print("| NAME | Zipf (en) | " + " | ".join(RULES) + " |")
        print("|---|---|" + "---|" * len(RULES))
        paired = []
        for name in (None, *ENVIRONMENTS):
            cells = []
            by_rule: dict[str, list[bool]] = {}
            for r in RULES:
                with rule(r):
                    refused = by_rule[r] = []
                    for q in questions:
                        bare = q.query.rstrip(" ?.")
                        query = (
                            q.query
                            if name is None
                            else TEMPLATES[template].format(name=name, query=q.query, bare=bare)
                        )
                        refused.append(not s.search(query, k=5).answered)
                cells.append(f"{sum(refused)} ({sum(refused) / len(questions):.0%})")
            zipf = "-" if name is None else f"{zipf_frequency(name, 'en'):.2f}"
            print(f"| {name or '(none)'} | {zipf} | " + " | ".join(cells) + " |", flush=True)
            a, b = by_rule["shipped"], by_rule["rare"]
            fewer = sum(y and not x for x, y in zip(a, b, strict=True))
            more = sum(x and not y for x, y in zip(a, b, strict=True))
            paired.append(
                f"{name or '(none)'}: shipped against rare, refused +{more}/-{fewer} "
                f"(p = {E.sign_test(fewer, more):.2g})"
            )
        print("\n".join(paired))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pack", type=Path)
    ap.add_argument("out", type=Path, nargs="?")
    ap.add_argument("--rule", choices=RULES, default="shipped")
    ap.add_argument("--environment", choices=sorted(TEMPLATES), default=None)
    args = ap.parse_args()
    if args.environment:
        environment(args.pack, args.environment)
        return
    if args.out is None:
        ap.error("OUT.json is needed (or --environment)")
    with rule(args.rule):
        shipped_search.measure(args.pack, args.out, True)


if __name__ == "__main__":
    main()
