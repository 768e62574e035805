"""Every option and argument that more than one command takes, declared once.

Each is a decorator factory (as sqlite-utils' ``output_options``): ``@json_option()``, or with
the command's own help where the meaning differs in a word (``@model_option("Query-side GGUF
model (must be the pack's model).", exists=True)``). The spelling, type, default and dest of an
option live here only; tests/test_cli_contract.py checks the conventions they follow.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from kbpack.cli.commands.common import Choice

F = TypeVar("F", bound=Callable[..., Any])
Decorator = Callable[[F], F]


def stacked(*decorators: Callable[[Any], Any]) -> Callable[[F], F]:
    """The decorators as one, in the order written (the first is the first in --help)."""

    def apply(f: F) -> F:
        for d in reversed(decorators):
            f = d(f)
        return f

    return apply


def file_path(exists: bool = False) -> click.Path:
    """A file (never a folder) as a ``Path``; ``exists``: it must be there already."""
    return click.Path(exists=exists, dir_okay=False, path_type=Path)


def flag(*decls: str, help: str) -> Decorator[F]:
    return click.option(*decls, is_flag=True, help=help)


def counted(*decls: str, default: int, help: str, low: int = 1, high: int | None = None) -> Any:
    """A whole number from ``low`` (to ``high``) with its default shown in --help."""
    rng = click.IntRange(min=low, max=high)
    return click.option(*decls, type=rng, default=default, show_default=True, help=help)


def at_least(name: str, default: float, low: float, help: str) -> Any:
    """A number from ``low`` up, its default shown in --help."""
    kind = click.FloatRange(min=low)
    return click.option(name, type=kind, default=default, show_default=True, help=help)


def chosen(*decls: str, choices: Sequence[str], default: str, help: str) -> Any:
    """One of ``choices`` (a typo gets "did you mean"), its default shown in --help."""
    return click.option(*decls, type=Choice(choices), default=default, show_default=True, help=help)


# --- arguments -------------------------------------------------------------------------------


def pack_argument(exists: bool = True) -> Any:
    return click.argument("pack", type=file_path(exists))


def packs_argument(exists: bool = True, dir_okay: bool = False) -> Any:
    """PACKS...: one or more (a set given by a glob)."""
    kind = click.Path(exists=exists, dir_okay=dir_okay, path_type=Path)
    return click.argument("packs", nargs=-1, required=True, type=kind)


def sources_argument() -> Any:
    return click.argument("sources", nargs=-1, required=True, type=click.Path(path_type=Path))


def text_argument() -> Any:
    """The words of a query or a question (several words, no quoting needed)."""
    return click.argument("text", nargs=-1)


# --- options every kind of command shares ----------------------------------------------------

JSON_HELP = "Machine-readable JSON on stdout."
FORCE_HELP = "Replace an existing file that is not a pack, or a symlink's target (never an input)."
THREADS_HELP = "Embedding threads, one llama.cpp context each (default: all cores)."


def json_option(help: str = JSON_HELP) -> Any:
    return flag("--json", "as_json", help=help)


def quiet_option() -> Any:
    return flag("--quiet", "-q", help="No progress and no summary.")


def force_option(help: str = FORCE_HELP) -> Any:
    return flag("--force", help=help)


def threads_option(help: str = THREADS_HELP) -> Any:
    return click.option("--threads", type=click.IntRange(min=1), help=help)


def dry_run_option(help: str) -> Any:
    return flag("--dry-run", help=help)


def output_option(
    help: str,
    *,
    dest: str = "out",
    required: bool = False,
    dir_okay: bool = True,
    allow_dash: bool = False,
    default: str | None = None,
) -> Any:
    """``-o/--output PATH``, the one spelling of every command's output file (``dest``: the
    parameter it fills). Where it is written, and what may be replaced, is ``kbpack.ops.outpath``'s."""
    extra: dict[str, Any] = {} if default is None else {"default": default, "show_default": True}
    kind = click.Path(dir_okay=dir_okay, allow_dash=allow_dash, path_type=Path)
    return click.option("-o", "--output", dest, required=required, type=kind, help=help, **extra)


# --- models, keys and signatures -------------------------------------------------------------

QUERY_MODEL_HELP = "Query-side GGUF model (must be the pack's model)."


def model_option(help: str = QUERY_MODEL_HELP, *, exists: bool = True, dest: str = "model") -> Any:
    """``--model FILE.gguf``: the embedding model (``exists``: checked by click)."""
    return click.option("--model", dest, type=file_path(exists), help=help)


def prefix_options(query_help: str, doc_help: str) -> Any:
    """``--query-prefix`` and ``--doc-prefix``: the texts before a query and a chunk."""
    return stacked(
        click.option("--query-prefix", metavar="TEXT", help=query_help),
        click.option("--doc-prefix", metavar="TEXT", help=doc_help),
    )


def key_option(help: str, *, required: bool = False, dest: str = "key") -> Any:
    """``--key FILE``: a secret key (.key) to sign with, or a public key (.pub) to trust."""
    return click.option("--key", dest, required=required, type=file_path(), help=help)


TRUSTED = "$KBPACK_TRUSTED_KEYS or ~/.config/kbpack/trusted-keys"


def signature_options(
    require_help: str = "Refuse the pack unless a trusted key signed it (trusted: --key, else "
    f"*.pub in {TRUSTED}; none there: refused).",
    unsigned_help: str = "Read the pack even unsigned or signed by an unknown key, though "
    "trusted keys are configured.",
) -> Any:
    """The signature policy of a reader (docs/verify.md): --require-signature, --key,
    --allow-unsigned (``verify`` words the first and last as a verdict)."""
    return stacked(
        flag("--require-signature", help=require_help),
        key_option(
            "Trust only this public key (.pub) and require a signature by it.",
            dest="signature_key",
        ),
        flag("--allow-unsigned", help=unsigned_help),
    )


# --- searching and answering -----------------------------------------------------------------


def ivf_options() -> Any:
    """``--exact`` and ``--probe N``: how a pack with an approximate (IVF) index is searched
    (query, serve, mcp)."""
    return stacked(
        flag(
            "--exact",
            help="Scan every vector even where the pack has an approximate (IVF) index "
            "(docs/scaling.md).",
        ),
        click.option(
            "--probe",
            type=click.IntRange(min=1),
            metavar="N",
            help="Lists of the pack's IVF index a query reads (default: the pack's, a tenth of "
            "its lists).",
        ),
    )


def k_option(help: str, default: int = 5) -> Any:
    return counted("-k", "k", default=default, help=help)


def rerank_options(help: str, top_help: str) -> Any:
    """``--rerank FILE.gguf`` (a cross-encoder) and ``--rerank-top N``."""
    return stacked(
        click.option("--rerank", type=file_path(exists=True), help=help),
        counted("--rerank-top", default=25, help=top_help),
    )


def llm_options(
    help: str, *, max_tokens_help: str, context: int, context_help: str, most: int | None = None
) -> Any:
    """``--llm FILE.gguf`` (the chat model), ``--max-tokens`` (up to ``most``) and
    ``--context`` (tokens the model reads, from 128)."""
    return stacked(
        click.option("--llm", type=click.Path(path_type=Path), help=help),
        counted("--max-tokens", default=128, high=most, help=max_tokens_help),
        counted("--context", default=context, low=128, help=context_help),
    )


__all__ = [
    "at_least",
    "chosen",
    "counted",
    "dry_run_option",
    "file_path",
    "flag",
    "force_option",
    "json_option",
    "k_option",
    "key_option",
    "llm_options",
    "model_option",
    "output_option",
    "pack_argument",
    "packs_argument",
    "prefix_options",
    "quiet_option",
    "rerank_options",
    "signature_options",
    "sources_argument",
    "stacked",
    "text_argument",
    "threads_option",
]
