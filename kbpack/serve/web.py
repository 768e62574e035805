"""The Starlette application: the search page, the reader, and the JSON API under ``/api/``.

Endpoints are plain (sync) functions: Starlette runs them in its thread pool, so a slow search
does not stop the event loop from accepting other requests, and the library's locks keep
llama.cpp and each searcher to one caller at a time. Every page is rendered on the server by
Jinja2 with autoescaping on: the pages carry no script at all, and the CSP forbids one.
"""

from __future__ import annotations

import re
import sys
from bisect import bisect_right
from importlib import resources
from typing import Any, TypedDict
from urllib.parse import quote, urlencode

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup, escape
from starlette.applications import Starlette
from starlette.convertors import Convertor, register_url_convertor
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from kbpack.answer.answer import fallback_reason
from kbpack.answer.grounding import CITATION
from kbpack.errors import KbpackError, PackError, UsageError, describe
from kbpack.pack.read import DamagedDataError
from kbpack.runtime.terminal import printable
from kbpack.schema import SCHEMA
from kbpack.serve.asking import Asker, Busy, answer_json
from kbpack.serve.guard import Guard
from kbpack.serve.library import MAX_K, Document, Library, NotFound, check_query
from kbpack.text.analyze import tokenize
from kbpack.text.stopwords import STOPWORDS
from kbpack.version import __version__


class SearchForm(TypedDict):
    """The search page's query parameters, as the page echoes them back."""

    q: str
    mode: str
    pack: str
    doc: str
    type: str
    anyway: bool


MODE_LABELS = {"hybrid": "hybrid", "bm25": "exact words", "dense": "meaning"}
PAGE_K = 10
QUOTE_CHARS = 700
_WORD = re.compile(r"\w+(?:[-_.:/'’@]\w+)*")
_env = Environment(
    loader=PackageLoader("kbpack.serve", "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    trim_blocks=True,
    lstrip_blocks=True,
)


class DocNameConvertor(Convertor[str]):
    """A document name in a URL: any characters, newlines included (``path``'s ``.*`` stops
    at a newline, so a document whose name held one could not be opened: 404)."""

    regex = "(?s:.*)"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("docname", DocNameConvertor())
_STATIC = resources.files("kbpack.serve").joinpath("static")
# (bytes, media type) read once; served from memory by exact name: nothing else is reachable
STATIC = {
    "kbpack.css": (_STATIC.joinpath("kbpack.css").read_bytes(), "text/css"),
    "favicon.svg": (_STATIC.joinpath("favicon.svg").read_bytes(), "image/svg+xml"),
}


def create_app(
    library: Library,
    *,
    token: str | None = None,
    loopback: bool = True,
    asker: Asker | None = None,
) -> Any:
    """The ASGI application for ``library``: Starlette wrapped in the security guard.
    ``asker`` answers ``/api/ask`` and the page's Ask button (default: extractive, no model)."""
    asker = asker or Asker(library)

    def page(name: str, status: int = 200, **ctx: Any) -> HTMLResponse:
        html = _env.get_template(name).render(
            packs=library.packs, version=__version__, modes=MODE_LABELS, **ctx
        )
        return HTMLResponse(html, status_code=status)

    def error_page(e: KbpackError) -> HTMLResponse:
        if isinstance(e, PackError):
            return damaged_page(e)
        return page("error.html", status=http_status(e), message=str(e))

    def damaged_page(e: PackError) -> HTMLResponse:
        """A pack that fails a check while it is read (served with ``--no-verify``, or damaged
        since it was checked): what is wrong, in the pack's own words, and what to do."""
        message = str(e)
        hit = next((p for p in library.packs.values() if str(p.path) in message), None)
        return page(
            "damaged.html",
            status=500,
            message=message,
            damaged=isinstance(e, DamagedDataError) or " is damaged" in message,
            where=f"the pack “{hit.name}”" if hit else "a served pack",
            path=str(hit.path) if hit else "PACK",
            checked=bool(hit and hit.status.get("checked")),
            others=[name for name in library.packs if hit is None or name != hit.name],
        )

    def search_page(request: Request) -> Response:
        q = request.query_params
        form: SearchForm = {
            "q": q.get("q", ""),
            "mode": q.get("mode", "hybrid"),
            "pack": q.get("pack", ""),
            "doc": q.get("doc", ""),
            "type": q.get("type", ""),
            "anyway": q.get("anyway", "") == "1",
        }
        groups: list[dict[str, Any]] = []
        if form["q"].strip():
            try:
                k = int_param(q.get("k"), PAGE_K)
                check_query(form["q"], k, form["mode"])
                # no pack named: every pack searched as one (a set searcher), when it can be
                one = form["pack"] or library.federated is not None or len(library.packs) == 1
                names = [form["pack"] or None] if one else list(library.packs)
                terms = content_terms(form["q"])
                for name in names:
                    resp = library.search(
                        name,
                        form["q"],
                        k=k,
                        mode=form["mode"],
                        doc=form["doc"] or None,
                        kind=form["type"] or None,
                        refuse=not form["anyway"],
                    )
                    results = []
                    for r in resp.results:
                        of = library.pack_of(r, name)
                        results.append(
                            {
                                "r": r,
                                "pack": of,
                                "quote": highlight(shorten(r.content), terms),
                                "href": reader_href(of, r.doc, r.start, r.end),
                            }
                        )
                    again = {**form, "pack": name or "", "anyway": "1"}
                    groups.append(
                        {
                            "pack": name,
                            "resp": resp,
                            "results": results,
                            "anyway_href": "/?" + urlencode(again),
                            "did_you_mean": did_you_mean(form, resp),
                        }
                    )
            except PackError as e:
                return damaged_page(e)
            except KbpackError as e:
                return page("search.html", status=http_status(e), form=form, groups=[], error=e)
        box = answer_box(library, asker, form) if q.get("ask") and form["q"].strip() else None
        return page("search.html", form=form, groups=groups, error=None, box=box)

    def reader_page(request: Request) -> Response:
        q = request.query_params
        try:
            doc = library.document(q.get("pack"), request.path_params["name"])
            hit = hit_span(doc, q.get("from"), q.get("to"))
            place = place_at(doc, q.get("at"))
            shown = hit or (None if place is None else (place, place))
            view = view_span(doc, shown, q.get("page"))
        except KbpackError as e:
            return error_page(e)
        at = shown[0] if shown else view[0]
        page_ = doc.page_at(at) if doc.pages else None
        return page(
            "doc.html",
            doc=doc,
            hit=hit,
            view=view,
            page_=page_,
            crumbs=[s for s in doc.section_at(at) if s.level > 0],
            outline=[s for s in doc.sections if s.level > 0],
            body=render_text(doc, hit, view, place),
            whole_href=reader_href(doc.pack, doc.name, *(hit or (None, None)), whole=True),
            page_href=lambda n: doc_href(doc.pack, doc.name) + "&" + urlencode({"page": n}),
        )

    def static(request: Request) -> Response:
        found = STATIC.get(request.path_params["name"])
        if found is None:
            return not_found(request, None)
        return Response(found[0], media_type=found[1], headers={"cache-control": "max-age=3600"})

    # -- the JSON API --------------------------------------------------------------------------
    def api_search(request: Request) -> Response:
        q = request.query_params
        try:
            resp = library.search(
                q.get("pack"),
                q.get("q", ""),
                k=int_param(q.get("k"), 5),
                mode=q.get("mode", "hybrid"),
                doc=q.get("doc") or None,
                kind=q.get("type") or None,
                section=q.get("section") or None,
                refuse=q.get("anyway", "") != "1",
            )
        except KbpackError as e:
            return api_error(e)
        name = q.get("pack") or (None if library.federated else library.get(None).name)
        return JSONResponse({**shape("query"), "pack": name, **resp.as_dict()})

    def api_doc(request: Request) -> Response:
        q = request.query_params
        try:
            doc = library.document(q.get("pack"), request.path_params["name"])
            span = hit_span(doc, q.get("from"), q.get("to")) or (0, len(doc.text))
        except KbpackError as e:
            return api_error(e)
        return JSONResponse({**shape("serve"), **document_json(doc, *span)})

    def api_inspect(request: Request) -> Response:
        from kbpack.ops.inspect import describe_reader

        try:
            p = library.get(request.query_params.get("pack"))
            reader, verify = p.reader, p.verify  # one file: the one served, as it was checked
            described = describe_reader(reader, p.path)
        except KbpackError as e:
            return api_error(e)
        return JSONResponse({**shape("inspect"), "pack": p.name, "verify": verify, **described})

    def api_packs(_: Request) -> Response:
        return JSONResponse(
            {**shape("serve"), "packs": [pack_json(p) for p in library.packs.values()]}
        )

    def api_ask(request: Request) -> Response:
        q = request.query_params
        try:
            a = asker.answer(
                q.get("q", ""),
                q.get("pack") or None,
                k=int_param(q.get("k"), 5),
                mode=q.get("mode", "hybrid"),
                doc=q.get("doc"),
                kind=q.get("type"),
                section=q.get("section"),
            )
        except Busy as e:
            return JSONResponse({"error": str(e)}, status_code=503, headers={"retry-after": "5"})
        except KbpackError as e:
            return api_error(e)
        name = q.get("pack") or (None if library.federated else library.get(None).name)
        return JSONResponse(answer_json(a, name))

    def not_found(request: Request, exc: Exception | None) -> Response:
        return PlainTextResponse("not found\n", status_code=404)

    def fresh(endpoint: Any) -> Any:
        """Each request first notices packs whose file changed at their path (a stat each);
        the new file is checked in the background while this request is served the old one.
        An error no endpoint expected (a damaged pack can raise from deep in HDF5) is one log
        line and an error page or JSON error, never a bare 500 with a traceback."""

        def run(request: Request) -> Response:
            try:
                library.refresh()
                return endpoint(request)  # type: ignore[no-any-return]
            except Exception as e:
                error = (
                    e
                    if isinstance(e, KbpackError)
                    else KbpackError(f"internal error: {describe(e)}")
                )
                # the log line holds a client's path and a pack's text: escaped, as every
                # human line kbpack prints (issue 30)
                line = f"kbpack serve: {request.url.path}: {error}"
                print(printable(line), file=sys.stderr, flush=True)
                if request.url.path.startswith("/api/"):
                    return api_error(error)
                return error_page(error)

        return run

    app = Starlette(
        routes=[
            Route("/", fresh(search_page)),
            Route("/doc/{name:docname}", fresh(reader_page)),
            Route("/static/{name}", static),
            Route("/api/search", fresh(api_search)),
            Route("/api/ask", fresh(api_ask)),
            Route("/api/doc/{name:docname}", fresh(api_doc)),
            Route("/api/inspect", fresh(api_inspect)),
            Route("/api/packs", fresh(api_packs)),
        ],
        exception_handlers={404: not_found},
    )
    return Guard(app, token=token, loopback=loopback)


# -- helpers ---------------------------------------------------------------------------------
def shape(command: str) -> dict[str, Any]:
    """The envelope of spec/JSON.md: ``command`` names the CLI command whose keys follow."""
    return {"schema": SCHEMA, "command": command}


def http_status(e: KbpackError) -> int:
    if isinstance(e, NotFound):
        return 404
    return 400 if isinstance(e, UsageError) else 500


def api_error(e: KbpackError) -> JSONResponse:
    return JSONResponse({"error": str(e)}, status_code=http_status(e))


def int_param(raw: str | None, default: int) -> int:
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise UsageError(f"k must be a whole number between 1 and {MAX_K}, not {raw!r}") from None


def doc_href(pack: str, name: str) -> str:
    return f"/doc/{quote(name, safe='/')}?" + urlencode({"pack": pack})


def reader_href(
    pack: str, name: str, start: int | None, end: int | None, *, whole: bool = False
) -> str:
    """The reader at a passage; ``#hit`` scrolls to it (the ``#char=`` locator is for people
    and tools: browsers do not scroll to it)."""
    href = doc_href(pack, name)
    if start is None or end is None:
        return href
    href += "&" + urlencode({"from": start, "to": end})
    return href + ("&page=all" if whole else "") + "#hit"


def hit_span(doc: Document, start: str | None, end: str | None) -> tuple[int, int] | None:
    """``from``/``to`` as offsets into the document's canonical text, or None when absent."""
    if start is None and end is None:
        return None
    try:
        a, b = int(start or ""), int(end or "")
    except ValueError:
        raise UsageError("from and to must be whole numbers (character offsets)") from None
    if not 0 <= a <= b <= len(doc.text):
        raise UsageError(
            f"{doc.name}: from={a}, to={b} is outside the text (0..{len(doc.text)} characters)"
        )
    return a, b


def place_at(doc: Document, raw: str | None) -> int | None:
    """``at``: the place a link of the pack leads to (an offset into the canonical text)."""
    if raw is None or raw == "":
        return None
    try:
        at = int(raw)
    except ValueError:
        raise UsageError("at must be a whole number (a character offset)") from None
    if not 0 <= at <= len(doc.text):
        raise UsageError(f"{doc.name}: at={at} is outside the text (0..{len(doc.text)} characters)")
    return at


def link_href(pack: str, name: str, offset: int) -> str:
    """The reader at the place a link leads to: its document, scrolled to ``#at``."""
    href = doc_href(pack, name)
    return href + f"&at={offset}#at" if offset else href


def view_span(doc: Document, hit: tuple[int, int] | None, page: str | None) -> tuple[int, int]:
    """What the reader shows: a paged document (PDF) one page at a time, the page of the hit
    by default (widened to hold the whole hit); ``page=all`` or an unpaged one: everything."""
    whole = (0, len(doc.text))
    if not doc.pages or page == "all":
        return whole
    if page:
        chosen = next((p for p in doc.pages if str(p.number) == page), None)
        if chosen is None:
            raise NotFound(f"{doc.name} has no page {page} (it has {len(doc.pages)})")
    else:
        chosen = doc.page_at(hit[0]) if hit else doc.pages[0]
        if chosen is None:
            return whole
    start, end = chosen.start, chosen.end
    if hit:
        start, end = min(start, hit[0]), max(end, hit[1])
    return start, end


def did_you_mean(form: SearchForm, resp: Any) -> list[tuple[str, str]]:
    """(the query with one unknown word replaced, its link) for each "did you mean" term."""
    out: list[tuple[str, str]] = []
    for sug in getattr(resp, "suggestions", []):
        for term, _distance, _chunks in sug.did_you_mean:
            word = re.compile(rf"(?<!\w){re.escape(sug.term)}(?!\w)", re.IGNORECASE)
            fixed = word.sub(term, form["q"], count=1)
            if fixed != form["q"]:
                out.append((fixed, "/?" + urlencode({**form, "q": fixed, "anyway": ""})))
    return out


def shorten(text: str) -> str:
    flat = " ".join(text.split())
    if len(flat) <= QUOTE_CHARS:
        return flat
    return flat[:QUOTE_CHARS].rsplit(" ", 1)[0] + " …"


def content_terms(query: str) -> set[str]:
    """The query's terms worth highlighting: as BM25 tokenises them, without function words."""
    return {t for t in tokenize(query) if t not in STOPWORDS}


def highlight(text: str, terms: set[str]) -> Markup:
    """``text`` escaped, with the whole words that are a query term in <mark>: an identifier is
    marked when it is itself a term, not because one of its parts is (``gzip.open`` stays
    unmarked for the query ``gzip``)."""
    out: list[str] = []
    at = 0
    for m in _WORD.finditer(text):
        whole = tokenize(m.group())[:1]  # the word as one token comes first
        if whole and whole[0] in terms:
            out.append(str(escape(text[at : m.start()])))
            out.append(f"<mark>{escape(m.group())}</mark>")
            at = m.end()
    out.append(str(escape(text[at:])))
    return Markup("".join(out))


_FENCE = re.compile(r"^(```|~~~)[^\n]*\n.*?^\1[ \t]*$", re.M | re.S)


def render_text(
    doc: Document,
    hit: tuple[int, int] | None,
    view: tuple[int, int],
    place: int | None = None,
) -> Markup:
    """The canonical text in ``view``, escaped, with an anchor at each section start, a marker at
    each page start, the hit in ``<mark id="hit">``, the place a link led to as ``#at`` and the
    pack's links (spec §3.12) as ``<a class="xref">`` to the page and place they lead to. For
    reading, not for quoting: Markdown's and HTML's fenced code shows as code without its fence
    lines, and a PDF's hard line breaks inside a paragraph show as spaces. Offsets, anchors and
    the hit are those of the canonical text."""
    lo, hi = view
    marks: dict[int, list[str]] = {}
    if place is not None and lo <= place <= hi:
        marks.setdefault(place, []).append('<span class="anchor" id="at"></span>')
    links = [
        (max(a, lo), min(b, hi), link_href(doc.pack, target, offset))
        for a, b, target, offset in doc.links
        if a < hi and b > lo
    ]
    for s in doc.sections:
        if s.level > 0 and lo <= s.start < hi:
            marks.setdefault(s.start, []).append(f'<span class="anchor" id="s{s.row}"></span>')
    for p in doc.pages:
        if lo <= p.start < hi and p.start > 0:
            marks.setdefault(p.start, []).append(
                f'<span class="pagebreak" id="p{p.number}">page {p.number}</span>'
            )
    fences, code = _code_blocks(doc, lo, hi)
    cuts = {lo, hi, *marks, *(x for span in fences | code for x in span)}
    cuts |= {x for a, b, _ in links for x in (a, b)}
    headings = _heading_lines(doc, lo, hi)
    cuts |= {x for a, b, _ in headings for x in (a, b)}
    link_starts = [a for a, _, _ in links]
    heading_starts = [a for a, _, _ in headings]
    if hit:
        cuts |= {max(lo, hit[0]), min(hi, hit[1])}
    points = sorted(c for c in cuts if lo <= c <= hi)
    out: list[str] = []
    # the hit is one <mark id=hit> around every piece inside it (each piece is cut at its ends)
    shown = (max(lo, hit[0]), min(hi, hit[1])) if hit and hit[0] < hit[1] else None
    for a, b in zip(points, [*points[1:], None], strict=True):
        if shown and a == shown[1]:
            out.append("</mark>")
        out.extend(marks.get(a, []))
        if shown and a == shown[0]:
            out.append("<mark id=hit>")
        if b is None:
            break
        chunk = str(escape(_for_reading(doc, a, b)))
        if any(f[0] <= a and b <= f[1] for f in fences):
            chunk = f'<span class="fence">{chunk}</span>'
        elif any(c[0] <= a and b <= c[1] for c in code):
            chunk = f'<code class="block">{chunk}</code>'
        k = bisect_right(heading_starts, a) - 1  # headings are in text order and apart
        if k >= 0 and b <= headings[k][1]:
            level = min(headings[k][2], 6)
            chunk = f'<strong class="heading level{level}">{chunk}</strong>'
        k = bisect_right(link_starts, a) - 1  # links are in text order and apart
        href = links[k][2] if k >= 0 and b <= links[k][1] else None
        if href is not None:
            chunk = f'<a class="xref" href="{escape(href)}">{chunk}</a>'
        out.append(chunk)
    return Markup("".join(out))


def _heading_lines(doc: Document, lo: int, hi: int) -> list[tuple[int, int, int]]:
    """The line each section starts with (its heading), as (from, to, level) in ``[lo, hi)``."""
    out = []
    for s in doc.sections:
        if s.level > 0 and lo <= s.start < hi:
            end = doc.text.find("\n", s.start, s.end)
            out.append((s.start, min(hi, end if end != -1 else s.end), s.level))
    return out


def _code_blocks(
    doc: Document, lo: int, hi: int
) -> tuple[set[tuple[int, int]], set[tuple[int, int]]]:
    """Markdown fenced code (and HTML ``<pre>``, fenced alike) in ``[lo, hi)``: the fence lines
    (with their line ends) and the code between them, as canonical-text spans."""
    fences: set[tuple[int, int]] = set()
    code: set[tuple[int, int]] = set()
    if doc.kind not in ("md", "markdown", "html"):  # HTML's <pre> is fenced too (extract/html.py)
        return fences, code
    for m in _FENCE.finditer(doc.text):
        if m.end() <= lo or m.start() >= hi:
            continue
        open_end = doc.text.index("\n", m.start()) + 1
        close_start = doc.text.rindex("\n", m.start(), m.end()) + 1
        close_end = min(m.end() + 1, len(doc.text))  # the closing fence's line end too
        fences |= {(m.start(), open_end), (close_start, close_end)}
        if open_end < close_start:
            code.add((open_end, close_start))
    return fences, code


def _for_reading(doc: Document, a: int, b: int) -> str:
    """``doc.text[a:b]``, with a PDF's single line breaks (inside a paragraph) as spaces, or as
    nothing after a hyphen (kept: "well-known" must not become "wellknown"); blank lines and
    the line breaks next to them stay."""
    text = doc.text[a:b]
    if doc.kind != "pdf" or "\n" not in text:
        return text
    full = doc.text
    out: list[str] = []
    last = a
    at = full.find("\n", a, b)
    while at != -1:
        before, after = full[at - 1 : at], full[at + 1 : at + 2]
        if before not in ("", "\n") and after not in ("", "\n"):
            out.append(full[last:at])
            out.append("" if before == "-" else " ")
            last = at + 1
        at = full.find("\n", at + 1, b)
    out.append(full[last:b])
    return "".join(out)


def document_json(doc: Document, start: int, end: int) -> dict[str, Any]:
    return {
        "pack": doc.pack,
        "name": doc.name,
        "title": doc.title,
        "type": doc.kind,
        "length": len(doc.text),
        "from": start,
        "to": end,
        "text": doc.text[start:end],
        "sections": [
            {
                "id": s.row,
                "level": s.level,
                "title": s.title,
                "from": s.start,
                "to": s.end,
                "parent": s.parent,
            }
            for s in doc.sections
        ],
        "pages": [{"number": p.number, "from": p.start, "to": p.end} for p in doc.pages],
        "links": [{"from": a, "to": b, "name": t, "at": at} for a, b, t, at in doc.links],
    }


def pack_json(p: Any) -> dict[str, Any]:
    r = p.reader
    return {
        "name": p.name,
        "path": str(p.path),
        "documents": len(p.documents),
        "chunks": int(r.counts.get("chunks", 0)),
        "model": None if r.model is None else r.model.get("name"),
        "dense": p.searcher.embedder is not None,
        "notes": p.notes,
        "verify": p.verify,
    }


# -- the answer box --------------------------------------------------------------------------
def answer_box(library: Library, asker: Asker, form: SearchForm) -> dict[str, Any]:
    """What the page's answer box shows for the Ask button: the checked answer, each ``[n]`` a
    link to the reader at the cited passage, or why there is none."""
    try:
        a = asker.answer(
            form["q"],
            form["pack"] or None,
            mode=form["mode"],
            doc=form["doc"],
            kind=form["type"],
        )
    except KbpackError as e:
        return {"error": str(e)}
    hrefs = {c["n"]: citation_href(library, c, form["pack"]) for c in a.citations}
    label = None
    if a.fallback:
        label = fallback_reason(a, "no chat model is loaded (kbpack serve --llm MODEL.gguf)")

    def lines(checks: list[Any]) -> list[dict[str, Any]]:
        return [
            {"html": link_citations(s.text, hrefs), "supported": s.supported, "why": s.why}
            for s in checks
        ]

    cited = {n for s in a.sentences for n in s.citations}
    return {
        "a": a,
        "label": label,
        "sentences": lines(a.sentences),
        "draft": lines(a.draft_sentences),
        "sources": [(c, hrefs[c["n"]]) for c in a.citations if c["n"] in cited],
        "flagged": list(dict.fromkeys(f["text"] for f in a.flagged)),
        "notes": [n for n in a.notes if n != a.answer],
        "error": None,
    }


def citation_href(library: Library, c: dict[str, Any], pack: str) -> str:
    """The reader at a citation: the pack is the one named on the page, else the result's."""
    name = library.by_file.get(c.get("pack") or "", "") or pack or library.get(None).name
    return reader_href(name, c["doc"], c["from"], c["to"])


def link_citations(text: str, hrefs: dict[int, str]) -> Markup:
    """``text`` escaped, each ``[n]`` of a known source a link to it (others stay text)."""
    out: list[str] = []
    at = 0
    for m in CITATION.finditer(text):
        numbers = [int(n) for n in re.findall(r"\d+", m.group(1))]
        if not all(n in hrefs for n in numbers):
            continue
        out.append(str(escape(text[at : m.start()])))
        out.append("".join(f'<a class="cite" href="{escape(hrefs[n])}">[{n}]</a>' for n in numbers))
        at = m.end()
    out.append(str(escape(text[at:])))
    return Markup("".join(out))
