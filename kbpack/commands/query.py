"""``kbpack query``: answers with citations, or an honest NO ANSWER (exit 3)."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from kbpack.choices import KIND_BY_SUFFIX, MODES
from kbpack.commands.common import (
    Choice,
    emit_json,
    emit_json_line,
    json_option,
    quiet_option,
    threads_option,
)
from kbpack.errors import Exit, KbpackError, UsageError

KINDS = sorted(set(KIND_BY_SUFFIX.values()))

PROMPT_INSTRUCTIONS = (
    "Answer the question using only the numbered sources below. Cite the sources you use as [n]. "
    "If the sources do not contain the answer, say that they do not; do not guess."
)


def check_distance(value: float | None) -> float | None:
    """A cosine distance lies in [0, 2]; NaN or a negative value would silently refuse (or
    answer) everything, so it is a usage error."""
    if value is not None and not 0.0 <= value <= 2.0:
        raise click.BadParameter(
            f"{value}: give a cosine distance between 0 and 2 (the default is the pack's, e.g. 0.675)",
            param_hint="'--max-distance'",
        )
    return value


class QueryCommand(click.Command):
    """Unknown options are usage errors (a typo must never become query text); an unknown
    option that resembles no option is probably a query starting with "-": say how to pass it."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as e:
            if e.possibilities:
                raise
            raise click.UsageError(
                f"no such option {e.option_name!r}; a query that starts with "
                f'"-" goes after --: kbpack query PACK -- "{e.option_name} ..."',
                ctx,
            ) from e


@click.command(cls=QueryCommand)
@click.argument("pack", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("text", nargs=-1)
@click.option(
    "-k", "k", type=click.IntRange(min=1), default=5, show_default=True, help="Results to return."
)
@click.option(
    "--mode",
    type=Choice(MODES),
    default="hybrid",
    show_default=True,
    help="hybrid: dense + BM25 fused; dense: vectors only (needs the pack's model); bm25: words only.",
)
@click.option(
    "--max-distance",
    type=float,
    callback=lambda _ctx, _param, v: check_distance(v),
    help="Refusal threshold (cosine distance, 0-2); default: the pack's.",
)
@click.option(
    "--model",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Query-side GGUF model (must be the pack's model).",
)
@click.option("--doc", "doc_glob", metavar="GLOB", help="Only documents whose name matches GLOB.")
@click.option("--type", "kind", type=Choice(KINDS), help="Only documents of this type.")
@click.option("--section", metavar="TEXT", help="Only sections whose path contains TEXT.")
@click.option(
    "--context",
    type=Choice(["chunk", "section"]),
    default="chunk",
    show_default=True,
    help="Quote the chunk or its whole section.",
)
@click.option(
    "--format",
    "fmt",
    type=Choice(["text", "prompt"]),
    default="text",
    show_default=True,
    help="prompt: a prompt for a local LLM, sources packed under --budget-tokens.",
)
@click.option(
    "--budget-tokens",
    type=click.IntRange(min=16),
    default=3000,
    show_default=True,
    help="Token budget for the sources (with --format prompt only).",
)
@click.option(
    "--rerank",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Cross-encoder GGUF (rank pooling) that reorders the top results (README Models).",
)
@click.option(
    "--rerank-top",
    type=click.IntRange(min=1),
    default=25,
    show_default=True,
    help="How many results that pass the refusal gate the reranker scores.",
)
@click.option(
    "--batch",
    type=click.File("rb"),
    help="Read queries from FILE (- for stdin): one per line, text or JSON {id, query}.",
)
@click.option("--full", is_flag=True, help="Print whole quotes (default: cut at 600 characters).")
@threads_option
@json_option
@quiet_option
def query(pack: Path, text: tuple[str, ...], **kw: Any) -> int:
    """Search PACK for TEXT. Exit 0 with results, 3 when nothing passes the threshold.

    Several packs (kbpack query A.kbpack B.kbpack TEXT) are searched as one: leading
    arguments that name existing *.kbpack files are packs, the rest is the query. A query that
    starts with "-" goes after --: kbpack query PACK -- "-X importtime".
    """
    import kbpack

    batch = kw.pop("batch")
    more = list(text)
    packs = [pack]
    while more and more[0].endswith(".kbpack") and Path(more[0]).is_file():
        packs.append(Path(more.pop(0)))
    text = tuple(more)
    ctx = click.get_current_context()
    if (
        ctx.get_parameter_source("budget_tokens") == ParameterSource.COMMANDLINE
        and kw["fmt"] != "prompt"
    ):
        raise click.UsageError(
            "--budget-tokens applies to --format prompt only; add --format prompt"
        )
    if batch is None and not " ".join(text).strip():
        raise click.UsageError('give a query: kbpack query PACK "your question" (or --batch FILE)')
    if batch is not None and text:
        raise click.UsageError("give either a query or --batch, not both")
    if batch is not None and kw["fmt"] == "prompt":
        raise click.UsageError("--format prompt takes one query, not --batch")
    how = {
        "model": kw.pop("model"),
        "load_model": kw["mode"] != "bm25",
        "threads": kw.pop("threads"),
        "rerank": kw.pop("rerank"),
    }
    opened = kbpack.open(pack, **how) if len(packs) == 1 else kbpack.open_many(packs, **how)
    with opened as p:
        code = _answer(p, text, batch, kw)
        if not kw["quiet"]:
            _verify_hint(p)
        return code


def _answer(p: Any, text: tuple[str, ...], batch: Any, kw: dict[str, Any]) -> int:
    _check_mode(p, kw["mode"])
    _check_filters(p, kw)
    if batch is not None:
        return _batch(p, batch, kw)
    resp = _search(p, " ".join(text), kw)
    if kw["fmt"] == "prompt":
        return _prompt(p, resp, kw)
    if kw["as_json"]:
        emit_json(resp.as_dict())
    else:
        click.echo(render(resp, full=kw["full"] or kw["context"] == "section"))
    return Exit.OK if resp.answered else Exit.REFUSED


def _verify_hint(p: Any) -> None:
    """One stderr line, after the answer, for packs never verified on this machine (a stat and
    a marker's stat per pack: kbpack/verified.py). Never on stdout, so --json stays pure."""
    from kbpack.verified import hint, was_verified

    readers = getattr(p, "readers", None) or [p.reader]
    never = [r.path for r in readers if not was_verified(r.path, r.manifest.hdf5_sha256)]
    if never:
        click.echo(hint(never), err=True)


def _check_mode(p: Any, mode: str) -> None:
    """--mode dense without the pack's model is an error, not a silent switch to BM25."""
    if mode == "dense" and p.embedder is None:
        why = "; ".join(n.removesuffix(": lexical-only results") for n in p.searcher.notes)
        why = why or "the pack's model is not available"
        raise UsageError(f"{_label(p)}: --mode dense cannot run: {why}")


def _check_filters(p: Any, kw: dict[str, Any]) -> None:
    """A filter that matches no chunk is a usage error (it would look like a refusal)."""
    filters = {"--doc": kw["doc_glob"], "--type": kw["kind"], "--section": kw["section"]}
    given = [f"{k} {v!r}" for k, v in filters.items() if v]
    if given and p.searcher.count_matching(kw["doc_glob"], kw["kind"], kw["section"]) == 0:
        raise UsageError(
            f"{_label(p)}: no chunk matches {' '.join(given)}; kbpack export PACK --what documents "
            "lists the names"
        )


def _label(p: Any) -> str:
    """The pack, or the packs of a federated query, as an error names them."""
    return ", ".join(str(x) for x in getattr(p, "paths", None) or [p.path])


def _search(p: Any, q: str, kw: dict[str, Any]) -> Any:
    return p.search(
        q,
        k=kw["k"],
        mode=kw["mode"],
        max_distance=kw["max_distance"],
        doc=kw["doc_glob"],
        kind=kw["kind"],
        section=kw["section"],
        context=kw["context"],
        rerank_top=kw["rerank_top"],
    )


def _batch(p: Any, stream: Any, kw: dict[str, Any]) -> int:
    """One JSON line per query, the model loaded once. A line that cannot be read or answered
    gets a JSON line with its id and an ``error``, and the run goes on: no answer is ever lost
    to another line's fault. Exit 1 if any line failed (refusals are answers, not failures).
    On a terminal, stderr counts the lines done (stdout is the JSON); --quiet silences it."""
    from kbpack.progress import Progress

    progress = Progress(False if kw["quiet"] else None)
    failed = 0
    for n, raw in enumerate(stream, 1):
        qid, q, error = parse_batch_line(raw, n)
        if q is None and error is None:
            continue  # a blank line
        if error is None:
            assert q is not None  # parse_batch_line gives a query or an error
            try:
                out = {"id": qid, **_search(p, q, kw).as_dict()}
            except KbpackError as e:
                error = str(e)
        if error is not None:
            failed += 1
            out = {"id": qid, "line": n, "error": error}
        emit_json_line(out)
        sys.stdout.flush()
        progress.update("queries", n, unit="lines", detail=f"{failed} failed")
    progress.done()
    return Exit.FAILURE if failed else Exit.OK


def parse_batch_line(raw: bytes, n: int) -> tuple[Any, str | None, str | None]:
    """(id, query, error) of one --batch line; (n, None, None) for a blank line."""
    try:
        line = raw.decode("utf-8").strip()
    except UnicodeDecodeError as e:
        return n, None, f"line {n}: not UTF-8 (byte {e.start}); save the file as UTF-8"
    if not line:
        return n, None, None
    qid: Any = n
    q: Any = line
    if line.startswith("{"):
        try:
            obj = json.loads(line)
        except ValueError as e:
            return (
                n,
                None,
                f'line {n}: not valid JSON ({e}); give text or {{"id": ..., "query": ...}}',
            )
        if not isinstance(obj, dict) or not isinstance(obj.get("query"), str):
            return n, None, f'line {n}: a JSON line needs a "query" string'
        q, qid = obj["query"], obj.get("id", n)
        if not isinstance(qid, (str, int)) or isinstance(qid, bool):
            return n, None, f'line {n}: "id" must be a string or an integer'
    if any("\ud800" <= ch <= "\udfff" for ch in q):
        return (
            qid,
            None,
            f"line {n}: the query holds a lone surrogate escape; fix the line's encoding",
        )
    if not q.strip():
        return qid, None, f"line {n}: empty query"
    return qid, q, None


QUOTE_CHARS = 600  # a quote longer than this is cut (with " …") unless --full


def render(resp: Any, full: bool = False) -> str:
    """Results as a person reads them. The lexical-only fallback is said first, not last; names
    and text are printed with control characters escaped (a name cannot split a line or send
    escape sequences to the terminal)."""
    head = [f"note: {safe(n)}" for n in resp.notes if resp.lexical_only]
    tail = [f"note: {safe(n)}" for n in resp.notes if not resp.lexical_only]
    if not resp.answered:
        if resp.threshold is not None:
            line = f'NO ANSWER: nothing under cosine distance {resp.threshold:g} for "{safe(resp.query)}"'
        else:
            line = f'NO ANSWER: no chunk matches any term of "{safe(resp.query)}"'
        return "\n".join([*head, line, *did_you_mean(resp), *tail])
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
    out.extend(did_you_mean(resp))
    out.extend(tail)
    return "\n".join(out)


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


# C0 and C1 control characters as visible escapes: an ESC in a document's name must not reach
# the terminal raw, a CR must not overwrite the line.
_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x00, 0x20), *range(0x7F, 0xA0))}
_CONTROL_KEEP_LINES = {c: e for c, e in _CONTROL.items() if chr(c) not in "\n\t"}


def safe(field: str) -> str:
    """A one-line field (name, section, locator, query): every control character escaped."""
    return field.translate(_CONTROL)


def safe_text(text: str) -> str:
    """Text shown as text: control characters escaped, newlines and tabs kept."""
    return text.translate(_CONTROL_KEEP_LINES)


def _prompt(p: Any, resp: Any, kw: dict[str, Any]) -> int:
    """Pack the best sources under the token budget; the citation table stays outside the prompt."""
    count = p.embedder.count_tokens if p.embedder is not None else (lambda s: len(s) // 4 + 1)
    used = 0
    sources: list[tuple[Any, str]] = []
    for r in resp.results:
        block = f"[{len(sources) + 1}] {r.doc} — {r.section or r.title}\n{r.content}\n"
        cost = count(block)
        if used + cost > kw["budget_tokens"]:
            continue
        used += cost
        sources.append((r, block))
    prompt = "\n".join(
        [
            PROMPT_INSTRUCTIONS,
            "",
            "Sources:",
            *(b for _, b in sources),
            f"Question: {resp.query}",
            "Answer:",
        ]
    )
    citations = [
        {
            "n": i + 1,
            **({"pack": r.pack} if r.pack else {}),
            "doc": r.doc,
            "section": r.section,
            "locator": r.locator,
            "page": r.page,
            "from": r.start,
            "to": r.end,
        }
        for i, (r, _) in enumerate(sources)
    ]
    if kw["as_json"]:
        emit_json(
            {
                "prompt": prompt,
                "tokens": used,
                "budget_tokens": kw["budget_tokens"],
                "answered": bool(sources),
                "citations": citations,
            }
        )
    else:
        click.echo(prompt)
        click.echo("\n--- citations (kept outside the prompt) ---", err=True)
        for c in citations:
            click.echo(f"[{c['n']}] {c['locator']}", err=True)
    return Exit.OK if sources else Exit.REFUSED
