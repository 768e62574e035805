"""``kbpack mcp``: packs served to local agents over the Model Context Protocol (stdio)."""

from __future__ import annotations

from pathlib import Path

import click

from kbpack.cli.commands.common import (
    signature_options,
)
from kbpack.cli.commands.serve import (
    _asker,
    _check_llm,
    _common,
    _llm_options,
    _needs,
    _one_check,
    _packs_argument,
)


@click.command()
@_packs_argument
@_common
@_llm_options
@signature_options
def mcp(
    packs: tuple[Path, ...],
    no_verify: bool,
    full_verify: bool,
    model: Path | None,
    llm: Path | None,
    max_tokens: int,
    context: int,
    require_signature: bool,
    signature_key: Path | None,
    allow_unsigned: bool,
) -> int:
    """Serve PACKs to a local agent over the Model Context Protocol (stdio).

    Tools: search(query, k, mode), read(doc, from, to) and ask(question, k) (the checked
    answer; with --llm written by the chat model). Stdout is the protocol, so there is no
    --json: every message on it is JSON-RPC already.
    """
    _needs("mcp")
    _check_llm(llm)
    from kbpack.pack.sign import SignaturePolicy
    from kbpack.serve.library import Library
    from kbpack.serve.mcp_tools import run_stdio

    _one_check(no_verify, full_verify)
    with Library(
        list(packs),
        model=model,
        verify=not no_verify,
        full_verify=full_verify,
        policy=SignaturePolicy(signature_key, require_signature, allow_unsigned),
    ) as library:
        run_stdio(library, _asker(library, llm, max_tokens, context))
    return 0
