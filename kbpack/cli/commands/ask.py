"""``kbpack ask``: an answer from a local chat model, every sentence checked against the passage
it cites; or the pack's own sentences; or "not in this pack" (exit 3, nothing generated)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from kbpack.answer.generate import DEFAULT_CONTEXT
from kbpack.cli.commands.common import emit_json, pick, say
from kbpack.cli.commands.query import QueryCommand
from kbpack.cli.options import (
    at_least,
    flag,
    json_option,
    k_option,
    llm_options,
    model_option,
    pack_argument,
    quiet_option,
    text_argument,
    threads_option,
)
from kbpack.errors import Exit, UsageError
from kbpack.runtime.terminal import printable


@click.command(cls=QueryCommand)
@pack_argument()
@text_argument()
@llm_options(
    "Chat model GGUF that writes the answer (identified by its SHA-256).",
    max_tokens_help="Most tokens the model may write.",
    context=DEFAULT_CONTEXT,
    context_help="Tokens for the sources and question (--max-tokens come on top): fewer give "
    "fewer passages and a sooner first token.",
)
@flag("--extractive", help="No model: quote the pack's best-matching sentences.")
@k_option("Passages to retrieve.")
@at_least(
    "--temperature", 0.0, 0.0, "0: greedy, the same answer every time (a fixed seed otherwise)."
)
@flag(
    "--show-passages",
    help="When the pack refuses, list the nearest passages anyway (not an answer).",
)
@model_option("Query-side embedding GGUF (must be the pack's model).")
@threads_option()
@json_option()
@quiet_option()
def ask(pack: Path, text: tuple[str, ...], **kw: Any) -> int:
    """Answer QUESTION from PACK with a local chat model (--llm MODEL.gguf), citing passages.

    Retrieval is query's: when nothing passes the refusal threshold the answer is "not in
    this pack" (exit 3) and no model runs. Each sentence of the model's answer is checked
    against the passage it cites; unsupported ones are marked, and an answer with no supported
    sentence is replaced by the pack's best-matching sentences, quoted. Several packs
    (kbpack ask A.kbpack B.kbpack QUESTION) are searched as one.
    """
    import kbpack

    more = list(text)
    packs = [pack]
    while more and more[0].endswith(".kbpack") and Path(more[0]).is_file():
        packs.append(Path(more.pop(0)))
    question = " ".join(more).strip()
    if not question:
        raise click.UsageError('give a question: kbpack ask PACK "your question" --llm MODEL.gguf')
    llm: Path | None = kw["llm"]
    if llm is None and not kw["extractive"]:
        raise UsageError(
            "give the chat model: --llm MODEL.gguf (README, Ask), or --extractive for the "
            "pack's own sentences"
        )
    if llm is not None and kw["extractive"]:
        raise click.UsageError("give either --llm or --extractive, not both")
    if llm is not None:
        from kbpack.answer.generate import check_chat_gguf

        check_chat_gguf(llm)  # a wrong file is a usage error before the pack is opened
    how = {"model": kw["model"], "threads": kw["threads"]}
    opened = kbpack.open(pack, **how) if len(packs) == 1 else kbpack.open_many(packs, **how)
    with opened as p:
        return _ask(p, question, llm, kw)


def _ask(p: Any, question: str, llm: Path | None, kw: dict[str, Any]) -> int:
    from kbpack.answer.answer import ask, render_text

    streaming = not (kw["quiet"] or kw["as_json"])
    started = False

    def on_token(piece: str) -> None:
        # the model's draft as it comes, on stderr: stdout gets the checked answer
        nonlocal started
        if not started:
            click.echo("model: ", err=True, nl=False)
            started = True
        sys.stderr.write(printable(piece, lines=True))  # the model may echo a pack's bytes
        sys.stderr.flush()

    try:
        asked = pick(kw, "k", "max_tokens", "temperature", "threads", "context", "show_passages")
        a = ask(p, question, llm, **asked, on_token=on_token if streaming else None)
    finally:
        if started:
            say("", err=True)  # end the draft's line, also when Ctrl-C cut it
    if kw["as_json"]:
        emit_json(a.as_dict())
    else:
        say(render_text(a))
    return Exit.REFUSED if a.refused else Exit.OK
