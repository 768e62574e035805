"""How long does "did you mean" take on a large vocabulary? kbpack.search.typos.near_terms against a
brute-force scan (every term sharing the first letter, edit distance computed for each).

    python bench/typos.py [--terms 300000]

The vocabulary is synthetic (seeded random words of 3-12 letters, English-like letter
frequencies, a few accented letters), sorted as a pack stores it. Both sides must return the
same terms; the script says so and prints the median time per misspelled word and the ratio.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from kbpack.pack.bm25_store import TermLookup
from kbpack.search.typos import max_edits, near_terms, osa_distance

LETTERS = "abcdefghijklmnopqrstuvwxyzé"
WEIGHTS = [8, 1.5, 3, 4, 12, 2, 2, 6, 7, 0.2, 0.8, 4, 2.4, 6.7, 7.5, 1.9, 0.1, 6, 6.3, 9, 2.8,
           1, 2.4, 0.2, 2, 0.1, 0.5]  # fmt: skip
WORDS = ["configuraton", "statisticaly", "tomorow", "sqlte", "elephent", "journl", "chekpoint"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--terms", type=int, default=300_000)
    args = ap.parse_args()
    rng = random.Random(0)
    words: set[str] = set()
    while len(words) < args.terms:
        words.add("".join(rng.choices(LETTERS, WEIGHTS, k=rng.randint(3, 12))))
    vocab = sorted(words, key=lambda w: w.encode())
    lookup = TermLookup.from_terms(vocab)
    ours, brute = [], []
    for word in WORDS:
        t = time.perf_counter()
        got = set(near_terms(word, lookup, lambda row: 1))
        ours.append(time.perf_counter() - t)
        t = time.perf_counter()
        limit = max_edits(word)
        want = {
            v
            for v in vocab
            if v[0] == word[0] and v != word and osa_distance(word, v, limit) <= limit
        }
        brute.append(time.perf_counter() - t)
        assert got == want, word
    a, b = statistics.median(ours), statistics.median(brute)
    print(f"{len(vocab)} terms, {len(WORDS)} misspelled words, same suggestions: yes")
    print(f"brute-force scan  {b * 1000:8.1f} ms median per word")
    print(f"kbpack near_terms {a * 1000:8.1f} ms median per word  ({a / b:.2f}x the scan's time)")


if __name__ == "__main__":
    main()
