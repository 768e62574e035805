"""Document -> chunks with [start, end) offsets into the canonical text.

A chunk lies inside the *own text* of one section (its span minus its child sections' spans),
so it never crosses a section boundary (but for a short leaf joined to its neighbour, below).
A section's heading is one unit with the block after it, so it is never a chunk alone; a
section whose own text is only its heading (and its number) gets no chunk (issue 32; before,
only when it had subsections, whose headers carry its title), unless the document would then
have none. Inside a section, whole blocks (paragraphs, fenced code
blocks, tables) are packed greedily up to the budget. A block alone over budget is split at the
next finer level that the budget allows: prose at sentences, code and tables at lines; then
lines, then words; as the last resort inside a word (reported in ``ChunkResult.problems``).
A chunk under ``SHORT_CHARS`` characters is then joined to the chunk before it, or else the
one after it, in the same run of its section's own text, when the two fit the budget together
(issue 32): packing leaves such tails ("Appendix", a label line, a code block's last brace).
Last, a leaf section whose one chunk is that short ("See Also" and a command name) joins the
chunk before it, or else after it, inside its parent, filed under the parent: the one case
where a chunk holds a child's heading (spec/FORMAT.md 3.4).

The budget is the embedding model's window in tokens of the *embedded text*
(``embedded_text(header, content)``, special tokens included), counted with the model's own
tokenizer, plus an optional character limit on the content. Token counts are estimated from
per-block counts and then confirmed on the exact embedded text, so the tokenizer runs a bounded
number of times per chunk instead of once per candidate cut. Every chunk's embedded text fits by
construction; anything that cannot fit is reported, never truncated silently.

Offsets are found by scanning the text, never accumulated from lengths, and content is trimmed
by moving offsets, never by editing text: ``doc.text[c.start:c.end]`` is the content.
"""

from __future__ import annotations

import bisect
import functools
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kbpack.errors import UsageError
from kbpack.text.document import Document

HEADER_SEPARATOR = " > "
HEADER_MAX_CHARS = 200  # a longer header is cut to 199 characters + "…" (see header())
DEFAULT_MAX_CHARS = 1500  # the content limit when there is no token budget
SHORT_CHARS = 40  # a chunk with less content is joined to a neighbour of its run when both fit

CountTokens = Callable[[str], int]

# Split levels, coarse to fine. A block starts at SENTENCE (prose) or LINE (code, tables).
SENTENCE, LINE, WORD, CHAR = 0, 1, 2, 3

_FENCE_OPEN = re.compile(r"[ \t]{0,3}(`{3,}|~{3,})")
# A sentence ends after terminal punctuation (and closing quotes/brackets) followed by
# whitespace, or after CJK terminal punctuation; a new list item also starts a sentence.
_SENTENCE_END = re.compile(
    r"[.!?…]+[\"'”’)\]»]*(?=\s)|[。！？]+[\"'”’)\]»」』]*|\n(?=[ \t]*(?:[-*+•]|\d{1,3}[.)])[ \t])"
)
_WORDS = re.compile(r"\S+")
_NEWLINE = re.compile("\n")


@dataclass(frozen=True)
class Chunk:
    section: int  # index into doc.sections: the deepest section containing the chunk
    start: int  # code points into doc.text; doc.text[start:end] is the content
    end: int
    page: int | None  # 1-based page where the chunk starts; None without a page map
    tokens: int  # tokens of embedded_text(header, content) per count_tokens; 0 without one


@dataclass(frozen=True)
class ChunkConfig:
    """``window``: token budget of the embedded text, specials included (None: no token budget).
    ``max_chars``: limit on a chunk's content in characters (defaults to 1500 when there is no
    token budget). ``overlap``: how many trailing units (paragraphs, or sentences/lines/words
    inside a split paragraph) of a chunk are repeated at the start of the next one. Default 0:
    overlap only insures against answers split across chunks, and costs precision."""

    window: int | None = 256
    max_chars: int | None = None
    overlap: int = 0


@dataclass
class ChunkResult:
    chunks: list[Chunk]
    problems: list[str]  # one line each: what could not be fitted and what was done instead


def section_path(doc: Document, section: int) -> list[str]:
    """Titles from the level-1 ancestor down to ``section`` (the root is excluded)."""
    titles: list[str] = []
    i = section
    for _ in range(len(doc.sections)):  # bounded: a malformed parent chain cannot loop
        if i <= 0 or i >= len(doc.sections) or doc.sections[i].level == 0:
            break
        titles.append(doc.sections[i].title)
        i = doc.sections[i].parent
    titles.reverse()
    return titles


def header(doc_title: str, path: Sequence[str]) -> str:
    """The contextual header: ``"Title > Section > Subsection"``.

    Whitespace inside each title collapses to single spaces; empty titles are skipped, and so is
    a title equal to the one before it (a document titled by its first heading says it once);
    parts are joined with ``" > "``; a header over 200 characters is cut to its first 199 +
    ``"…"``.
    """
    parts: list[str] = []
    for title in (doc_title, *path):
        t = " ".join(title.split())
        if t and (not parts or parts[-1] != t):
            parts.append(t)
    text = HEADER_SEPARATOR.join(parts)
    if len(text) > HEADER_MAX_CHARS:
        text = text[: HEADER_MAX_CHARS - 1] + "…"
    return text


def chunk_header(doc: Document, chunk: Chunk) -> str:
    """The header of ``chunk`` of ``doc``: ``header(doc.title, section_path(doc, chunk.section))``."""
    return header(doc.title, section_path(doc, chunk.section))


def embedded_text(header: str, content: str) -> str:
    """The text that is embedded: ``header + "\\n\\n" + content`` (just ``content`` when the
    header is empty). Stored text alone is enough to rebuild it."""
    return f"{header}\n\n{content}" if header else content


def chunk_document(
    doc: Document, count_tokens: CountTokens | None, config: ChunkConfig
) -> ChunkResult:
    """Chunk every section's own text. Chunks come back in document order."""
    _check_config(config)
    if doc.status != "ok" or not doc.text.strip() or not doc.sections:
        return ChunkResult(chunks=[], problems=[])
    chunker = _Chunker(doc, count_tokens, config)
    children = _children(doc)
    skipped = _title_only(doc, children)
    for i in range(len(doc.sections)):
        segments = _own_segments(doc, i, children[i])
        if any(doc.text[a:b].strip() for a, b in segments) and i not in skipped:
            chunker.section(i, segments)
    chunks = sorted(chunker.chunks, key=lambda c: (c.start, c.end))
    return ChunkResult(
        chunks=_join_short_leaves(doc, chunks, children, chunker), problems=chunker.problems
    )


def _join_short_leaves(
    doc: Document, chunks: list[Chunk], children: list[list[int]], chunker: _Chunker
) -> list[Chunk]:
    """A leaf section whose one chunk is under ``SHORT_CHARS`` ("See Also" and two command
    names) joins the chunk before it, or else the one after it, when that chunk lies inside
    the leaf's parent and the two fit the budget under the parent's header; the joined chunk's
    section is the parent (the deepest section holding both)."""
    per_section: dict[int, int] = {}
    for c in chunks:
        per_section[c.section] = per_section.get(c.section, 0) + 1
    out = list(chunks)
    i = 0
    while i < len(out):
        c = out[i]
        leaf = doc.sections[c.section]
        parent = leaf.parent
        if (
            c.end - c.start >= SHORT_CHARS
            or c.section == 0
            or children[c.section]
            or per_section[c.section] != 1
            or not 0 <= parent < len(doc.sections)
        ):
            i += 1
            continue
        lo, hi = doc.sections[parent].start, doc.sections[parent].end
        for j, k in ((i - 1, i), (i, i + 1)):
            if j < 0 or k >= len(out):
                continue
            other = out[j] if j < i else out[k]
            if not (lo <= other.start and other.end <= hi):
                continue
            tokens = chunker.fits(parent, out[j].start, out[k].end)
            if tokens is not None:
                joined = Chunk(parent, out[j].start, out[k].end, out[j].page, tokens)
                per_section[c.section] -= 1
                per_section[other.section] -= 1
                per_section[parent] = per_section.get(parent, 0) + 1
                out[j : k + 1] = [joined]
                i = j
                break
        else:
            i += 1
    return out


def _children(doc: Document) -> list[list[int]]:
    children: list[list[int]] = [[] for _ in doc.sections]
    for i, s in enumerate(doc.sections):
        if 0 <= s.parent < len(doc.sections) and s.parent != i:
            children[s.parent].append(i)
    return children


def _title_only(doc: Document, children: list[list[int]]) -> set[int]:
    """Sections that get no chunk: their own text is nothing but their heading (the root's:
    the document's title), unless every section holding text is such a one (a page that is
    only a title keeps it)."""
    own = {i: _own_segments(doc, i, children[i]) for i in range(len(doc.sections))}
    texts = {i: segs for i, segs in own.items() if any(doc.text[a:b].strip() for a, b in segs)}
    out = {i for i, segs in texts.items() if _only_heading(doc, i, segs)}
    if out and out >= set(texts):  # nothing else: keep the leaves (their headings are all)
        out = {i for i in out if children[i]}
    return out


# What may stand before a heading's title: Markdown's marker, its number ("2.1", "3.2.",
# "A.1", "Chapter 4:"); and after it: Markdown's closing hashes or setext underline.
_BEFORE_TITLE = re.compile(
    r"(?:#{1,6}\s+)?(?:(?:chapter\s+)?(?:\d+|[a-z])(?:\.\d+)*[.:]?\s+)?", re.I
)
_AFTER_TITLE = re.compile(r"\s+(?:#+|=+|-+)$")


def _is_heading(text: str, title: str) -> bool:
    """True when ``text`` is nothing but the heading ``title`` (its number and markup allowed)."""
    own = _AFTER_TITLE.sub("", " ".join(text.split()).casefold())
    title = " ".join(title.split()).casefold()
    if not title or not own.endswith(title):
        return False
    return _BEFORE_TITLE.fullmatch(own[: len(own) - len(title)]) is not None


def _only_heading(doc: Document, idx: int, segments: list[tuple[int, int]]) -> bool:
    """True when a section's own text is nothing but its heading (the root's: the document's
    title): a chunk of it would be a title alone, which search never shows (a result whose
    words are all its heading's, ``kbpack.search.gating.heading_only``)."""
    own = " ".join(doc.text[a:b] for a, b in segments)
    title = doc.title if idx == 0 else doc.sections[idx].title
    return _is_heading(own, title)


def title_only_sections(doc: Document) -> set[int]:
    """Sections that get no chunk: nothing of their own but the heading (see the module
    docstring)."""
    return _title_only(doc, _children(doc))


def _check_config(config: ChunkConfig) -> None:
    if config.window is not None and config.window < 1:
        raise UsageError(f"chunk window {config.window}: must be a positive number of tokens")
    if config.max_chars is not None and config.max_chars < 1:
        raise UsageError(f"chunk max_chars {config.max_chars}: must be a positive number")
    if config.overlap < 0:
        raise UsageError(f"chunk overlap {config.overlap}: must be 0 or more")


def _own_segments(doc: Document, idx: int, kids: list[int]) -> list[tuple[int, int]]:
    """The section's span minus its direct children's spans, clipped to the text."""
    sec = doc.sections[idx]
    start, end = max(0, sec.start), min(len(doc.text), sec.end)
    segments: list[tuple[int, int]] = []
    pos = start
    for cs, ce in sorted((doc.sections[k].start, doc.sections[k].end) for k in kids):
        if cs > pos:
            segments.append((pos, min(cs, end)))
        pos = max(pos, ce)
        if pos >= end:
            break
    if pos < end:
        segments.append((pos, end))
    return [(a, b) for a, b in segments if a < b]


def _trim(text: str, s: int, e: int) -> tuple[int, int]:
    while s < e and text[s].isspace():
        s += 1
    while e > s and text[e - 1].isspace():
        e -= 1
    return s, e


def _blocks(text: str, s: int, e: int) -> list[tuple[int, int, int]]:
    """Blocks of a segment as ``(start, end, first split level)``: paragraphs (runs of non-blank
    lines), fenced code blocks (blank lines included, to the closing fence or the segment's
    end) and tables (paragraphs of 2+ lines that all hold a ``|``). Offsets are trimmed of surrounding whitespace."""
    blocks: list[tuple[int, int, int]] = []
    para: list[tuple[int, int]] = []  # trimmed (start, end) of each line of the open paragraph
    fence: tuple[str, int, int] | None = None  # (fence char, fence length, block start)

    def flush_para() -> None:
        if para:
            lines = [text[a:b] for a, b in para]
            # Markdown pipe tables, and tables as extractors write them ("a | b" per row).
            table = len(lines) > 1 and all("|" in ln for ln in lines)
            blocks.append((para[0][0], para[-1][1], LINE if table else SENTENCE))
            para.clear()

    pos = s
    while pos < e:
        nl = text.find("\n", pos, e)
        line_end = e if nl < 0 else nl
        a, b = _trim(text, pos, line_end)
        line = text[pos:line_end]
        if fence is not None:
            char, length, bstart = fence
            stripped = line.strip()
            if stripped and set(stripped) == {char} and len(stripped) >= length:
                blocks.append((bstart, b, LINE))
                fence = None
        elif (m := _FENCE_OPEN.match(line)) is not None:
            flush_para()
            fence = (m.group(1)[0], len(m.group(1)), a)
        elif a == b:
            flush_para()
        else:
            para.append((a, b))
        pos = line_end + 1
    flush_para()
    if fence is not None:  # unclosed fence: the code block runs to the end of the segment
        blocks.append((*_trim(text, fence[2], e), LINE))
    return blocks


def _split(text: str, s: int, e: int, level: int) -> list[tuple[int, int]]:
    """Trimmed, non-empty pieces of [s, e) at ``level`` (SENTENCE, LINE or WORD)."""
    if level == WORD:
        return [m.span() for m in _WORDS.finditer(text, s, e)]  # spans are absolute
    if level == SENTENCE:
        cuts = [m.end() for m in _SENTENCE_END.finditer(text, s, e)]
    else:
        cuts = [m.end() for m in _NEWLINE.finditer(text, s, e)]
    pieces = []
    prev = s
    for c in [*cuts, e]:
        a, b = _trim(text, prev, c)
        if a < b:
            pieces.append((a, b))
        prev = c
    return pieces


UNIT_WINDOW = 1 << 18  # characters of one unit split into pieces at a time


def _windows(text: str, s: int, e: int) -> list[tuple[int, int]]:
    """[s, e) in runs of about UNIT_WINDOW characters, each cut at a whitespace, so that a
    sentence of millions of words (a 50 MB one-line file) is packed a window at a time (issue
    30, found 7). A chunk never spans two windows; a unit under UNIT_WINDOW is chunked exactly
    as before. A word longer than the window stays whole (``hard_cut`` cuts it)."""
    out = []
    while e - s > UNIT_WINDOW:
        cut = s + UNIT_WINDOW
        while cut < e and not text[cut].isspace():
            cut += 1
        if cut >= e:
            break
        out.append((s, cut))
        s = cut
    out.append((s, e))
    return out


def _is_glue(ch: str) -> bool:
    """True for characters that belong to the preceding one (combining marks, ZWJ, variation
    selectors): a hard cut never lands just before them."""
    return unicodedata.category(ch).startswith("M") or ch in "\u200d\ufe0e\ufe0f"


class _Chunker:
    def __init__(self, doc: Document, count: CountTokens | None, config: ChunkConfig) -> None:
        self.doc = doc
        self.text = doc.text
        self.count = count
        self.overlap = config.overlap
        self.window = config.window if count is not None else None
        self.chars_limit = config.max_chars
        if self.chars_limit is None and self.window is None:
            self.chars_limit = DEFAULT_MAX_CHARS
        self.max_chars = self.chars_limit  # in force for the current section
        self.specials = count("") if count is not None else 0
        pages = sorted(doc.pages, key=lambda p: p.start)
        self.page_starts = [p.start for p in pages]
        self.page_numbers = [p.number for p in pages]
        self.chunks: list[Chunk] = []
        self.problems: list[str] = []
        # Per section:
        self.section_idx = 0
        self.header = ""
        self.budget: int | None = None  # token budget in force for this section
        self.base = 0  # tokens of the embedded text with empty content

    # -- budget ---------------------------------------------------------------------------

    def measure(self, s: int, e: int) -> int | None:
        """Tokens of the embedded text of [s, e) if it fits the budget, else None."""
        if self.max_chars is not None and e - s > self.max_chars:
            return None
        if self.budget is None or self.count is None:
            return 0
        n = self.count(embedded_text(self.header, self.text[s:e]))
        return n if n <= self.budget else None

    def cost(self, s: int, e: int) -> float:
        """Estimated tokens [s, e) adds to a chunk (its count without the special tokens)."""
        if self.budget is None or self.count is None:
            return 0.0
        return float(self.count(self.text[s:e]) - self.specials)

    # -- sections -------------------------------------------------------------------------

    def fits(self, idx: int, s: int, e: int) -> int | None:
        """Tokens of [s, e) embedded under section ``idx``'s header when it fits the window and
        the character limit, else None."""
        if self.chars_limit is not None and e - s > self.chars_limit:
            return None
        if self.count is None:
            return 0
        n = self.count(
            embedded_text(header(self.doc.title, section_path(self.doc, idx)), self.text[s:e])
        )
        return n if self.window is None or n <= self.window else None

    def section(self, idx: int, segments: list[tuple[int, int]]) -> None:
        self.section_idx = idx
        self.header = header(self.doc.title, section_path(self.doc, idx))
        self.budget = self.window
        self.max_chars = self.chars_limit
        if self.count is not None:
            self.base = self.count(embedded_text(self.header, ""))
            if (
                self.window is not None
                and self.count(embedded_text(self.header, "x")) > self.window
            ):
                self.problems.append(
                    f"{self.doc.name}: header {self.header[:60]!r} alone fills the {self.window}-"
                    f"token window; section {idx} chunked by characters, its chunks exceed it"
                )
                self.budget = None
                if self.max_chars is None:
                    self.max_chars = DEFAULT_MAX_CHARS
        for s, e in segments:
            blocks = _blocks(self.text, s, e)
            if (
                idx
                and s == self.doc.sections[idx].start
                and len(blocks) > 1
                and _is_heading(
                    self.text[blocks[0][0] : blocks[0][1]], self.doc.sections[idx].title
                )
            ):
                # The heading travels with the block after it: packed whole when they fit,
                # else the heading opens the block's first piece, never a chunk of its own.
                blocks[:2] = [(blocks[0][0], blocks[1][1], blocks[1][2])]
            units = [(a, b) for a, b, _ in blocks]
            levels = [lvl for _, _, lvl in blocks]
            first = len(self.chunks)
            self.pack(units, [self.cost(a, b) for a, b in units], levels)
            self.join_short(first)

    def join_short(self, first: int) -> None:
        """Join each chunk under ``SHORT_CHARS`` emitted from ``first`` on (one run of a
        section's own text, in order) to the chunk before it, else the one after it, when the
        two fit the budget together. Joining only grows a chunk: nothing it held is cut."""
        run = self.chunks[first:]
        i = 0
        while i < len(run) and len(run) > 1:
            c = run[i]
            if c.end - c.start >= SHORT_CHARS:
                i += 1
                continue
            for a, b in ((i - 1, i), (i, i + 1)):
                if a < 0 or b >= len(run):
                    continue
                tokens = self.measure(run[a].start, run[b].end)
                if tokens is not None:
                    s, e = run[a].start, max(run[a].end, run[b].end)
                    if self.count is not None and not tokens:
                        tokens = self.count(embedded_text(self.header, self.text[s:e]))
                    run[a : b + 1] = [Chunk(self.section_idx, s, e, run[a].page, tokens)]
                    i = a
                    break
            else:
                i += 1
        self.chunks[first:] = run

    def emit(self, s: int, e: int, tokens: int | None) -> None:
        if self.count is not None and not tokens:
            tokens = self.count(embedded_text(self.header, self.text[s:e]))
        page = None
        if self.page_starts:
            k = max(0, bisect.bisect_right(self.page_starts, s) - 1)
            page = self.page_numbers[k]
        self.chunks.append(Chunk(self.section_idx, s, e, page, tokens or 0))

    # -- packing --------------------------------------------------------------------------

    def pack(self, units: list[tuple[int, int]], costs: list[float], levels: list[int]) -> None:
        """Greedy: the longest run of whole units from ``i`` that fits, then on from its end.
        A unit that does not fit alone is split at its next level and packed on its own."""
        n = len(units)
        i = 0
        while i < n:
            # Estimate how many units fit, then confirm on the real embedded text.
            est, j = self.base + costs[i], i + 1
            while j < n and (self.budget is None or est + costs[j] <= self.budget):
                if self.max_chars is not None and units[j][1] - units[i][0] > self.max_chars:
                    break
                est += costs[j]
                j += 1
            good, tokens = self.largest_fit(units, i, j)
            if good == i:
                self.split_unit(units[i], costs[i], levels[i])
                i += 1
                continue
            self.emit(units[i][0], units[good - 1][1], tokens)
            nxt = good
            if self.overlap and good < n:
                nxt = max(i + 1, good - self.overlap)
                while nxt < good and self.measure(units[nxt][0], units[good][1]) is None:
                    nxt += 1
            i = nxt

    def largest_fit(self, units: list[tuple[int, int]], i: int, j: int) -> tuple[int, int | None]:
        """Largest ``g`` in [i, len(units)] with units[i:g] fitting (``i`` when none does), and
        its token count. Starts from the estimate ``j``: gallops up, or bisects down."""
        n, s = len(units), units[i][0]

        def fits(g: int) -> int | None:
            return self.measure(s, units[g - 1][1])

        t = fits(j)
        if t is None:
            return _bisect(i, None, j, fits)
        return _gallop(j, t, n, 1, fits)

    def split_unit(self, unit: tuple[int, int], cost: float, level: int) -> None:
        s, e = unit
        windows = _windows(self.text, s, e) if e - s > UNIT_WINDOW else []
        if len(windows) > 1:
            # a span (and a cost) per word of a 1M-word line held 170 MB: split and pack a
            # huge unit a window at a time, so memory follows the window, not the document
            for a, b in windows:
                self.split_unit((a, b), cost * (b - a) / (e - s), level)
            return
        for lvl in range(level, CHAR):
            pieces = _split(self.text, s, e, lvl)
            if len(pieces) > 1:
                break
        else:
            self.hard_cut(s, e)
            return
        if lvl == WORD:  # many small pieces: share the unit's count out by length
            span = max(1, e - s)
            costs = [cost * (b - a + 1) / span for a, b in pieces]
        else:
            costs = [self.cost(a, b) for a, b in pieces]
        self.pack(pieces, costs, [lvl + 1] * len(pieces))

    def hard_cut(self, s: int, e: int) -> None:
        """Cut a run with no whitespace into the longest pieces that fit (reported)."""
        self.problems.append(
            f"{self.doc.name}: {e - s} characters at [{s},{e}) without a word boundary that "
            f"fits the budget: cut inside the word"
        )
        p = s
        while p < e:
            good, good_t = _gallop(p, None, e, 16, functools.partial(self.measure, p))
            if good == p:
                good, good_t = p + 1, None
                self.problems.append(
                    f"{self.doc.name}: character at {p} does not fit the budget even alone; "
                    f"its chunk exceeds the window"
                )
            cut = good
            while p + 1 < cut < e and _is_glue(self.text[cut]):
                cut -= 1
            if cut != good:
                good_t = None
            self.emit(p, cut, good_t)
            p = cut


Measure = Callable[[int], "int | None"]


def _gallop(
    lo: int, lo_t: int | None, limit: int, step: int, fits: Measure
) -> tuple[int, int | None]:
    """Largest ``x`` in [lo, limit] with ``fits(x)`` not None (``lo`` when none above it does),
    and its token count: gallop up from ``lo`` by doubling steps, then bisect."""
    hi = limit + 1
    while lo < limit:
        cand = min(limit, lo + step)
        t = fits(cand)
        if t is None:
            hi = cand
            break
        lo, lo_t, step = cand, t, step * 2
    return _bisect(lo, lo_t, hi, fits)


def _bisect(lo: int, lo_t: int | None, hi: int, fits: Measure) -> tuple[int, int | None]:
    """Largest ``x`` in [lo, hi) with ``fits(x)`` not None, given that ``hi`` does not fit."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        t = fits(mid)
        if t is None:
            hi = mid
        else:
            lo, lo_t = mid, t
    return lo, lo_t
