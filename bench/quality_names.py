"""A candidate for the "never mentions" rule (issue 32): names known by their capital.

    python bench/quality_names.py PACK OUT.json   # shipped search with the candidate on
    python bench/shipped_search.py --compare OUT.json SHIPPED.json

The shipped rule (``kbpack.search.absent``) counts a word the pack never mentions when it is
rare in the query's language (Zipf < 2): names that are also common words (Caddy, Cobra,
Alpine, Homebrew, Insomnia) or frequent enough (Kubernetes 2.25, nginx 2.2, Ansible 2.1) pass.
The candidate (``candidate_absent_words`` here; rejected, so it is not in ``kbpack``) also
counts a word the pack never mentions when it is written with a capital inside the sentence
(``capitalised_names``): acronyms (CPU) and their plurals (PCs) excepted. The rest of the refusal is unchanged (the
distance condition ``NEAR_DISTANCE`` included). This runs ``bench/shipped_search.py``'s
measurement with the candidate switched on in this process only, so the two JSON files pair
on the same pack and queries.

    python bench/quality_names.py PACK --environment sentence|inside   # the exposure

``--environment``: every answerable ticket asked again after "We run this on NAME. "
(``sentence``) or with "(we are on NAME)" before its question mark (``inside``), NAME a
product the asker runs and the pack never mentions (a frequent one, Jenkins or Docker, that
only the candidate reports, and a rare one, Heroku, that the shipped rule reports too): the
share refused by the shipped rule and by the candidate. A question that names the asker's
environment is the candidate's risk; the development tickets seldom do.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import shipped_search
from wordfreq import zipf_frequency

import kbpack
import kbpack.search.words as searcher_module  # where search calls absent_words
from kbpack.ops import evaluate as E
from kbpack.search import absent as A
from kbpack.search.absent import absent_words

_SENTENCE_END = re.compile(r"[.!?:;…]['\"”’)\]]*$")
_ACRONYM_PLURAL = re.compile(r"[A-Z]{2,}s")


def capitalised_names(query: str) -> list[str]:
    """Letters-only words written with a capital inside a sentence (not its first word, nor
    the first after ``.`` ``!`` ``?`` ``:`` ``;``): the way English and Italian mark a proper
    noun. Words in capitals (CPU, HTTP) and their plurals (PCs, URLs) are acronyms, left out."""
    out: dict[str, None] = {}
    raw = query.split()
    for i, token in enumerate(raw):
        word = A._POSSESSIVE.sub("", A._EDGE.sub("", token))
        if not word.isalpha() or i == 0 or _SENTENCE_END.search(raw[i - 1]):
            continue
        if word[0].isupper() and not word.isupper() and not _ACRONYM_PLURAL.fullmatch(word):
            out.setdefault(word, None)
    return list(out)


def candidate_absent_words(query: str, in_pack: Callable[[str], bool]) -> list[str]:
    """``kbpack.search.absent.absent_words`` plus the candidate: a capitalised word
    (``capitalised_names``) the pack never mentions counts whatever its frequency."""
    words = A.letter_words(query)
    missing = [w for w in words if not in_pack(w)]
    if not missing:
        return []
    lang = A.language(words)
    named = set(capitalised_names(query))
    out = []
    for word in missing:
        z = A._zipf(word, lang)
        if A._CAMEL.search(word) and z <= 0.0:
            continue  # rule 5: the user's own identifier
        if z < A.RARE_ZIPF or word in named:
            out.append(word)
    return out


ENVIRONMENTS = ("Jenkins", "Docker", "Heroku")
# the asker's setting as a sentence of its own, and inside the question
TEMPLATES = {"sentence": "We run this on {name}. {query}", "inside": "{bare} (we are on {name})?"}


def environment(pack_path: Path, template: str) -> None:
    questions = [
        q
        for q in E.load_questions(shipped_search.ROOT / "fixtures/eval/questions.jsonl")
        if q.phrasing == "ticket"
    ]
    shipped = absent_words
    candidate = candidate_absent_words
    with kbpack.open(pack_path) as pack:
        s = pack.searcher
        print(f"{len(questions)} tickets, each as {TEMPLATES[template]!r}: refused by")
        print("| NAME | Zipf (en) | shipped rule | candidate |")
        print("|---|---|---|---|")
        for name in (None, *ENVIRONMENTS):
            cells = []
            for rule in (shipped, candidate):
                searcher_module._absent_words = rule  # type: ignore[assignment]
                refused = 0
                for q in questions:
                    bare = q.query.rstrip(" ?.")
                    query = (
                        q.query
                        if name is None
                        else TEMPLATES[template].format(name=name, query=q.query, bare=bare)
                    )
                    refused += not s.search(query, k=5).answered
                lo, hi = E.wilson(refused, len(questions))
                cells.append(f"{refused} ({refused / len(questions):.0%} [{lo:.2f}, {hi:.2f}])")
            zipf = "-" if name is None else f"{zipf_frequency(name, 'en'):.2f}"
            print(f"| {name or '(none)'} | {zipf} | {cells[0]} | {cells[1]} |")
    searcher_module._absent_words = shipped  # type: ignore[assignment]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pack", type=Path)
    ap.add_argument("out", type=Path, nargs="?")
    ap.add_argument("--environment", choices=sorted(TEMPLATES), default=None)
    args = ap.parse_args()
    if args.environment:
        environment(args.pack, args.environment)
        return
    if args.out is None:
        ap.error("OUT.json is needed (or --environment)")
    searcher_module._absent_words = candidate_absent_words
    shipped_search.measure(args.pack, args.out, True)


if __name__ == "__main__":
    main()
