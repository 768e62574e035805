"""HTML with the standard library's parser (no new dependency).

* Dropped as noise: ``head`` (except ``title``), ``script``, ``style``, ``noscript``,
  ``template``, ``svg``, ``nav``, ``header``, ``footer``, ``aside``, ``form`` and its controls,
  and any element whose ``role`` is navigation/banner/contentinfo/search or whose ``class``
  or ``id`` is a navigation word (``nav``, ``navbar``, ``menu``, ``sidebar``, ``breadcrumb``...).
* ``h1``-``h6`` become sections; paragraphs and other blocks are separated by a blank line;
  list items are lines ``- item`` (indented two spaces per nesting level); a table is one
  line per row with the cells joined by `` | ``; ``pre`` keeps its whitespace and blank lines
  and is written between Markdown code fences (```` ``` ````), so the chunker keeps it whole
  as it keeps fenced code; elsewhere runs of whitespace collapse to one space; ``br`` is a line
  break.
* Documentation generators' furniture is dropped by class: Sphinx's ``¶`` permalinks
  (``headerlink``, Texinfo's ``copiable-anchor``), navigation bars (``related``) and sidebar; Texinfo's "Next: ... Previous:
  ... Up:" bar (``header``, ``nav-panel``); tables of contents (``contents``,
  ``shortcontents``, ``toctree-wrapper``); index tables (Texinfo ``index-cp``..., Sphinx
  ``indextable``).
* Nesting is bounded: elements deeper than 64 are read as text of the deepest one, and list
  indentation stops at 8 levels, so unclosed nesting costs linear time and space.
* Decoding: BOM, then strict UTF-8, then the ``<meta charset>`` declaration, then cp1252.

Title: the first ``h1``, else ``<title>``, else the file name stem.

Links (extractor version 4, spec §3.12): ``extract_links`` finds where the text of each
``<a href>`` and each ``id`` (or ``<a name>``) landed in the canonical text. It parses the page
a second time with marks (runs of Unicode noncharacters, which no extraction rule touches) at
those places, and reads their offsets off that text aligned with the canonical one, so the
canonical text itself is exactly what a parse without links gives. ``link_target`` turns an
``href`` into a document name relative to the input root (``None`` for another site's URL).
"""

from __future__ import annotations

import posixpath
import re
from bisect import bisect_right
from dataclasses import dataclass, field
from html.parser import HTMLParser
from urllib.parse import unquote, urlsplit

from kbpack.extract.structure import TextBuilder, heading_text
from kbpack.text.canonical import one_line

_SKIP_TAGS = {
    "head", "script", "style", "noscript", "template", "svg", "math", "nav", "header",
    "footer", "aside", "form", "select", "button", "input", "textarea", "iframe", "object",
}  # fmt: skip
_SKIP_ROLES = {"navigation", "banner", "contentinfo", "search", "complementary"}
_SKIP_WORDS = {
    "nav", "navbar", "navigation", "menu", "mainmenu", "submenu", "sidebar", "breadcrumb",
    "breadcrumbs", "skip-link", "skiplink", "cookie-banner",
}  # fmt: skip
# Matched against ``class`` only (an ``id`` names content as often as chrome): documentation
# generators' furniture. Sphinx: the pilcrow permalink after every heading (``headerlink``),
# the navigation bars (``related``) and sidebar; Texinfo: the "Next: ... Previous: ... Up:"
# bar (``header``, ``nav-panel``), the tables of contents and the index tables.
_SKIP_CLASSES = {
    "headerlink", "copiable-anchor", "related", "sphinxsidebar", "sphinxsidebarwrapper", "footer", "header",
    "nav-panel", "contents", "contents-heading", "shortcontents", "shortcontents-heading",
    "indextable", "genindextable", "genindex-jumpbox", "toctree-wrapper", "index-entries",
    # DocBook: the "Prev | Up | Next" bars, tables of contents and lists of tables/figures
    "navheader", "navfooter", "toc", "list-of-tables", "list-of-figures", "list-of-examples",
    # Javadoc: the navigation bars, old (topNav, bottomNav, subNav) and new (top-nav...)
    "topnav", "bottomnav", "subnav", "top-nav", "bottom-nav", "sub-nav",
}  # fmt: skip
# Admonitions (DocBook div.note..., Sphinx div.admonition): a heading or Sphinx's
# p.admonition-title inside one is the admonition's label, kept as text ("Note: ..."), never a
# section heading that would swallow the text after the admonition.
_ADMONITIONS = {
    "admonition", "note", "tip", "caution", "warning", "important", "attention", "danger",
    "hint", "seealso",
}  # fmt: skip
_ADMONITION_TITLE = "admonition-title"
# A first heading that says nothing of the page: numbered ("1. Overview", "21.5."), or one of
# the words a generator or an author puts first on many pages; the page's <title> says more.
_NUMBERED = re.compile(r"^(?:[0-9]+(?:\.[0-9]+)*\.?|[A-Z](?:\.[0-9]+)*\.)\s")
_GENERIC_TITLES = {
    "overview", "introduction", "contents", "table of contents", "index", "preface",
    "abstract", "summary", "name", "synopsis", "description", "home", "untitled", "about",
}  # fmt: skip

_INDEX_TABLE = re.compile(r"^index-[a-z]{2,3}$")  # Texinfo's index tables: index-cp, index-fn...
# A class with "toc" as one of its hyphen- or underscore-separated parts (a level number may
# follow): SQLite's fancy_toc / fancy-toc1, toc-wrapper, page-toc; never "tocs" or "protocol".
_TOC_PART = re.compile(r"(?:^|[-_])toc\d*(?:$|[-_])")
# Elements deeper than this are read as inline text of the deepest one: unclosed nesting
# (1,000 <ul><li> in a row) then costs linear time and adds no indentation past this depth.
MAX_DEPTH = 64
MAX_LIST_INDENT = 8  # list levels that indent; deeper items keep the deepest indentation
_VOID = {
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param",
    "source", "track", "wbr",
}  # fmt: skip
_BLOCKS = {
    "p", "div", "section", "article", "main", "blockquote", "pre", "ul", "ol", "dl", "dt",
    "dd", "li", "table", "tr", "td", "th", "caption", "figure", "figcaption", "address",
    "details", "summary", "hr", "body", "html", "center", "fieldset", "legend",
    "h1", "h2", "h3", "h4", "h5", "h6", "thead", "tbody", "tfoot",
}  # fmt: skip
_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.I)
_SPACES = re.compile(r"[ \t\n\r\f\v]+")
# A mark (links, anchors): U+FDD0, its kind (U+FDD1 link start, U+FDD2 link end, U+FDD3
# anchor), its index in hex digits U+FDE0..U+FDEF, U+FDD4. Noncharacters: no rule drops or
# joins them, and a page that holds any of them is read without links.
_MARK = re.compile("\ufdd0([\ufdd1-\ufdd3])([\ufde0-\ufdef]+)\ufdd4")
_MARK_CHARS = re.compile("[\ufdd0-\ufdef]")
_WORDS = re.compile(r"\S+")
LINK_START, LINK_END, ANCHOR = "\ufdd1", "\ufdd2", "\ufdd3"


def _mark(kind: str, index: int) -> str:
    digits = "".join(chr(0xFDE0 + int(d, 16)) for d in f"{index:x}")
    return f"\ufdd0{kind}{digits}\ufdd4"


def _visible(text: str) -> bool:
    """Text with something to read once the marks are taken out."""
    return bool(_MARK.sub("", text).strip())


def _marks_of(text: str) -> list[str]:
    """The marks in ``text``, as one piece each (kept for the next block)."""
    return [m.group(0) for m in _MARK.finditer(text)]


_RUNS = re.compile(r" {2,}")


def declared_charset(data: bytes) -> str | None:
    """The charset named by a ``<meta>`` tag in the first 4 KiB, if any."""
    found = _CHARSET.search(data[:4096])
    return found.group(1).decode("ascii") if found else None


@dataclass
class _Table:
    """A table being read: each row becomes one line, its cells joined by `` | ``."""

    rows: list[str] = field(default_factory=list)
    cells: list[str] = field(default_factory=list)
    cell: list[str] | None = None  # text pieces of the cell being read

    def end_cell(self) -> None:
        if self.cell is not None:
            self.cells.append(one_line("".join(self.cell)))
            self.cell = None

    def end_row(self) -> None:
        self.end_cell()
        if any(_visible(cell) for cell in self.cells):
            self.rows.append(" | ".join(self.cells))
        self.cells = []


# Unclosed <li>, <p>, <td>... are closed by the next sibling, as browsers do: for each tag, the
# open tags it closes, and those that stop the search (the sibling is in another list or table)
_IMPLIED_END = {
    "li": ({"li"}, {"ul", "ol"}),
    "p": ({"p"}, {"div", "td", "th", "li", "body", "section", "article", "blockquote"}),
    "dt": ({"dt", "dd"}, {"dl"}),
    "dd": ({"dt", "dd"}, {"dl"}),
    "tr": ({"tr"}, {"table"}),
    "td": ({"td", "th"}, {"tr", "table"}),
    "th": ({"td", "th"}, {"tr", "table"}),
}


def _is_noise(tag: str, attrs: list[tuple[str, str | None]]) -> bool:
    """An element whose subtree is page furniture, not content: navigation, banners, hidden
    parts, tables of contents, index tables (the ``_SKIP_*`` sets above)."""
    if tag in _SKIP_TAGS:
        return True
    values = dict(attrs)
    if (values.get("role") or "").lower() in _SKIP_ROLES:
        return True
    if "hidden" in values or values.get("aria-hidden") == "true":
        return True
    classes = (values.get("class") or "").lower().split()
    if any(
        c in _SKIP_CLASSES or _TOC_PART.search(c) or (tag == "table" and _INDEX_TABLE.match(c))
        for c in classes
    ):
        return True
    words = [*classes, *(values.get("id") or "").lower().split()]
    return any(word in _SKIP_WORDS for word in words)


class _Extractor(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out = TextBuilder()
        self.stack: list[tuple[str, bool]] = []  # open elements: (tag, starts a skipped subtree)
        self.skipping = 0
        self.pieces: list[str] = []  # inline text of the current block
        self.heading: int | None = None
        self.pre = 0
        self.lists: list[str] = []
        self.in_item = False
        self.after_item = (
            False  # the last block was a list item: the next item follows on a new line
        )
        self.tables: list[_Table] = []
        self.page_title: list[str] = []
        self.in_title = False
        self.first_h1: str | None = None
        # stack depths of the open admonitions and of an open admonition-title paragraph
        self.admonitions: list[int] = []
        self.label_at: int | None = None
        self.label: str | None = None  # an admonition's label, waiting for its first block
        # links and anchors (extract_links): marked only when ``marking``
        self.marking = False
        self.hrefs: list[str] = []
        self.anchor_names: list[str] = []
        self.link_depth: int | None = None  # stack depth of the open <a href>

    def parse_html_declaration(self, i: int) -> int:
        """``<![WORD[`` with a word Python's parser does not know raises AssertionError there
        ("unknown status keyword", found by bench/fuzz.py); browsers read it as a bogus
        comment, and so does this."""
        if self.rawdata.startswith("<![", i):
            try:
                return super().parse_html_declaration(i)
            except AssertionError:
                return self.parse_bogus_comment(i)
        return super().parse_html_declaration(i)

    # -- element tracking ------------------------------------------------------------------
    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title" and not self.skipping_outside_head():
            self.in_title = True
        if tag in _VOID:
            if not self.skipping and tag == "br":
                if self.tables and self.tables[-1].cell is not None:
                    self.tables[-1].cell.append(" ")  # a row stays on one line
                else:
                    self.pieces.append("\n")
            elif not self.skipping and tag == "hr":
                self._flush()
            return
        if tag in _IMPLIED_END and self.stack:
            self._close_implied(tag)
        if len(self.stack) >= MAX_DEPTH:
            return  # too deep: its text is read as part of the deepest element (see MAX_DEPTH)
        noise = _is_noise(tag, attrs)
        self.stack.append((tag, noise))
        if noise:
            self.skipping += 1
        if self.skipping:
            return
        self._open(tag)
        classes = set((dict(attrs).get("class") or "").lower().split())
        if tag in ("div", "aside", "section") and classes & _ADMONITIONS:
            self.admonitions.append(len(self.stack))
        elif tag == "p" and _ADMONITION_TITLE in classes and self.admonitions:
            self.label_at = len(self.stack)
        if self.marking:
            self._mark_start(tag, dict(attrs))

    def _mark_start(self, tag: str, values: dict[str, str | None]) -> None:
        ident = values.get("id") or (values.get("name") if tag == "a" else None)
        if ident:
            self._put_mark(ANCHOR, len(self.anchor_names))
            self.anchor_names.append(ident)
        href = values.get("href") if tag == "a" else None
        if href is not None:
            self._end_link()  # <a> inside <a>: the first ends, as in a browser
            self._put_mark(LINK_START, len(self.hrefs))
            self.hrefs.append(href)
            self.link_depth = len(self.stack)

    def _end_link(self) -> None:
        if self.link_depth is not None:
            self.link_depth = None
            self._put_mark(LINK_END, len(self.hrefs) - 1)

    def _put_mark(self, kind: str, index: int) -> None:
        mark = _mark(kind, index)
        if self.tables and self.tables[-1].cell is not None:
            self.tables[-1].cell.append(mark)
        else:
            self.pieces.append(mark)

    def skipping_outside_head(self) -> bool:
        # <title> lives in <head>, which is skipped as a whole; read it anyway.
        return any(noise and tag != "head" for tag, noise in self.stack)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in _VOID:
            self.handle_endtag(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self.in_title = False
        if tag in _VOID or not any(open_tag == tag for open_tag, _ in self.stack):
            return  # a stray end tag: ignore, as browsers do
        while self.stack:
            depth = len(self.stack)
            open_tag, noise = self.stack.pop()
            if depth == self.link_depth:
                self._end_link()
            if not self.skipping:
                if depth == self.label_at:
                    self.label_at = None
                    label = " ".join(self._inline_text().split())
                    self.label = label if _visible(label) else None
                self._close(open_tag)
            if self.admonitions and self.admonitions[-1] == depth:
                self.admonitions.pop()
                self._flush()
                if self.label is not None:  # a label with nothing after it: a line of its own
                    self._add(self._labelled(""))
            if noise:
                self.skipping -= 1
            if open_tag == tag:
                break

    def _close_implied(self, tag: str) -> None:
        closes, stops = _IMPLIED_END[tag]
        for open_tag, _ in reversed(self.stack[-MAX_DEPTH:]):
            if open_tag in stops:
                return
            if open_tag in closes:
                self.handle_endtag(open_tag)
                return

    # -- text ------------------------------------------------------------------------------
    def handle_data(self, data: str) -> None:
        if self.in_title:
            self.page_title.append(data)
            return
        if self.skipping:
            return
        if self.tables and self.tables[-1].cell is not None:
            self.tables[-1].cell.append(data)
        elif self.pre:
            self.pieces.append(data)
        else:
            self.pieces.append(_SPACES.sub(" ", data))

    def _inline_text(self) -> str:
        text = "".join(self.pieces)
        self.pieces = []
        if self.pre:
            return text
        # Pieces were collapsed one by one; "a " + " b" still needs one more pass.
        return "\n".join(_RUNS.sub(" ", line).strip(" ") for line in text.split("\n"))

    def _flush(self) -> None:
        """End the current block of inline text."""
        if self.heading is not None:
            return  # heading text is emitted by its end tag
        text = self._inline_text()
        if not _visible(text):
            self.pieces = _marks_of(
                text
            )  # (marking) an empty element's marks: the next block's start
            return
        if self.in_item:
            if self.label is not None:
                self.out.add(self._labelled(""))
            depth = min(max(len(self.lists), 1) - 1, MAX_LIST_INDENT)
            line = "  " * depth + "- " + " ".join(text.split())
            self.out.add(line, separator="\n" if self.after_item else "\n\n")
            self.in_item = False
            self.after_item = True
            return
        self._add(text)

    def _fence(self) -> None:
        """End a ``<pre>`` block: its text, blank lines included, between Markdown code fences,
        so the chunker keeps it whole as it keeps fenced code (split only at lines when it
        alone is over budget). The fence outgrows any run of backticks inside."""
        text = "".join(self.pieces)
        self.pieces = []
        if text.startswith("\n"):
            text = text[1:]  # a newline right after <pre> is not content (HTML spec)
        if not _visible(text):
            self.pieces = _marks_of(text)
            return
        longest = max((len(run) for run in re.findall(r"`{3,}", text)), default=2)
        fence = "`" * (longest + 1)
        self._add(f"{fence}\n{text.strip(chr(10))}\n{fence}")

    def _add(self, block: str) -> None:
        if self.label is not None:
            fence = block.startswith("```")
            self.out.add(self._labelled("" if fence else block))
            if not fence:
                self.after_item = False
                return
        self.out.add(block)
        self.after_item = False

    def _labelled(self, block: str) -> str:
        """``block`` after the pending admonition label ("Note: block"); clears the label."""
        label, self.label = (self.label or "").strip(), None
        if not label.endswith(":"):
            label += ":"
        return f"{label} {block}".rstrip()

    def _open(self, tag: str) -> None:
        in_cell = bool(self.tables) and self.tables[-1].cell is not None
        if in_cell and tag not in ("table", "td", "th"):
            return  # inside a cell every block is inline text of that cell
        if tag in _BLOCKS and not in_cell:
            self._flush()
        if tag in _HEADINGS:
            self.heading = _HEADINGS[tag]
        elif tag == "pre":
            self.pre += 1
        elif tag in ("ul", "ol"):
            self.lists.append(tag)
        elif tag == "li":
            self.in_item = True
        elif tag == "table":
            self._flush()
            self.tables.append(_Table())
        elif tag in ("td", "th") and self.tables:
            self.tables[-1].cell = []

    def _close(self, tag: str) -> None:
        table = self.tables[-1] if self.tables else None
        if tag in ("td", "th") and table is not None and table.cell is not None:
            table.end_cell()
        elif tag == "tr" and table is not None:
            table.end_row()
        elif tag == "table" and table is not None:
            table.end_row()
            self.tables.pop()
            rows = "\n".join(table.rows)
            if self.tables and self.tables[-1].cell is not None:
                self.tables[-1].cell.append(" " + rows.replace("\n", " ") + " ")
            else:
                self._add(rows)
        elif table is not None and table.cell is not None:
            return  # inside a cell every block is inline text of that cell
        elif tag in _HEADINGS and self.heading is not None:
            title = " ".join(self._inline_text().split())
            self.heading_done(title)
        elif tag == "pre":
            if self.pre == 1 and self.heading is None:
                self._fence()
            else:
                self._flush()
            self.pre = max(self.pre - 1, 0)
        elif tag in ("ul", "ol"):
            self._flush()
            if self.lists:
                self.lists.pop()
        elif tag in _BLOCKS:
            self._flush()

    def heading_done(self, title: str) -> None:
        level = self.heading or 1
        self.heading = None
        title = heading_text(title)
        if not _visible(title):
            self.pieces = _marks_of(title)
            title = ""
        if title and self.admonitions:
            self.label = title  # "Note", "Tip": the admonition's label, not a section
            return
        if title:
            self.out.add_heading(level, title)
            self.after_item = False
            if level == 1 and self.first_h1 is None:
                self.first_h1 = title

    def close(self) -> None:
        super().close()
        while self.stack:
            self.handle_endtag(self.stack[-1][0])
        self._end_link()
        self._flush()


def extract_html(html: str) -> tuple[TextBuilder, str | None]:
    """Parse HTML text; returns the built text and the title (None: use the file name)."""
    parser = _Extractor()
    parser.feed(html)
    parser.close()
    page_title = one_line("".join(parser.page_title)) or None
    title = parser.first_h1 or page_title
    # a numbered <title> names no more than the heading: Sphinx's "6. Best Packaging Practices
    # — developers-reference 12.18 documentation" only adds the site's name
    if (
        page_title
        and parser.first_h1
        and says_nothing(parser.first_h1)
        and not says_nothing(page_title)
    ):
        title = page_title
    return parser.out, title


def says_nothing(heading: str) -> bool:
    """A heading that does not name its page: numbered ("1. Overview", "21.5. Password
    Authentication": the number belongs to the manual, not to the page) or generic."""
    return bool(_NUMBERED.match(heading)) or heading.strip(" .:").casefold() in _GENERIC_TITLES


def extract_links(html: str, text: str) -> tuple[list[tuple[int, int, str]], dict[str, int]]:
    """Where each ``<a href>``'s text and each anchor (``id``, ``<a name>``) lie in ``text``,
    the canonical text ``extract_html(html)`` built: ``[(from, to, href)]`` in document order
    (links with no text left out) and ``{anchor: offset}`` (the first of a repeated name).
    Nothing when the page holds the mark characters itself or the marked text does not align
    (then the page is read without links rather than with a wrong one)."""
    if _MARK_CHARS.search(html):
        return [], {}
    parser = _Extractor()
    parser.marking = True
    parser.feed(html)
    parser.close()
    marked = parser.out.text()
    plain_parts: list[str] = []
    found: list[tuple[str, int, int]] = []  # (kind, index, offset in the unmarked text)
    at = 0
    length = 0
    for m in _MARK.finditer(marked):
        plain_parts.append(marked[at : m.start()])
        length += m.start() - at
        at = m.end()
        index = int("".join(f"{ord(c) - 0xFDE0:x}" for c in m.group(2)), 16)
        found.append((m.group(1), index, length))
    plain_parts.append(marked[at:])
    where = _align("".join(plain_parts), text, [offset for _, _, offset in found])
    if where is None:
        return [], {}
    starts: dict[int, int] = {}
    links: list[tuple[int, int, str]] = []
    anchors: dict[str, int] = {}
    for (kind, index, _), pos in zip(found, where, strict=True):
        if kind == ANCHOR and index < len(parser.anchor_names):
            anchors.setdefault(parser.anchor_names[index], _skip_space(text, pos, len(text)))
        elif kind == LINK_START:
            starts[index] = pos
        elif kind == LINK_END and index in starts and index < len(parser.hrefs):
            a, b = starts.pop(index), pos
            a = _skip_space(text, a, b)
            while b > a and text[b - 1].isspace():
                b -= 1
            if a < b:
                links.append((a, b, parser.hrefs[index]))
    links.sort(key=lambda x: x[0])
    apart = [k for i, k in enumerate(links) if i == 0 or k[0] >= links[i - 1][1]]
    return apart, anchors


def _skip_space(text: str, pos: int, end: int) -> int:
    while pos < end and text[pos].isspace():
        pos += 1
    return pos


def _align(marked: str, text: str, offsets: list[int]) -> list[int] | None:
    """Each offset into ``marked`` (the marked parse with its marks taken out) as an offset
    into ``text``. The two hold the same words, differing only in white space (a mark kept a
    space from being collapsed or stripped): an offset inside a word keeps its place in that
    word, one in white space goes to the next word. None when the words differ."""
    if marked == text:
        return offsets
    ours = [(m.start(), m.end()) for m in _WORDS.finditer(marked)]
    theirs = [m.start() for m in _WORDS.finditer(text)]
    if _WORDS.findall(marked) != _WORDS.findall(text):
        return None
    starts = [a for a, _ in ours]
    out = []
    for offset in offsets:
        k = bisect_right(starts, offset) - 1
        if k >= 0 and offset < ours[k][1]:
            out.append(theirs[k] + offset - ours[k][0])
        else:
            out.append(theirs[k + 1] if k + 1 < len(theirs) else len(text))
    return out


def link_target(href: str, name: str) -> tuple[str, str] | None:
    """The document name (relative to the input root, as ``Document.name``) and fragment an
    ``href`` of document ``name`` points at; None for another site, a scheme (``mailto:``,
    ``javascript:``), a root-absolute path, a path above the root, or an empty ``#``."""
    href = href.strip()
    if not href:
        return None
    try:
        parts = urlsplit(href)
    except ValueError:
        return None
    if parts.scheme or parts.netloc:
        return None
    path, fragment = unquote(parts.path), unquote(parts.fragment)
    if not path:
        return (name, fragment) if fragment else None
    if path.startswith("/"):
        return None
    target = posixpath.normpath(posixpath.join(posixpath.dirname(name), path))
    if target == ".." or target.startswith("../"):
        return None
    if path.endswith("/") or target == ".":
        target = "index.html" if target == "." else f"{target}/index.html"
    return target, fragment
