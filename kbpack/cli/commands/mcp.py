"""``kbpack mcp``: packs served to local agents over the Model Context Protocol (stdio)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from kbpack.cli.commands.serve import asker, check_llm, needs, open_library, serving_options
from kbpack.cli.options import packs_argument, signature_options
from kbpack.errors import Exit


@click.command()
@packs_argument()
@serving_options
@signature_options()
def mcp(packs: tuple[Path, ...], **kw: Any) -> int:
    """Serve PACKs to a local agent over the Model Context Protocol (stdio).

    Tools: search(query, k, mode), read(doc, from, to) and ask(question, k) (the checked
    answer; with --llm written by the chat model). Stdout is the protocol, so there is no
    --json: every message on it is JSON-RPC already.
    """
    needs("mcp")
    check_llm(kw["llm"])
    from kbpack.serve.mcp_tools import run_stdio

    with open_library(packs, kw) as library:
        run_stdio(library, asker(library, kw))
    return Exit.OK
