"""Blocks repeated across the documents of one folder (a site's banner, footer or navigation
bar that no class name marks) are furniture, not content: dropped before chunking (issue 32).

The rule: within a run of consecutive documents of one source folder (discovery yields a
folder's files together), a block -- a run of non-empty lines, the unit the extractors
separate by a blank line, never a piece of fenced code -- whose normalised text (case folded, white space collapsed) occurs
in at least ``SHARE`` of the run's extracted documents, and in at least ``MIN_DOCUMENTS`` of
them, is removed from each. A heading block (a section's start) is never removed: "OPTIONS"
heads every man page. The canonical text is what remains: whole blocks go with one of their
blank-line separators, so no kept block is cut, and every section and page offset is moved to
the text that remains.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import replace
from posixpath import dirname

from kbpack.text.document import Document, Page, Section

SHARE = 0.5
MIN_DOCUMENTS = 3
_BLOCK = re.compile(r"[^\n]+(?:\n[^\n]+)*")
_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[^\n]*$", re.MULTILINE)


def _key(block: str) -> str:
    return " ".join(block.casefold().split())


def _fenced(text: str) -> list[tuple[int, int]]:
    """[start, end) of each fenced code region (```` ``` ```` or ``~~~`` lines, as Markdown
    writes them and the HTML extractor writes ``<pre>``): blank lines inside do not end it."""
    out: list[tuple[int, int]] = []
    opened: tuple[int, str] | None = None
    for m in _FENCE.finditer(text):
        if opened is None:
            opened = (m.start(), m.group(1)[0])
        elif m.group(1)[0] == opened[1]:
            out.append((opened[0], m.end()))
            opened = None
    if opened is not None:
        out.append((opened[0], len(text)))
    return out


def _blocks(doc: Document) -> list[tuple[int, int]]:
    """[start, end) of each block of ``doc`` that may be removed: not a heading, and not a
    piece of fenced code (its lines split by a blank line are no blocks of their own)."""
    heads = {s.start for s in doc.sections[1:]}
    fences = _fenced(doc.text)
    return [
        (m.start(), m.end())
        for m in _BLOCK.finditer(doc.text)
        if m.start() not in heads and not any(a < m.end() and m.start() < b for a, b in fences)
    ]


class RepeatedBlocks:
    """The pass over a build's documents; ``removed``: blocks dropped so far, over all
    documents (one per document it was dropped from)."""

    def __init__(self) -> None:
        self.removed = 0

    def __call__(self, documents: Iterable[Document]) -> Iterator[Document]:
        run: list[Document] = []
        for doc in documents:
            if run and dirname(doc.name) != dirname(run[-1].name):
                yield from self._cleaned(run)
                run = []
            run.append(doc)
        yield from self._cleaned(run)

    def _cleaned(self, run: list[Document]) -> list[Document]:
        ok = [d for d in run if d.status == "ok" and d.text]
        if len(ok) < MIN_DOCUMENTS:
            return run
        seen: dict[str, int] = {}
        for d in ok:
            for key in {_key(d.text[a:b]) for a, b in _blocks(d)}:
                seen[key] = seen.get(key, 0) + 1
        need = max(MIN_DOCUMENTS, SHARE * len(ok))
        repeated = {k for k, n in seen.items() if n >= need}
        if not repeated:
            return run
        out = []
        for d in run:
            spans = [(a, b) for a, b in _blocks(d) if _key(d.text[a:b]) in repeated]
            if d.status == "ok" and spans:
                d = without(d, spans)
                self.removed += len(spans)
            out.append(d)
        return out


def without(doc: Document, spans: list[tuple[int, int]]) -> Document:
    """``doc`` with the blocks ``spans`` (ascending, whole blocks) removed, each with the blank
    line after it (the one before it, for the last block), offsets moved to match."""
    text = doc.text
    cuts: list[tuple[int, int]] = []
    for a, b in spans:
        nxt = _BLOCK.search(text, b)
        if nxt is not None:
            cuts.append((a, nxt.start()))
        else:  # the last block: the separator before it goes
            prev_end = len(text[:a].rstrip("\n"))
            cuts.append((prev_end, b))
    cuts = _merged(cuts)
    kept = []
    at = 0
    for a, b in cuts:
        kept.append(text[at:a])
        at = b
    kept.append(text[at:])
    new_text = "".join(kept)

    def moved(x: int) -> int:
        gone = 0
        for a, b in cuts:
            if x >= b:
                gone += b - a
            elif x > a:
                return a - gone
            else:
                break
        return x - gone

    sections = [
        Section(s.level, s.title, moved(s.start), moved(s.end), s.parent) for s in doc.sections
    ]
    if sections:
        sections[0] = replace(sections[0], start=0, end=len(new_text))
    pages = [Page(p.number, moved(p.start), moved(p.end)) for p in doc.pages]
    # a link inside a removed block goes with it; the others and every anchor move
    links = [
        replace(k, start=moved(k.start), end=moved(k.end))
        for k in doc.links
        if not any(a < k.end and k.start < b for a, b in cuts)
    ]
    anchors = {name: moved(x) for name, x in doc.anchors.items()}
    return replace(doc, text=new_text, sections=sections, pages=pages, links=links, anchors=anchors)


def _merged(cuts: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(cuts):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out
