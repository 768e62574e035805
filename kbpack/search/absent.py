""" "The pack never mentions X": query words that no chunk holds and that are rare in the
query's language, the mark of a question about a neighbouring tool or product (issue 32).

The rule (docs/search.md (Refusal), spec/JSON.md ``not_in_pack``), applied to each word of the query
as typed (split on white space; quotes and brackets stripped from both ends, sentence
punctuation from the end, then a possessive ``'s``):

1. the word is letters only (``str.isalpha``): numbers, dates, versions (``boto3``) and
   identifiers with joiners (``gzip.BadGzipFile``, ``systemd-nspawn``) never count: they are
   the identifier gate's business, and a typed identifier is often the user's own;
2. no term the pack's analyzer makes of it is in the pack's BM25 vocabulary;
3. its Zipf frequency (``wordfreq``: log10 of occurrences per billion words) in the query's
   language is below ``RARE_ZIPF`` (2: about once in 10 million words). The query's language
   is the one of ``LANGUAGES`` whose Zipf values, summed over the query's letters-only words,
   are highest (English on a tie);
4. it is no typo of a pack word: not 4 letters or more and one edit (did-you-mean's distance
   1) from a term of the pack ("jurnal" for journal; ``Searcher.typo_of_pack_word``);
5. a CamelCase word (a lower-case letter followed by an upper-case one: GitLab, MaxRetries)
   counts only when the frequency lists know it at all (Zipf > 0 in that language): GitLab
   and MariaDB are names people write about; a compound no list has seen (MaxRetries,
   myConfigLoader) is more likely the user's own identifier (a setting, a class) in a question
   the pack can answer.
6. a word written with a capital inside a sentence (``capitalised_names``: not the query's
   first word nor the first after ``.`` ``!`` ``?`` ``:`` ``;``; words in capitals, CPU, and
   their plurals, PCs, are acronyms and left out) counts whatever its Zipf frequency: English
   and Italian writers mark a proper noun so, and a list cannot tell Caddy the web server
   from caddy the box (rules 2, 4 and 5 still apply).

Which of those words refuse the query (``deciding_words``): the ones in the sentence that asks
(sentences end at ``.`` ``!`` ``?`` or an ellipsis, not at a colon: "Heroku: how do I ...?"
asks about Heroku; one ending with ``?`` asks; every sentence when none does), outside
parentheses. A setting
stated beside the question ("We run this on Heroku. How do I ...?", "... (we are on Docker)?")
is reported but decides nothing; a name inside the question it asks ("How do I roll back a
Kubernetes deployment?") decides (docs/quality.md: measured with ``bench/quality_names.py
--environment``).

Why a frequency list and not the pack alone: most query words a pack lacks are ordinary words
("speedup", "codebase") that the pack phrases otherwise; a word rare in the whole language and
absent from the pack is a name (Kubernetes' "liveness", httpie, Bazel, zsh) the pack does not
cover. ``wordfreq`` is maintained frequency data for 40+ languages, not a hand-made list.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence

RARE_ZIPF = 2.0
LANGUAGES = ("en", "it")  # the first wins a tie
# the refusal rule: a query with such a word is refused unless its nearest chunk is at most this
# cosine distance away (the lead measured on the independent sets; docs/search.md (Refusal))
NEAR_DISTANCE = 0.45

# sentence punctuation around a word; a leading "." "-" "$" "%" "@" "#" is part of what was
# typed (.gitignore, --verbose, $HOME): the word is then no letters-only word
_EDGE = re.compile(r"^[\"'`(\[{<“‘«]+|[\"'`)\]}>,;:!?.…”’»]+$")
_POSSESSIVE = re.compile(r"['’]s$", re.IGNORECASE)
_CAMEL = re.compile(r"[a-z][A-Z]")
# a token that ends a sentence, closing quotes and brackets allowed after its mark
_SENTENCE_END = re.compile(r"[.!?:;…]['\"”’)\]]*$")
_ACRONYM_PLURAL = re.compile(r"[A-Z]{2,}s")
_ASKS = re.compile(r"\?['\"”’)\]]*$")
# a sentence of the question (``sentences``): a colon or semicolon does not end one ("Heroku:
# how do I roll back?" asks about Heroku)
_FULL_STOP = re.compile(r"[.!?…]['\"”’)\]]*$")
_PARENTHESES = re.compile(r"\([^()]*\)")


def _zipf(word: str, lang: str) -> float:
    from wordfreq import zipf_frequency  # loads one language's list on first use

    return float(zipf_frequency(word, lang))


def _word(raw: str) -> str:
    return _POSSESSIVE.sub("", _EDGE.sub("", raw))


def letter_words(query: str) -> list[str]:
    """The query's letters-only words as typed, in order, each once (rule 1)."""
    out: dict[str, None] = {}
    for raw in query.split():
        word = _word(raw)
        if word.isalpha():
            out.setdefault(word, None)
    return list(out)


def capitalised_names(query: str) -> list[str]:
    """Letters-only words written with a capital inside a sentence (not its first word, nor
    the first after ``.`` ``!`` ``?`` ``:`` ``;``), the way English and Italian mark a proper
    noun; words in capitals (CPU, HTTP) and their plurals (PCs, URLs) are acronyms, left out
    (rule 6)."""
    out: dict[str, None] = {}
    raw = query.split()
    for i, token in enumerate(raw):
        word = _word(token)
        if not word.isalpha() or i == 0 or _SENTENCE_END.search(raw[i - 1]):
            continue
        if word[0].isupper() and not word.isupper() and not _ACRONYM_PLURAL.fullmatch(word):
            out.setdefault(word, None)
    return list(out)


def sentences(query: str) -> list[list[str]]:
    """The query's sentences, each as its white-space separated tokens: a sentence ends with
    a token whose last mark (before closing quotes or brackets) is ``.`` ``!`` ``?`` or an
    ellipsis."""
    out: list[list[str]] = [[]]
    for token in query.split():
        out[-1].append(token)
        if _FULL_STOP.search(token):
            out.append([])
    return [s for s in out if s]


def deciding_words(query: str, words: Sequence[str]) -> list[str]:
    """Those of ``words`` (``absent_words``) that may refuse the query: the ones in a
    sentence that asks (ends with ``?``), or in any sentence when none asks, never inside
    parentheses. Context stated beside the question is reported, not decisive."""
    asked = sentences(_PARENTHESES.sub(" ", query))
    asking = [s for s in asked if _ASKS.search(s[-1])] or asked
    inside = {_word(t) for s in asking for t in s}
    return [w for w in words if w in inside]


def language(words: Sequence[str]) -> str:
    """The query's language: the one of ``LANGUAGES`` whose Zipf values over ``words`` sum
    highest (the first on a tie)."""
    best, best_sum = LANGUAGES[0], -1.0
    for lang in LANGUAGES:
        total = sum(_zipf(w, lang) for w in words)
        if total > best_sum:
            best, best_sum = lang, total
    return best


def absent_words(query: str, in_pack: Callable[[str], bool]) -> list[str]:
    """The query's words, as typed, that the pack never mentions and that are rare in the
    query's language (the rule above). ``in_pack(word)``: some chunk holds a term the pack's
    analyzer makes of ``word``. The frequency lists are read only when some word is not in
    the pack (a query whose words the pack all holds never loads them)."""
    words = letter_words(query)
    missing = [w for w in words if not in_pack(w)]
    if not missing:
        return []
    _wait_preload()
    lang = language(words)
    named = set(capitalised_names(query))
    out = []
    for word in missing:
        z = _zipf(word, lang)
        if (z < RARE_ZIPF or word in named) and not (_CAMEL.search(word) and z <= 0.0):
            out.append(word)
    return out


_preload: threading.Thread | None = None


def preload() -> None:
    """Start reading the frequency lists in a thread (~0.8 s, once per process) so that a cold
    query reads them while it waits for its model, not after."""
    global _preload
    if _preload is None:
        _preload = threading.Thread(target=_load_lists, name="kbpack-wordfreq", daemon=True)
        _preload.start()


def _load_lists() -> None:
    try:
        for lang in LANGUAGES:
            _zipf("the", lang)
    except Exception:  # raised again, where it matters, by the query's own lookup
        pass


def _wait_preload() -> None:
    if _preload is not None:
        _preload.join()
