"""``kbpack query``: answers with citations, or an honest NO ANSWER (exit 3)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from kbpack.choices import KIND_BY_SUFFIX, MODES
from kbpack.cli.commands.common import Choice, emit_json, emit_json_line, pick, say
from kbpack.cli.options import (
    chosen,
    counted,
    flag,
    ivf_options,
    json_option,
    k_option,
    model_option,
    pack_argument,
    quiet_option,
    rerank_options,
    signature_options,
    text_argument,
    threads_option,
)
from kbpack.errors import Exit, KbpackError, UsageError
from kbpack.runtime.terminal import printable

KINDS = sorted(set(KIND_BY_SUFFIX.values()))


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
@pack_argument()
@text_argument()
@k_option("Results to return.")
@chosen(
    "--mode",
    choices=MODES,
    default="hybrid",
    help="hybrid: dense + BM25 fused; dense: vectors only (needs the pack's model); bm25: words only.",
)
@click.option(
    "--max-distance",
    type=float,
    callback=lambda _ctx, _param, v: check_distance(v),
    help="Refusal threshold (cosine distance, 0-2); default: the pack's.",
)
@model_option()
@click.option("--doc", "doc_glob", metavar="GLOB", help="Only documents whose name matches GLOB.")
@click.option("--type", "kind", type=Choice(KINDS), help="Only documents of this type.")
@click.option("--section", metavar="TEXT", help="Only sections whose path contains TEXT.")
@chosen(
    "--context",
    choices=["chunk", "section"],
    default="chunk",
    help="Quote the chunk or its whole section.",
)
@chosen(
    "--format",
    "fmt",
    choices=["text", "prompt"],
    default="text",
    help="prompt: a prompt for a local LLM, sources packed under --budget-tokens.",
)
@counted(
    "--budget-tokens",
    default=3000,
    low=16,
    help="Token budget for the sources (with --format prompt only).",
)
@rerank_options(
    "Cross-encoder GGUF (rank pooling) that reorders the top results (README Models).",
    "How many results that pass the refusal gate the reranker scores.",
)
@click.option(
    "--batch",
    type=click.File("rb"),
    help="Read queries from FILE (- for stdin): one per line, text or JSON {id, query}.",
)
@flag("--full", help="Print whole quotes (default: cut at 600 characters).")
@ivf_options()
@threads_option()
@json_option()
@quiet_option()
@signature_options()
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
        "require_signature": kw.pop("require_signature"),
        "allow_unsigned": kw.pop("allow_unsigned"),
        "key": kw.pop("signature_key"),
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
        from kbpack.cli.render import render  # not needed for --json

        say(render(resp, full=kw["full"] or kw["context"] == "section"))
    return Exit.OK if resp.answered else Exit.REFUSED


def _verify_hint(p: Any) -> None:
    """One stderr line, after the answer, for packs never verified on this machine (a stat and
    a marker's stat per pack: kbpack/pack/verified.py). Never on stdout, so --json stays pure."""
    from kbpack.pack.verified import hint, was_verified

    readers = getattr(p, "readers", None) or [p.reader]
    never = [r.path for r in readers if not was_verified(r.path, r.manifest.hdf5_sha256)]
    if never:
        say(hint(never), err=True)


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
    how = pick(
        kw,
        "k",
        "mode",
        "max_distance",
        "kind",
        "section",
        "context",
        "rerank_top",
        "exact",
        "probe",
    )
    return p.search(q, **how, doc=kw["doc_glob"])


def _batch(p: Any, stream: Any, kw: dict[str, Any]) -> int:
    """One JSON line per query, the model loaded once. A line that cannot be read or answered
    gets a JSON line with its id and an ``error``, and the run goes on: no answer is ever lost
    to another line's fault. Exit 1 if any line failed (refusals are answers, not failures).
    On a terminal, stderr counts the lines done (stdout is the JSON); --quiet silences it."""
    from kbpack.cli.batch_queries import parse_batch_line
    from kbpack.runtime.progress import Progress

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


def _prompt(p: Any, resp: Any, kw: dict[str, Any]) -> int:
    """Print the prompt (stdout) and its citation table (stderr), or both as JSON."""
    from kbpack.search.prompt import build_prompt, rough_tokens

    count = p.embedder.count_tokens if p.embedder is not None else rough_tokens
    prompt = build_prompt(resp, kw["budget_tokens"], count)
    if kw["as_json"]:
        emit_json(prompt.as_dict())
    else:
        say(prompt.text)
        say("\n--- citations (kept outside the prompt) ---", err=True)
        for c in prompt.citations:
            say(f"[{c['n']}] {printable(c['locator'])}", err=True)
    return Exit.OK if prompt.answered else Exit.REFUSED
