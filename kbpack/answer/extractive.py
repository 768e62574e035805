"""The extractive answer: the sentences of the top passages that share the most content words
with the question, quoted as written. No model, so nothing in it can be invented; it is what
``ask`` falls back to when no sentence of a generated answer is supported."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from kbpack.answer.grounding import content_words, split_sentences

TOP_PASSAGES = 3  # the sentences of the best few passages compete
MAX_SENTENCES = 2
MIN_WORDS = 5  # a heading is no answer
MAX_QUOTE_CHARS = 400  # a "sentence" of a table or a code block can be a whole page


@dataclass(frozen=True)
class Quote:
    text: str
    source: int  # the [n] of the passage it is quoted from

    @property
    def cited(self) -> str:
        return f"“{self.text}” [{self.source}]"


def passage_sentences(content: str) -> list[str]:
    """Sentences of a passage: a line break inside a paragraph is wrapping, not an end."""
    joined = re.sub(r"(?<!\n)\n(?!\n)", " ", content)
    return [s for s in split_sentences(joined) if re.search(r"\w", s)]


def extract(
    question: str, passages: Sequence[str], max_sentences: int = MAX_SENTENCES
) -> list[Quote]:
    """The best sentences of ``passages[:TOP_PASSAGES]`` (``passages[i]`` is source
    ``[i + 1]``), best first: the most question words held, a passage ranked higher winning a
    tie. Never empty when a passage is given: its first sentence at worst."""
    want = content_words(question)
    scored: list[tuple[float, int, int, str]] = []
    for n, content in enumerate(passages[:TOP_PASSAGES], 1):
        for i, sentence in enumerate(passage_sentences(content)):
            if len(sentence) > MAX_QUOTE_CHARS or len(sentence.split()) < MIN_WORDS:
                continue
            shared = len(want & content_words(sentence))
            if shared:
                scored.append((shared - 0.1 * (n - 1), n, i, sentence))
    scored.sort(key=lambda x: (-x[0], x[1], x[2]))
    quotes = [Quote(s, n) for _, n, _, s in scored[:max_sentences]]
    if not quotes and passages:
        first = passage_sentences(passages[0]) or [passages[0]]
        quotes = [Quote(first[0][:MAX_QUOTE_CHARS], 1)]
    return quotes
