"""``kbpack serve``: a local web page and JSON API over packs."""

from __future__ import annotations

import secrets
import sys
from pathlib import Path
from typing import Any

import click

from kbpack.cli.commands.common import (
    emit_json_line,
    json_option,
    quiet_option,
    signature_options,
    stderr_is_tty,
)
from kbpack.cli.commands.common import say as echo
from kbpack.errors import UsageError

SERVE_EXTRA_HINT = "install the serve extra: pip install 'kbpack[serve]'"


def _needs(module: str) -> None:
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise UsageError(f"kbpack serve needs the Python package {module!r}: {SERVE_EXTRA_HINT}")


def _packs_argument(f: Any) -> Any:
    return click.argument(
        "packs",
        nargs=-1,
        required=True,
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
    )(f)


def _common(f: Any) -> Any:
    f = click.option(
        "--no-verify",
        is_flag=True,
        help="Serve packs without checking them first (the page says they were not verified).",
    )(f)
    f = click.option(
        "--full-verify",
        is_flag=True,
        help="Check each pack with the full kbpack verify before serving it (default: its "
        "first three steps: bytes, signature, structure); only then is it labelled verified.",
    )(f)
    return click.option(
        "--model",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help="Query-side GGUF model (must be the packs' model).",
    )(f)


def _llm_options(f: Any) -> Any:
    f = click.option(
        "--context",
        type=click.IntRange(min=128),
        default=1024,
        show_default=True,
        help="Tokens for the sources and question the chat model reads (as for ask).",
    )(f)
    f = click.option(
        "--max-tokens",
        type=click.IntRange(min=1, max=1024),
        default=128,
        show_default=True,
        help="Most tokens the chat model may write per answer.",
    )(f)
    return click.option(
        "--llm",
        type=click.Path(path_type=Path),
        help="Chat model GGUF for ask (loaded once; without it, ask quotes the pack).",
    )(f)


def _asker(library: Any, llm: Path | None, max_tokens: int, context: int, say: Any = None) -> Any:
    from kbpack.serve.asking import Asker

    if llm is not None and say is not None:
        say(f"loading the chat model {llm}")
    return Asker(library, llm, max_tokens=max_tokens, context=context)


def _check_llm(llm: Path | None) -> None:
    if llm is not None:
        from kbpack.answer.generate import check_chat_gguf

        check_chat_gguf(llm)  # a wrong file is a usage error before any pack is opened


def _one_check(no_verify: bool, full_verify: bool) -> None:
    if no_verify and full_verify:
        raise UsageError("--no-verify and --full-verify contradict each other: give one")


@click.command()
@_packs_argument
@signature_options
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
@click.option("--open", "open_browser", is_flag=True, help="Open the page in a browser.")
@_common
@_llm_options
@quiet_option
@json_option
def serve(
    packs: tuple[Path, ...],
    host: str,
    port: int,
    token: str | None,
    open_browser: bool,
    no_verify: bool,
    full_verify: bool,
    model: Path | None,
    llm: Path | None,
    max_tokens: int,
    context: int,
    require_signature: bool,
    signature_key: Path | None,
    allow_unsigned: bool,
    quiet: bool,
    as_json: bool,
) -> int:
    """Serve PACKs on a local web page and a JSON API under /api/ until Ctrl-C.

    Binds to loopback by default; any other --host requires a token on every request.
    """
    for m in ("starlette", "uvicorn", "jinja2"):
        _needs(m)
    import socket

    import uvicorn

    from kbpack.pack.sign import SignaturePolicy
    from kbpack.serve.guard import is_loopback
    from kbpack.serve.library import Library
    from kbpack.serve.web import create_app

    _check_llm(llm)
    loopback = is_loopback(host)
    if not loopback and not token:
        token = secrets.token_urlsafe(24)

    # progress on a terminal only; the summary unless --quiet; the URL line always
    def say(msg: str) -> None:
        if not (quiet or as_json):
            echo(msg, err=True)

    progress = say if stderr_is_tty() else None
    _one_check(no_verify, full_verify)
    library = Library(
        list(packs),
        model=model,
        verify=not no_verify,
        full_verify=full_verify,
        on_progress=progress,
        policy=SignaturePolicy(signature_key, require_signature, allow_unsigned),
    )
    try:
        asker = _asker(library, llm, max_tokens, context, progress)
        # bind first (port 0 picks a free port) so the printed URL is the real one
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as e:
            raise UsageError(
                f"cannot listen on {host}:{port} ({e.strerror}): choose another --port"
            ) from e
        # listen before the URL is printed: a client that reads it and connects at once
        # waits in the backlog instead of being refused while the server starts (seen under load)
        sock.listen(2048)
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
                    "llm": asker.identity(),  # the chat model ask uses, or null
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
            if asker.model is not None:
                say(f"  chat model: {asker.model.name} (sha256 {asker.model.sha256[:12]}...)")
            echo(f"kbpack serve: {url}")
            say("Ctrl-C stops the server")
            sys.stdout.flush()
        if open_browser:
            import webbrowser

            webbrowser.open(url)
        app = create_app(library, token=token, loopback=loopback, asker=asker)
        config = uvicorn.Config(
            app, log_level="warning", access_log=False, timeout_graceful_shutdown=5
        )
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        library.close()
    return 0
