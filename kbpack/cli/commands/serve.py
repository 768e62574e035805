"""``kbpack serve``: a local web page and JSON API over packs; and what ``kbpack mcp`` shares
with it (the serving options, the library of packs, the asker)."""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path
from typing import Any

import click

from kbpack.cli.commands.common import emit_json_line, stderr_is_tty
from kbpack.cli.commands.common import say as echo
from kbpack.cli.options import (
    counted,
    flag,
    ivf_options,
    json_option,
    llm_options,
    model_option,
    packs_argument,
    quiet_option,
    signature_options,
    stacked,
)
from kbpack.errors import Exit, UsageError

SERVE_EXTRA_HINT = "install the serve extra: pip install 'kbpack[serve]'"
# kbpack.serve.library.VECTOR_MEMORY_MB (not imported: --help must not load numpy);
# tests/serve/test_vector_memory.py checks they agree
VECTOR_MEMORY_MB = 1024


def serving_options(f: Any) -> Any:
    """What ``serve`` and ``mcp`` share: the packs, how they are checked, the models."""
    return stacked(
        flag(
            "--no-verify",
            help="Serve packs without checking them first (the page says they were not verified).",
        ),
        flag(
            "--full-verify",
            help="Check each pack with the full kbpack verify before serving it (default: its "
            "first three steps: bytes, signature, structure); only then is it labelled verified.",
        ),
        model_option("Query-side GGUF model (must be the packs' model)."),
        ivf_options(),
        counted(
            "--vector-memory",
            default=VECTOR_MEMORY_MB,
            low=0,
            help="Megabytes of bfloat16 copies of the packs' vectors that concurrent searches, "
            "answered in batches, scan (2 bytes per number of every chunk and piece vector: "
            "768 bytes a vector of 384; made on the first batch). 0, or a pack that does not "
            "fit: batches scan the stored float16 vectors, slower; the same answers.",
        ),
        llm_options(
            "Chat model GGUF for ask (loaded once; without it, ask quotes the pack).",
            max_tokens_help="Most tokens the chat model may write per answer.",
            most=1024,
            context=1024,
            context_help="Tokens for the sources and question the chat model reads (as for ask).",
        ),
    )(f)


def needs(module: str) -> None:
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise UsageError(f"kbpack serve needs the Python package {module!r}: {SERVE_EXTRA_HINT}")


def check_llm(llm: Path | None) -> None:
    if llm is not None:
        from kbpack.answer.generate import check_chat_gguf

        check_chat_gguf(llm)  # a wrong file is a usage error before any pack is opened


def open_library(packs: tuple[Path, ...], kw: dict[str, Any], on_progress: Any = None) -> Any:
    """The served packs (a ``Library``), checked as ``kw`` (the serving and signature
    options) says."""
    from kbpack.pack.sign import SignaturePolicy
    from kbpack.serve.library import Library

    if kw["no_verify"] and kw["full_verify"]:
        raise UsageError("--no-verify and --full-verify contradict each other: give one")
    policy = SignaturePolicy(kw["signature_key"], kw["require_signature"], kw["allow_unsigned"])
    return Library(
        list(packs),
        model=kw["model"],
        verify=not kw["no_verify"],
        full_verify=kw["full_verify"],
        on_progress=on_progress,
        policy=policy,
        vector_memory_mb=kw["vector_memory"],
        exact=kw["exact"],
        probe=kw["probe"],
    )


def asker(library: Any, kw: dict[str, Any], say: Any = None) -> Any:
    """What answers ``ask``: the chat model of ``--llm`` (loaded here), or the pack's quotes."""
    from kbpack.serve.asking import Asker

    if kw["llm"] is not None and say is not None:
        say(f"loading the chat model {kw['llm']}")
    return Asker(library, kw["llm"], max_tokens=kw["max_tokens"], context=kw["context"])


def listening_socket(host: str, port: int) -> Any:
    """The server's socket, bound and listening: before the URL is printed, so that a client
    that reads it and connects at once waits in the backlog instead of being refused while the
    server starts (seen under load).

    Made with ``IPPROTO_TCP`` named: asyncio turns Nagle's algorithm off (TCP_NODELAY) only on
    connections whose socket says so, and one made with protocol 0 did not. Every response
    (headers, then body: two writes) then waited for the client's delayed ACK: ~40 ms added to
    each request, 44 ms for the stylesheet and 82 ms instead of 39 for a hybrid search."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise UsageError(
            f"cannot listen on {host}:{port} ({e.strerror}): choose another --port"
        ) from e
    sock.listen(2048)
    return sock


@click.command()
@packs_argument()
@signature_options()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8080,
    show_default=True,
    help="Port to listen on (0: any free port; --json says which).",
)
@click.option(
    "--token",
    help="Access token, required for a non-loopback --host (one is generated when omitted).",
)
@flag("--open", "open_browser", help="Open the page in a browser.")
@click.option(
    "--workers",
    type=click.IntRange(1, 64),
    default=None,
    help="Server processes, forked from the one checked set of packs (default: one per core, "
    "at most 8, on Linux; 1 elsewhere). One process answers on about one core.",
)
@serving_options
@quiet_option()
@json_option()
def serve(
    packs: tuple[Path, ...],
    host: str,
    port: int,
    token: str | None,
    open_browser: bool,
    workers: int | None,
    quiet: bool,
    as_json: bool,
    **kw: Any,
) -> int:
    """Serve PACKs on a local web page and a JSON API under /api/ until Ctrl-C.

    Binds to loopback by default; any other --host requires a token on every request.
    """
    for m in ("starlette", "uvicorn", "jinja2"):
        needs(m)
    import uvicorn

    from kbpack.runtime.terminal import printable
    from kbpack.serve.guard import is_loopback
    from kbpack.serve.web import create_app
    from kbpack.serve.workers import Workers, default_workers, worker_server

    check_llm(kw["llm"])
    count = workers or default_workers()
    if count > 1 and not hasattr(os, "fork"):
        raise UsageError(f"--workers {count}: this system cannot fork processes; give --workers 1")
    loopback = is_loopback(host)
    if not loopback and not token:
        token = secrets.token_urlsafe(24)

    # progress on a terminal only; the summary unless --quiet; the URL line always
    def say(msg: str) -> None:
        if not (quiet or as_json):
            echo(msg, err=True)

    progress = say if stderr_is_tty() else None
    library = open_library(packs, kw, progress)
    try:
        answers = asker(library, kw, progress)
        # bind first (port 0 picks a free port) so the printed URL is the real one
        sock = listening_socket(host, port)
        bound = sock.getsockname()[1]
        shown = f"[{host}]" if ":" in host else host
        url = f"http://{shown}:{bound}/" + (f"?token={token}" if token else "")
        if as_json:
            emit_json_line(  # one line: a script reads it, then talks to the server
                {
                    "url": url,
                    "host": host,
                    "port": bound,
                    "token": token,
                    "llm": answers.identity(),  # the chat model ask uses, or null
                    "workers": count,
                    "packs": [
                        {"name": p.name, "path": str(p.path), "verify": p.verify}
                        for p in library.packs.values()
                    ],
                }
            )
            sys.stdout.flush()
        else:
            for p in library.packs.values():
                state = p.reader.checks.label()  # exactly what ran on the served file
                say(f"  {p.name}: {p.path}: {state}")
                for note in p.searcher.notes:
                    say(f"    note: {note}")
            if answers.model is not None:
                say(f"  chat model: {answers.model.name} (sha256 {answers.model.sha256[:12]}...)")
            if count > 1:
                say(f"  {count} server processes")
            echo(f"kbpack serve: {url}")
            say("Ctrl-C stops the server")
            sys.stdout.flush()
        if open_browser:
            import webbrowser

            webbrowser.open(url)
        app = create_app(library, token=token, loopback=loopback, asker=answers)
        config: dict[str, Any] = {
            "log_level": "warning",
            "access_log": False,
            "timeout_graceful_shutdown": 5,
        }
        if count == 1:
            uvicorn.Server(uvicorn.Config(app, **config)).run(sockets=[sock])
        else:
            # stderr always: a worker that died is news whether or not a terminal watches
            def log(line: str) -> None:
                print(printable(line), file=sys.stderr, flush=True)

            Workers(library, worker_server(app, sock, config), count, log).run()
    finally:
        library.close()
    return Exit.OK
