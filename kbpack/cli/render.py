"""A search response as a person reads it on a terminal (``kbpack query`` without --json):
numbered results with their locators, quotes re-wrapped and cut, notes, "did you mean".
Names and text are printed with control characters escaped."""

from __future__ import annotations

import textwrap
from typing import Any

from kbpack.runtime.terminal import printable
from kbpack.search.absent import deciding_words

QUOTE_CHARS = 600  # a quote longer than this is cut (with " …") unless --full


def render(resp: Any, full: bool = False) -> str:
    """Results as a person reads them. The lexical-only fallback is said first, not last; names
    and text are printed with control characters escaped (a name cannot split a line or send
    escape sequences to the terminal)."""
    head = [f"note: {safe(n)}" for n in resp.notes if resp.lexical_only]
    tail = [f"note: {safe(n)}" for n in resp.notes if not resp.lexical_only]
    if not resp.answered:
        # only a word of the sentence that asks refuses (a setting beside it is reported)
        missing = deciding_words(resp.query, getattr(resp, "not_in_pack", []))
        if missing and resp.threshold is not None:
            # the reason that generalises, not the distance: the question names what the pack
            # lacks (with no match at all, the line below says so, and not_in_pack follows)
            line = (
                f"NO ANSWER: this pack never mentions {safe(', '.join(missing))} "
                f'(asked: "{safe(resp.query)}")'
            )
            return "\n".join([*head, line, *did_you_mean(resp), *tail])
        if resp.threshold is not None:
            line = f'NO ANSWER: nothing under cosine distance {resp.threshold:g} for "{safe(resp.query)}"'
        else:
            line = f'NO ANSWER: no chunk matches any term of "{safe(resp.query)}"'
        return "\n".join([*head, line, *not_in_pack(resp), *did_you_mean(resp), *tail])
    out = list(head)
    for r in resp.results:
        dist = "-" if r.distance is None else f"{r.distance:.3f}"
        bm = "-" if r.bm25_rank is None else str(r.bm25_rank)
        where = f"{safe(r.pack)}: " if r.pack else ""
        out.append(f"[{r.rank}] {where}{safe(r.locator)}")
        meta = f"    {safe(r.section or r.title)}  ·  distance {dist}  ·  bm25 rank {bm}"
        if r.rerank_score is not None:
            meta += f"  ·  rerank {r.rerank_score:.3f}"
        out.append(meta)
        out.append(textwrap.indent(quote(r.content, None if full else QUOTE_CHARS), "    "))
        if r.also:
            out.append(f"    also at: {safe(', '.join(r.also))}")
    out.extend(not_in_pack(resp))
    out.extend(did_you_mean(resp))
    out.extend(tail)
    return "\n".join(out)


def not_in_pack(resp: Any) -> list[str]:
    """The query's words the pack never mentions (rare in the language: names, products), said
    even when results are shown: they may answer another question than the one asked."""
    words = getattr(resp, "not_in_pack", [])
    return [f"not in this pack: {safe(', '.join(words))}"] if words else []


def did_you_mean(resp: Any) -> list[str]:
    """One line per query word the pack does not hold, with its nearest vocabulary terms."""
    return [
        f"did you mean: {safe(' / '.join(t for t, _, _ in s.did_you_mean))} "
        f"(for {safe(repr(s.term))}, in no chunk)"
        for s in getattr(resp, "suggestions", [])
    ]


def quote(content: str, limit: int | None, width: int = 96) -> str:
    """The chunk's text for a terminal: prose paragraphs re-wrapped, code and tables (a block
    with a line that starts with whitespace, a fence or a pipe) kept line by line; cut after
    ``limit`` characters with " …" unless ``limit`` is None."""
    blocks: list[str] = []
    used = 0
    for para in safe_text(content).split("\n\n"):
        lines = [x.rstrip() for x in para.strip("\n").split("\n")]
        if not any(lines):
            continue
        literal = any(x.startswith((" ", "\t", "```", "~~~", "|")) for x in lines)
        block = "\n".join(lines) if literal else textwrap.fill(" ".join(para.split()), width)
        if limit is not None and used + len(block) > limit:
            room = limit - used
            if room >= 40:
                blocks.append(
                    textwrap.fill(
                        textwrap.shorten(" ".join(block.split()), room, placeholder=" …"), width
                    )
                )
            else:
                blocks.append("…")
            break
        blocks.append(block)
        used += len(block)
    return "\n".join(blocks)


def safe(field: str) -> str:
    """A one-line field (name, section, locator, query): every control character escaped."""
    return printable(field)


def safe_text(text: str) -> str:
    """Text shown as text: control characters escaped, newlines and tabs kept."""
    return printable(text, lines=True)
