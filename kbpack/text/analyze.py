"""The tokenizer and the BM25 analyzers: text -> terms, the same at build and at query.

Every term a pack indexes and every term a query looks up comes from here (spec §3.7).
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

MAX_TOKEN_CHARS = 64

_MEMO_TERMS = 100_000  # BM25Index: query terms remembered

# Han (incl. extensions and compatibility ideographs), Hiragana, Katakana (without the middle
# dot U+30FB), Hangul jamo and syllables. These scripts are written without spaces between
# words, so they are indexed as characters and character bigrams instead of words.
_CJK = (
    "\u1100-\u11ff\u3040-\u30fa\u30fc-\u30ff\u3130-\u318f\u31f0-\u31ff\u3400-\u4dbf"
    "\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0003ffff"
)

_WORD = rf"[^\W_{_CJK}]"  # a letter or number (str.isalnum) that is not CJK

_JOIN = r"[_\-./:'’@\\]"

_TOKEN_RE = re.compile(
    rf"(?P<cjk>[{_CJK}]+)|(?P<sigil>--?|[%$#@])?(?P<word>{_WORD}+(?:{_JOIN}+{_WORD}+)*)"
)

_RUN_RE = re.compile(rf"{_WORD}+")


def normalize(text: str) -> str:
    """NFKC, then casefold, then NFKC again (casefold can leave text that is not NFKC)."""
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())


def tokenize(text: str) -> list[str]:
    """Split text into BM25 terms, in order of appearance (duplicates kept).

    1. ``t = NFKC(casefold(NFKC(text)))``.
    2. Scan ``t`` left to right with this regular expression (Python ``re`` syntax; at each
       position the leftmost alternative that matches wins, matches never overlap)::

           (?P<cjk>[C]+) | (?P<sigil>--?|[%$#@])? (?P<word>W+(?:J+W+)*)

       where ``W`` is a letter or number (a code point whose general category is L*, or that has
       a Unicode Numeric_Type; Python's ``str.isalnum``) that is not in ``C``; ``J`` is a
       joiner, one of ``_ - . / : ' ’ @ \\``; ``C`` is the CJK set: U+1100-11FF, U+3040-30FA,
       U+30FC-30FF, U+3130-318F, U+31F0-31FF, U+3400-4DBF, U+4E00-9FFF, U+AC00-D7AF,
       U+F900-FAFF, U+20000-3FFFF. Everything else (spaces, other punctuation) separates.
    3. For a ``word`` match (a compound such as ``check_same_thread``, ``eu-west-1``,
       ``os.path.join``, ``dell'indice``): emit ``sigil + word`` if a sigil matched (so ``-x``,
       ``--strict``, ``%z``, ``$home`` are findable as typed), then ``word``, then, when the word
       holds more than one ``W+`` run, each run in order (``check``, ``same``, ``thread``).
    4. For a ``cjk`` run of n characters: emit, in order, each character followed by the bigram
       it starts (``東京都`` -> ``東``, ``東京``, ``京``, ``京都``, ``都``).
    5. Every emitted term longer than 64 code points is cut to its first 64.

    No stemming and no stopwords: identifiers, codes and Italian or English words are matched as
    written, up to case and Unicode compatibility forms.
    """
    out: list[str] = []
    for m in _TOKEN_RE.finditer(normalize(text)):
        cjk = m.group("cjk")
        if cjk is not None:
            for i, ch in enumerate(cjk):
                out.append(ch)
                if i + 1 < len(cjk):
                    out.append(cjk[i : i + 2])
            continue
        word = m.group("word")
        sigil = m.group("sigil")
        if sigil:
            out.append((sigil + word)[:MAX_TOKEN_CHARS])
        out.append(word[:MAX_TOKEN_CHARS])
        runs = _RUN_RE.findall(word)
        if len(runs) > 1:
            out.extend(r[:MAX_TOKEN_CHARS] for r in runs)
    return out


PLAIN = "plain"  # the CLI's name for "no analyzer attribute": tokenize() alone

STEM_MARK = "~"  # never part of a tokenize() term (not a letter, number, joiner or sigil)

SNOWBALL_ENGLISH = "snowball-english-1"

ANALYZERS = (PLAIN, SNOWBALL_ENGLISH)

# A word left as a surface term only: mixed case (camelCase, NTFS, iPhone) marks a name or code.
_RAW_WORD_RE = re.compile(rf"{_WORD}+")


class Analyzer:
    """The text -> BM25 terms rule a pack records in ``/bm25`` attribute ``analyzer``.

    ``plain`` (the attribute absent): ``tokenize`` alone. ``snowball-english-1``: every
    ``tokenize`` term, and after each standalone plain word (a ``word`` match without sigil or
    joiner, letters only, written in lower case or with one initial capital) also
    ``"~" + its Snowball English stem``. Surface terms stay, so identifiers, codes and exact
    words match as typed and did-you-mean (which only looks at terms starting with a letter)
    never suggests a stem; the ``~`` terms let "orphan" find "orphaning".
    """

    def __init__(self, name: str | None) -> None:
        if name in (None, PLAIN):
            self.name: str | None = None
            self._stem: Any = None
        elif name == SNOWBALL_ENGLISH:
            import snowballstemmer  # pure Python; only stemmed packs need it

            self.name = name
            self._stem = snowballstemmer.stemmer("english")
        else:
            raise ValueError(
                f"unknown BM25 analyzer {name!r}: this kbpack knows {', '.join(ANALYZERS)}"
            )
        self._memo: dict[str, str] = {}

    @property
    def label(self) -> str:
        return self.name or PLAIN

    def terms(self, text: str) -> list[str]:
        """BM25 terms of ``text`` in order of appearance (duplicates kept)."""
        if self._stem is None:
            return tokenize(text)
        names = {normalize(w) for w in _RAW_WORD_RE.findall(text) if w[1:] != w[1:].lower()}
        out: list[str] = []
        for m in _TOKEN_RE.finditer(normalize(text)):
            start = len(out)
            out.extend(tokenize(m.group()))
            word = m.group("word")
            if (
                word is not None
                and not m.group("sigil")
                and word.isalpha()
                and len(out) - start == 1
                and word not in names
            ):
                out.append(STEM_MARK + self._stem_of(word[:MAX_TOKEN_CHARS]))
        return out

    def _stem_of(self, word: str) -> str:
        stem = self._memo.get(word)
        if stem is None:
            if len(self._memo) >= _MEMO_TERMS:
                self._memo.clear()
            stem = self._memo[word] = str(self._stem.stemWord(word))
        return stem


_ANALYZERS: dict[str | None, Analyzer] = {}


def analyzer(name: str | None) -> Analyzer:
    """The analyzer a pack records (None or absent: plain); ValueError names an unknown one."""
    key = None if name in (None, PLAIN) else name
    if key not in _ANALYZERS:
        _ANALYZERS[key] = Analyzer(key)
    return _ANALYZERS[key]


def query_terms(query: str, analyzer_name: str | None = None) -> list[str]:
    """Distinct terms of a query under the pack's analyzer, in first-seen order (a repeated
    term counts once)."""
    return list(dict.fromkeys(analyzer(analyzer_name).terms(query)))
