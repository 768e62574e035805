"""``kbpack cache``: what this machine's kbpack cache holds, and ``kbpack cache clear``."""

from __future__ import annotations

from typing import Any

import click

from kbpack.cli.commands.common import emit_json, grid, say
from kbpack.cli.options import dry_run_option, json_option
from kbpack.errors import Exit


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def _show(as_json: bool) -> int:
    from kbpack.ops.usercache import inventory
    from kbpack.runtime.cache import cache_dir

    found = inventory()
    total = sum(p.bytes for p in found)
    if as_json:
        emit_json(
            {
                "folder": str(cache_dir()),
                "bytes": total,
                "parts": [p.as_dict() for p in found],
            }
        )
        return Exit.OK
    say(f"kbpack cache: {cache_dir()} ({_size(total)})")
    rows = [[p.name, _size(p.bytes), str(p.files), p.what] for p in found]
    for line in grid(["part", "size", "files", "what"], rows, indent=2):
        say(line)
    for p in found:
        for item in p.items:
            label = item.get("file") or f"model {item.get('model')}"
            say(f"    {p.name}: {label} ({_size(item['bytes'])})")
    say("Nothing here is needed to read a pack; `kbpack cache clear [PART...]` removes it.")
    return Exit.OK


@click.group("cache", invoke_without_command=True)
@json_option()
@click.pass_context
def cache(ctx: click.Context, as_json: bool) -> int:
    """What this machine's kbpack cache holds: finished embeddings of builds, models extracted
    from packs or converted, and memos of the packs and models checked here (folder:
    $KBPACK_CACHE_DIR, else $XDG_CACHE_HOME/kbpack, else ~/.cache/kbpack). Nothing in it is
    needed to read a pack: clearing it costs time, never correctness."""
    if ctx.invoked_subcommand is None:
        return _show(as_json)
    return Exit.OK


@cache.command("show")
@json_option()
def show(as_json: bool) -> int:
    """List each part of the cache with its size and files (the same as `kbpack cache`)."""
    return _show(as_json)


@cache.command("clear")
@click.argument("parts", nargs=-1, metavar="[PART]...")
@dry_run_option("Say what would be removed; remove nothing.")
@json_option()
def clear(parts: tuple[str, ...], dry_run: bool, as_json: bool) -> int:
    """Remove PARTs of the cache (embeddings, models, memos, other), or all of it. A build
    running meanwhile keeps what it has open; the next one embeds again what it finds gone."""
    from kbpack.ops.usercache import clear as clear_parts
    from kbpack.runtime.cache import cache_dir

    removed = clear_parts(list(parts), dry_run=dry_run)
    total = sum(p.bytes for p in removed)
    body: dict[str, Any] = {
        "folder": str(cache_dir()),
        "dry_run": dry_run,
        "bytes": total,
        "removed": [p.as_dict() for p in removed],
    }
    if as_json:
        emit_json(body)
        return Exit.OK
    verb = "would remove" if dry_run else "removed"
    names = ", ".join(f"{p.name} ({_size(p.bytes)})" for p in removed) or "nothing"
    say(f"kbpack cache: {verb} {names} from {cache_dir()}: {_size(total)} in all")
    return Exit.OK
