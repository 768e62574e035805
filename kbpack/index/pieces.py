"""Chunk -> sentence pieces: the finer vector level below the chunk ("small-to-big" retrieval).

A chunk holds up to a model window of text; a question usually matches one or two of its
sentences, and a chunk vector averages that sentence with everything around it. So each chunk
is also cut into *pieces* of about one to a few sentences (``PIECE_MIN_CHARS`` to
``PIECE_MAX_CHARS`` characters), each piece is embedded with the chunk's header, and dense
search scores a chunk by its own cosine plus half its best piece's (``kbpack/search/dense.py``). Search
still returns chunks: pieces only make the chunk easier to find.

The cut (spec/FORMAT.md, ``/pieces``): the chunk's content is split into blocks (paragraphs,
code blocks, tables) as the chunker does, prose blocks at sentence ends and code and tables at
line ends; units are then packed greedily in order into pieces that grow until they reach
``PIECE_MIN_CHARS`` without passing ``PIECE_MAX_CHARS``. A unit longer than
``PIECE_MAX_CHARS`` is cut at spaces into parts of at most that length (a single word longer
than that stays whole). A last piece shorter than the minimum joins the one before when the
two fit in the maximum. A chunk that yields one piece has none: that piece would be the chunk
itself, and the chunk's own vector already scores it.

Offsets are found, never accumulated: each piece is ``[start, end)`` into the canonical text,
inside its chunk, trimmed of whitespace, in order and not overlapping.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from kbpack.index.chunk import _blocks, _split, embedded_text
from kbpack.pack.format import PIECE_MAX_CHARS as PIECE_MAX_CHARS
from kbpack.pack.format import PIECE_MIN_CHARS as PIECE_MIN_CHARS
from kbpack.pack.format import PIECE_RULE as PIECE_RULE
from kbpack.pack.format import PIECE_WEIGHT as PIECE_WEIGHT

# On: bench/pieces.py measured a win on both phrasings of the development set (docs/quality.md)
DEFAULT_PIECES = True

_WORDS = re.compile(r"\S+")


@dataclass(frozen=True)
class Piece:
    chunk: int  # index of the chunk in the list given to ``pieces_of``
    start: int  # code points into the document's canonical text
    end: int


def cut_pieces(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """The pieces of the chunk ``text[start:end]`` as ``[(from, to), ...]``; [] for one piece."""
    units: list[tuple[int, int]] = []
    for s, e, level in _blocks(text, start, end):
        for a, b in _split(text, s, e, level):  # SENTENCE (prose) or LINE (code, tables)
            units.extend(_at_spaces(text, a, b))
    pieces: list[tuple[int, int]] = []
    open_: tuple[int, int] | None = None
    for a, b in units:
        if open_ is None:
            open_ = (a, b)
        elif open_[1] - open_[0] < PIECE_MIN_CHARS and b - open_[0] <= PIECE_MAX_CHARS:
            open_ = (open_[0], b)
        else:
            pieces.append(open_)
            open_ = (a, b)
    if open_ is not None:
        if (
            pieces
            and open_[1] - open_[0] < PIECE_MIN_CHARS
            and open_[1] - pieces[-1][0] <= PIECE_MAX_CHARS
        ):
            pieces[-1] = (pieces[-1][0], open_[1])
        else:
            pieces.append(open_)
    return pieces if len(pieces) > 1 else []


def _at_spaces(text: str, a: int, b: int) -> list[tuple[int, int]]:
    """``[a, b)`` as parts of at most ``PIECE_MAX_CHARS`` cut at whitespace (one part if short;
    a single word longer than the maximum stays whole)."""
    if b - a <= PIECE_MAX_CHARS:
        return [(a, b)]
    parts: list[tuple[int, int]] = []
    s = e = -1
    for m in _WORDS.finditer(text, a, b):
        if s < 0:
            s, e = m.span()
        elif m.end() - s <= PIECE_MAX_CHARS:
            e = m.end()
        else:
            parts.append((s, e))
            s, e = m.span()
    if s >= 0:
        parts.append((s, e))
    return parts


def pieces_of(text: str, chunks: Sequence[tuple[int, int]]) -> list[Piece]:
    """Every piece of a document's chunks (``(start, end)`` each), in chunk order."""
    return [Piece(i, a, b) for i, (s, e) in enumerate(chunks) for a, b in cut_pieces(text, s, e)]


def piece_texts(text: str, headers: Sequence[str], pieces: Sequence[Piece]) -> list[str]:
    """The texts embedded for ``pieces``: the chunk's header + ``"\\n\\n"`` + the piece."""
    return [embedded_text(headers[p.chunk], text[p.start : p.end]) for p in pieces]
