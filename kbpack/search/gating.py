"""The refusal gate's rules, as pure functions of the query, a chunk's text and the corpus's
document frequencies (``kbpack.search.searcher`` applies them; docs/search.md "Refusal").

A candidate is evidence of an answer when its cosine distance is at most the threshold; in
hybrid mode a chunk may also pass on lexical evidence (``IdentifierGate``): it holds every
code-like query term, one of them is rare in the corpus, and the query's content words it holds
carry at least half of the query's IDF weight. A year or an acronym alone ("who won the world
cup in 2018") is not such evidence: the words it does not hold weigh more. In bm25 mode (or a
lexical-only fallback) a chunk must share a content word with the query, not "how" or "the".
A query in a language the model does not read (``foreign_query``: Italian function words and
no English one; the default model is English-only and puts any two Italian texts close) needs
that shared content word too: its distance alone is no evidence.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from kbpack.search.absent import NEAR_DISTANCE, deciding_words
from kbpack.text.analyze import STEM_MARK, analyzer, normalize, tokenize
from kbpack.text.stopwords import ENGLISH, ITALIAN, STOPWORDS

if TYPE_CHECKING:
    from kbpack.search.results import Result

RARE_SHARE = 0.01  # an identifier in at most 1% of chunks (or RARE_MIN) may open the gate
RARE_MIN = 5
EVIDENCE_SHARE = 0.5  # of the query's content-word IDF weight a chunk must hold to pass on words

# An inner capital (PostgreSQL, GitHub) is not code-like: names like these are ordinary words
# in questions and made the gate answer out-of-domain queries (measured by kbpack calibrate).
_CODE_LIKE = re.compile(r"(^[-%.#$@]\S)|_|\d|^[A-Z]{2,}$")

# Function words of one language only ("il", "della" vs "the", "what"; "a", "in", "no" are
# both), of two letters or more: "-l" in "ls -l" tokenizes to "l" too, and is no Italian.
_ITALIAN_ONLY = frozenset(w for w in ITALIAN - ENGLISH if len(w) > 1)
_ENGLISH_ONLY = frozenset(w for w in ENGLISH - ITALIAN if len(w) > 1)


def code_like_terms(query: str) -> list[str]:
    """Query words that look like identifiers or codes: they make lexical evidence decisive."""
    words = [w.strip("\"'`()[]{},;:!?") for w in query.split()]
    return [w for w in words if w and _CODE_LIKE.search(w)]


def heading_only(words: Sequence[str], result: Result) -> bool:
    """A chunk whose words are all words of its own heading path or document title (a heading
    and a rule of dashes, say) is no answer on its own."""
    heading = set(tokenize(result.section)) | set(tokenize(result.title))
    return not words or set(words) <= heading


def foreign_query(query: str) -> bool:
    """The query is written in a language the default model does not read: it holds an Italian
    function word and no English one. A bare identifier or keyword query holds neither."""
    tokens = set(tokenize(query))
    return not tokens.isdisjoint(_ITALIAN_ONLY) and tokens.isdisjoint(_ENGLISH_ONLY)


def content_terms(query: str) -> list[str]:
    """The query's distinct BM25 terms that are not stopwords, in order of appearance."""
    return [t for t in dict.fromkeys(tokenize(query)) if t not in STOPWORDS]


def analyzed_content_terms(query: str, analyzer_name: str | None) -> list[str]:
    """``content_terms`` under a pack's analyzer: its stem terms too, except stopwords' stems."""
    terms = dict.fromkeys(analyzer(analyzer_name).terms(query))
    return [t for t in terms if t.removeprefix(STEM_MARK) not in STOPWORDS]


def shares_content_word(content: str, words: set[str], analyzer_name: str | None) -> bool:
    """``content`` holds one of ``words`` (the query's ``analyzed_content_terms``)."""
    return not words.isdisjoint(analyzer(analyzer_name).terms(content))


def idf(df: int, n: int) -> float:
    """BM25's (Lucene's) idf; a term no chunk holds weighs the most."""
    return float(np.log1p((n - df + 0.5) / (df + 0.5)))


@dataclass(frozen=True)
class IdentifierGate:
    """Lexical evidence that lets a hybrid result through whatever its distance.

    ``codes``: the query's code-like terms (one of them rare in the pack); ``weights``: the IDF of
    each content word of the query (stopwords left out). A chunk opens the gate when it holds
    every code as whole tokens and the content words it holds weigh at least ``EVIDENCE_SHARE``
    of the total: the identifier must be what the question is about, not a detail of it.
    """

    codes: tuple[str, ...]
    weights: tuple[tuple[str, float], ...]

    def opens(self, content: str) -> bool:
        # every token of a text is a substring of its normalised form (``tokenize``): a code
        # token that is not one is not among its tokens, and most candidates of a search are
        # turned away here without running the tokenizer's regular expression over them
        text = normalize(content)
        if not all(t in text for code in self.codes for t in tokenize(code)):
            return False
        tokens = set(tokenize(content))
        if not all(set(tokenize(code)) <= tokens for code in self.codes):
            return False
        total = sum(w for _, w in self.weights)
        held = sum(w for t, w in self.weights if t in tokens)
        return held >= EVIDENCE_SHARE * total


def gate_terms(
    query: str,
    n_chunks: int,
    doc_freq: Callable[[str], int],
    header_freq: Callable[[str], int] | None = None,
) -> list[str]:
    """The code-like query terms that may open the refusal gate, or [] when none may.

    They may when at least one of them is rare in the corpus (in at most ``RARE_SHARE`` of the
    chunks, or ``RARE_MIN`` chunks): a rare identifier typed exactly is an answer; an acronym
    found everywhere (NULL, JSON) is not evidence of one. The chunks whose header (document
    title, section path) holds the term are not counted (``header_freq``): the postings count
    a document's title word in each of its chunks, and "FAQ", the title of a 70-chunk page,
    is in the text of 8 chunks.
    """
    codes = code_like_terms(query)
    if not codes:
        return []
    limit = max(RARE_MIN, RARE_SHARE * n_chunks)
    for code in codes:
        whole = tokenize(code)[:1]
        if not whole:
            continue
        df = doc_freq(whole[0])
        titled = header_freq(whole[0]) if header_freq is not None and df > limit else 0
        if df > 0 and df - titled <= limit:
            return codes
    return []


def identifier_gate(
    query: str,
    n_chunks: int,
    doc_freq: Callable[[str], int],
    header_freq: Callable[[str], int] | None = None,
) -> IdentifierGate | None:
    """The query's lexical evidence rule, or None when no code-like term of it is rare here."""
    codes = gate_terms(query, n_chunks, doc_freq, header_freq)
    if not codes:
        return None
    weights = tuple((t, idf(doc_freq(t), n_chunks)) for t in content_terms(query))
    return IdentifierGate(tuple(codes), weights)


def absent_vetoes(query: str, not_in_pack: Sequence[str], dist: dict[int, float]) -> bool:
    """A word the pack never mentions, in the sentence the query asks (``deciding_words``),
    refuses the query unless some candidate is at most ``NEAR_DISTANCE`` from it (none is,
    without distances: bm25 mode)."""
    if not deciding_words(query, not_in_pack):
        return False
    return min(dist.values(), default=2.0) > NEAR_DISTANCE


def answering(
    ordered: Iterable[int], evidence: Callable[[int], bool], answerer: Callable[[int], int]
) -> set[int]:
    """Which parts of the corpus (a pack set: each pack) answer the query: those of which one
    ranked candidate is evidence of an answer (issue 32: refusal decides per query)."""
    out: set[int] = set()
    for c in ordered:
        who = answerer(c)
        if who not in out and evidence(c):
            out.add(who)
    return out
