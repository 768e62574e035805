"""``kbpack query``: answers with citations, or an honest NO ANSWER (exit 3)."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import click

from kbpack.commands.common import emit_json, json_option
from kbpack.errors import UsageError

PROMPT_INSTRUCTIONS = (
    "Answer the question using only the numbered sources below. Cite the sources you use as [n]. "
    "If the sources do not contain the answer, say that they do not; do not guess."
)


# Queries may start with "-" ("-X importtime"): unknown options are taken as query text.
@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("pack", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("text", nargs=-1, type=click.UNPROCESSED)
@click.option(
    "-k", "k", type=click.IntRange(min=1), default=5, show_default=True, help="Results to return."
)
@click.option(
    "--mode", type=click.Choice(["hybrid", "dense", "bm25"]), default="hybrid", show_default=True
)
@click.option(
    "--max-distance", type=float, help="Refusal threshold (cosine distance); default: the pack's."
)
@click.option(
    "--model",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Query-side GGUF model (must be the pack's model).",
)
@click.option("--doc", "doc_glob", metavar="GLOB", help="Only documents whose name matches GLOB.")
@click.option(
    "--type", "kind", metavar="TYPE", help="Only documents of this type: md, txt, html, pdf, docx."
)
@click.option("--section", metavar="TEXT", help="Only sections whose path contains TEXT.")
@click.option(
    "--context",
    type=click.Choice(["chunk", "section"]),
    default="chunk",
    show_default=True,
    help="Quote the chunk or its whole section.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "prompt"]),
    default="text",
    show_default=True,
    help="prompt: a prompt for a local LLM, sources packed under --budget-tokens.",
)
@click.option(
    "--budget-tokens",
    type=click.IntRange(min=16),
    default=3000,
    show_default=True,
    help="Token budget for the sources in --format prompt.",
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
    type=click.File("r"),
    help="Read queries from FILE (- for stdin): one per line, text or JSON {id, query}.",
)
@json_option
def query(pack: Path, text: tuple[str, ...], **kw: Any) -> int:
    """Search PACK for TEXT. Exit 0 with results, 3 when nothing passes the threshold.

    Several packs (``kbpack query A.kbpack B.kbpack TEXT``) are searched as one: leading
    arguments that name existing ``*.kbpack`` files are packs, the rest is the query."""
    import kbpack

    batch = kw.pop("batch")
    more = list(text)
    packs = [pack]
    while more and more[0].endswith(".kbpack") and Path(more[0]).is_file():
        packs.append(Path(more.pop(0)))
    text = tuple(more)
    if batch is None and not text:
        raise click.UsageError('give a query: kbpack query PACK "your question" (or --batch FILE)')
    if batch is not None and text:
        raise click.UsageError("give either a query or --batch, not both")
    model, load_model, rerank = kw.pop("model"), kw["mode"] != "bm25", kw.pop("rerank")
    opened = (
        kbpack.open(pack, model=model, load_model=load_model, rerank=rerank)
        if len(packs) == 1
        else kbpack.open_many(packs, model=model, load_model=load_model, rerank=rerank)
    )
    with opened as p:
        if batch is not None:
            return _batch(p, batch, kw)
        resp = _search(p, " ".join(text), kw)
        if kw["fmt"] == "prompt":
            return _prompt(p, resp, kw)
        if kw["as_json"]:
            emit_json(resp.as_dict())
        else:
            click.echo(render(resp))
        return 0 if resp.answered else 3


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
    """One JSON line per query; the model is loaded once. Exit 0 even when some are refused."""
    name = getattr(stream, "name", "<stdin>")
    for n, line in enumerate(stream, 1):
        line = line.strip()
        if not line:
            continue
        qid: Any = n
        q = line
        if line.startswith("{"):
            try:
                obj = json.loads(line)
                q, qid = obj["query"], obj.get("id", n)
            except (ValueError, KeyError, TypeError) as e:
                raise UsageError(
                    f"{name} line {n}: not a JSON object with a 'query' string ({e})"
                ) from e
        resp = _search(p, str(q), kw)
        out = {"id": qid, **resp.as_dict()}
        click.echo(json.dumps(out, ensure_ascii=False))
        sys.stdout.flush()
    return 0


def render(resp: Any) -> str:
    if not resp.answered:
        if resp.threshold is not None:
            line = f'NO ANSWER: nothing under cosine distance {resp.threshold:g} for "{resp.query}"'
        else:
            line = f'NO ANSWER: no chunk matches any term of "{resp.query}"'
        return "\n".join([line, *(f"note: {n}" for n in resp.notes)])
    out = []
    for r in resp.results:
        dist = "-" if r.distance is None else f"{r.distance:.3f}"
        bm = "-" if r.bm25_rank is None else str(r.bm25_rank)
        where = f"{r.pack}: " if r.pack else ""
        out.append(f"[{r.rank}] {where}{r.locator}")
        meta = f"    {r.section or r.title}  ·  distance {dist}  ·  bm25 rank {bm}"
        if r.rerank_score is not None:
            meta += f"  ·  rerank {r.rerank_score:.3f}"
        out.append(meta)
        quote = " ".join(r.content.split())
        out.append(
            textwrap.indent(
                textwrap.fill(textwrap.shorten(quote, 600, placeholder=" …"), 96), "    "
            )
        )
    out.extend(f"note: {n}" for n in resp.notes)
    return "\n".join(out)


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
                "citations": citations,
                "answer": bool(sources) or None,
            }
        )
    else:
        click.echo(prompt)
        click.echo("\n--- citations (kept outside the prompt) ---", err=True)
        for c in citations:
            click.echo(f"[{c['n']}] {c['locator']}", err=True)
    return 0 if sources else 3
