"""A candidate for the "never mentions" rule (issue 32): names known by their capital.

    python bench/quality_names.py PACK OUT.json   # shipped search with the candidate on
    python bench/shipped_search.py --compare OUT.json SHIPPED.json

The shipped rule (``kbpack.search.absent``) counts a word the pack never mentions when it is
rare in the query's language (Zipf < 2): names that are also common words (Caddy, Cobra,
Alpine, Homebrew, Insomnia) or frequent enough (Kubernetes 2.25, nginx 2.2, Ansible 2.1) pass.
The candidate (``absent_words(..., names_by_case=True)``) also counts a word the pack never
mentions when it is written with a capital inside the sentence (``capitalised_names``):
acronyms (CPU) and their plurals (PCs) excepted. The rest of the refusal is unchanged (the
distance condition ``NEAR_DISTANCE`` included). This runs ``bench/shipped_search.py``'s
measurement with the candidate switched on in this process only, so the two JSON files pair
on the same pack and queries.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import shipped_search

import kbpack.search.searcher as searcher_module
from kbpack.search.absent import absent_words


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pack", type=Path)
    ap.add_argument("out", type=Path)
    args = ap.parse_args()
    searcher_module.absent_words = functools.partial(absent_words, names_by_case=True)  # type: ignore[assignment]
    shipped_search.measure(args.pack, args.out, True)


if __name__ == "__main__":
    main()
