"""The query's words against the corpus's vocabulary: "did you mean" suggestions, and words the
corpus never mentions (``kbpack.search.absent``). Pure functions of the query and two lookups a
``Corpus`` gives: ``doc_freq(term)`` and ``near_terms(word)``."""

from __future__ import annotations

from collections.abc import Callable

from kbpack.search.absent import absent_words as _absent_words
from kbpack.search.absent import letter_words
from kbpack.search.gating import content_terms
from kbpack.search.typos import Suggestion, best_suggestions, checkable
from kbpack.text.analyze import analyzer, tokenize

# not_in_pack: a word this long one edit from a pack term is that term mistyped ("lgos" for
# logs); a 3-letter word is one edit from too many words to say which (zsh from ssh)
TYPO_MIN_LETTERS = 4

DocFreq = Callable[[str], int]
NearTerms = Callable[[str], dict[str, tuple[int, int]]]


def spelling(query: str, doc_freq: DocFreq, near_terms: NearTerms) -> list[Suggestion]:
    """ "Did you mean" for each plain query word no chunk holds (never applied to the query)."""
    out = []
    for word in content_terms(query):
        if checkable(word) and doc_freq(word) == 0:
            found = best_suggestions(word, near_terms(word))
            if found is not None:
                out.append(found)
    return out


def misses_a_word(query: str, analyzer_name: str | None, doc_freq: DocFreq) -> bool:
    """Some letters-only query word is in no chunk (only then are the word lists read)."""
    terms = analyzer(analyzer_name).terms
    return any(not any(doc_freq(t) > 0 for t in terms(w)) for w in letter_words(query))


def typo_of_pack_word(word: str, near_terms: NearTerms) -> bool:
    """``word`` (of ``TYPO_MIN_LETTERS`` letters or more) is one edit from a term of the corpus
    (a did-you-mean suggestion at distance 1): "jurnal" is journal mistyped, not a name the
    corpus never mentions. Refusing it would contradict the suggestion shown beside it."""
    term = tokenize(word)[:1]
    if not term or len(term[0]) < TYPO_MIN_LETTERS or not checkable(term[0]):
        return False
    found = best_suggestions(term[0], near_terms(term[0]))
    return found is not None and any(d == 1 for _, d, _ in found.did_you_mean)


def absent_words(
    query: str, analyzer_name: str | None, doc_freq: DocFreq, near_terms: NearTerms
) -> list[str]:
    """The query's words the corpus never mentions that are rare in the query's language
    (``kbpack.search.absent``), less the typos of words it holds (``typo_of_pack_word``)."""
    terms = analyzer(analyzer_name).terms
    found = _absent_words(query, lambda w: any(doc_freq(t) > 0 for t in terms(w)))
    return [w for w in found if not typo_of_pack_word(w, near_terms)]
