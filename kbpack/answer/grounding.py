"""Is each sentence of an answer supported by the passage it cites? Pure functions, no model.

A sentence is supported when it cites at least one of the numbered sources ``[n]`` and the
cited passages, together,

- hold at least ``MIN_SHARE`` of its content words (``kbpack.text.analyze.tokenize`` terms that are
  not stopwords, compared by Snowball stem so "rotates" matches "rotate"), and
- hold every number and identifier of the sentence (CamelCase, snake_case, dotted.names,
  ``--flags``, paths): a number or a name is where a small model invents things, and one wrong
  digit makes a fluent sentence false while leaving its words in place.

A number or identifier that no retrieved passage holds at all is also *flagged*, whichever
passage the sentence cites.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any

from kbpack.text.analyze import normalize, tokenize
from kbpack.text.stopwords import STOPWORDS

MIN_SHARE = 0.5  # of a sentence's content words its cited passages must hold

# [1], [1, 3], [1][2], [source 2]: the citations the prompt asks for (and near misses of them)
CITATION = re.compile(r"\[(?:sources?\s*)?(\d{1,3}(?:\s*[,;]\s*(?:sources?\s*)?\d{1,3})*)\]", re.I)
# A sentence ends at . ! or ? (and the citations right after it) followed by white space.
_END = re.compile(r"[.!?](?:\s*" + CITATION.pattern + r")*(?=\s)", re.I)
_ABBREVIATIONS = frozenset({"e.g", "i.e", "etc", "vs", "cf", "approx", "no", "fig", "dr", "mr"})
_BULLET = re.compile(r"^\s*(?:[-*•]|\d{1,2}[.)])\s+")

NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,:]\d+)*(?!\w)")
# Identifiers a sentence cannot paraphrase: each must be in the cited text as written (up to
# case and Unicode compatibility forms).
IDENTIFIER = re.compile(
    r"(?<![\w.-])--?[A-Za-z][\w-]*"  # --flags, -k
    r"|(?<![\w.])(?:~|\.{1,2})?/[\w.-]+(?:/[\w.-]+)*/?"  # /etc/passwd, ~/x, ./run.sh
    r"|\b[\w-]+(?:/[\w.-]+){2,}"  # a/b/c
    r"|\b[\w-]+/[\w-]+\.\w+"  # dir/file.ext
    r"|\b[A-Za-z_][\w-]*(?:\.[A-Za-z_][\w-]*)+"  # os.path.join, cookies.txt
    r"|\b\w*[A-Za-z0-9]_\w+"  # snake_case, ZIP_DEFLATED
    r"|\b[A-Za-z]*[a-z][A-Z][A-Za-z0-9]*"  # CamelCase, getItem
)
_NUMBER_WORDS = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
    "twenty",
]


@dataclass
class SentenceCheck:
    text: str  # as the model wrote it, citations included
    citations: list[int]
    supported: bool
    why: str  # "supported", or what is missing

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Grounding:
    sentences: list[SentenceCheck]
    # numbers and identifiers that appear in no retrieved passage
    flagged: list[dict[str, Any]] = field(default_factory=list)

    @property
    def supported(self) -> int:
        return sum(s.supported for s in self.sentences)


def split_sentences(text: str) -> list[str]:
    """The sentences of ``text``, each with the citations written right after it. Lines (list
    items, paragraphs) are sentences of their own; a line of citations only joins the one
    before."""
    out: list[str] = []
    for line in text.splitlines():
        line = _BULLET.sub("", line).strip()
        start = 0
        for m in _END.finditer(line):
            before = line[start : m.start()].rsplit(None, 1)
            if before and before[-1].lower().lstrip("(") in _ABBREVIATIONS:
                continue
            out.append(line[start : m.end()].strip())
            start = m.end()
        out.append(line[start:].strip())
    sentences: list[str] = []
    for s in out:
        if not s:
            continue
        if sentences and not re.search(r"\w", strip_citations(s)):
            sentences[-1] = f"{sentences[-1]} {s}"  # "... [1]" on a line of its own
        else:
            sentences.append(s)
    return sentences


def citations(sentence: str) -> list[int]:
    """The source numbers a sentence cites, in order, each once."""
    found = [int(n) for m in CITATION.finditer(sentence) for n in re.findall(r"\d+", m.group(1))]
    return list(dict.fromkeys(found))


def strip_citations(sentence: str) -> str:
    return " ".join(CITATION.sub(" ", sentence).split())


def numbers(text: str) -> list[str]:
    """Numbers written with digits, thousands separators dropped ("1,000" -> "1000")."""
    out = []
    for m in NUMBER.finditer(strip_citations(text)):
        n = m.group()
        if re.fullmatch(r"\d{1,3}(,\d{3})+", n):
            n = n.replace(",", "")
        out.append(n)
    return list(dict.fromkeys(out))


def identifiers(text: str) -> list[str]:
    found = (m.group().rstrip(".-/") for m in IDENTIFIER.finditer(strip_citations(text)))
    return list(dict.fromkeys(i for i in found if i.lower() not in _ABBREVIATIONS and i))


@lru_cache(maxsize=1)
def _stemmer() -> Any:
    import snowballstemmer  # a kbpack dependency (build --analyzer snowball-english)

    return snowballstemmer.stemmer("english")


def content_words(text: str) -> set[str]:
    """Stems of the words that carry meaning: no stopwords, no numbers, no one-letter words.
    A compound (``journal_mode``, ``--http2``) counts by its parts, which ``tokenize`` emits
    after it: identifiers are checked whole, elsewhere."""
    words = {
        t
        for t in tokenize(strip_citations(text))
        if t.isalnum() and t not in STOPWORDS and len(t) > 1 and not t.isdigit()
    }
    stem = _stemmer()
    return {str(stem.stemWord(w)) if w.isalpha() else w for w in words}


@dataclass(frozen=True)
class _Passage:
    """What the checks need of one passage, computed once."""

    norm: str
    words: frozenset[str]
    numbers: frozenset[str]

    @classmethod
    def of(cls, text: str) -> _Passage:
        nums = set(numbers(text))
        for i, word in enumerate(_NUMBER_WORDS):  # "seven fields" supports "7 fields"
            if re.search(rf"\b{word}\b", text, re.I):
                nums.add(str(i))
        return cls(_norm(text), frozenset(content_words(text)), frozenset(nums))

    def holds(self, identifier: str) -> bool:
        return _norm(identifier) in self.norm


def _norm(text: str) -> str:
    return normalize(unicodedata.normalize("NFKC", text))


def check_sentence(sentence: str, passages: Sequence[_Passage]) -> SentenceCheck:
    """``passages[i]`` is source ``[i + 1]``."""
    cited = citations(sentence)
    if not cited:
        return SentenceCheck(sentence, cited, False, "no citation")
    bad = [n for n in cited if not 1 <= n <= len(passages)]
    if bad:
        return SentenceCheck(
            sentence, cited, False, f"cites [{bad[0]}], not one of the {len(passages)} sources"
        )
    sources = [passages[n - 1] for n in cited]
    label = "".join(f"[{n}]" for n in cited)
    for num in numbers(sentence):
        if not any(num in p.numbers for p in sources):
            return SentenceCheck(sentence, cited, False, f"number {num} is not in {label}")
    for ident in identifiers(sentence):
        if not any(p.holds(ident) for p in sources):
            return SentenceCheck(sentence, cited, False, f"{ident} is not in {label}")
    words = content_words(sentence)
    if not words:
        return SentenceCheck(sentence, cited, False, "no content words to check")
    held = {w for w in words if any(w in p.words for p in sources)}
    if len(held) < MIN_SHARE * len(words):
        why = f"{label} holds {len(held)} of its {len(words)} content words"
        return SentenceCheck(sentence, cited, False, why)
    return SentenceCheck(sentence, cited, True, "supported")


def check_answer(answer: str, passage_texts: Sequence[str]) -> Grounding:
    """Check every sentence of ``answer`` against the passages it cites (``passage_texts[i]`` is
    source ``[i + 1]``), and flag numbers and identifiers no passage holds."""
    passages = [_Passage.of(t) for t in passage_texts]
    checks = [check_sentence(s, passages) for s in split_sentences(answer)]
    flagged: list[dict[str, Any]] = []
    for i, s in enumerate(checks):
        for num in numbers(s.text):
            if not any(num in p.numbers for p in passages):
                flagged.append({"text": num, "kind": "number", "sentence": i})
        for ident in identifiers(s.text):
            if not any(p.holds(ident) for p in passages):
                flagged.append({"text": ident, "kind": "identifier", "sentence": i})
    return Grounding(checks, flagged)
