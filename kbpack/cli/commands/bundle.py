"""``kbpack bundle DIR`` and ``kbpack bundle --check DIR``: kbpack for an air-gapped machine."""

from __future__ import annotations

from pathlib import Path

import click

from kbpack.cli.commands.common import emit_json, human_size, say, summary_wanted, table
from kbpack.cli.options import flag, json_option, quiet_option
from kbpack.errors import Exit


@click.command()
@click.argument("folder", type=click.Path(file_okay=False, path_type=Path))
@flag("--check", help="Verify the bundle in FOLDER against its SHA256SUMS instead of making one.")
@click.option(
    "--llm",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Carry this GGUF too (a chat model, a reranker), in models/. Repeatable.",
)
@click.option(
    "--extras",
    default="serve",
    show_default=True,
    metavar="LIST",
    help="kbpack extras to include, comma-separated: serve (kbpack serve, kbpack mcp), "
    "cluster; '' for none.",
)
@click.option(
    "--find-links",
    multiple=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Also take wheels from this folder (a llama-cpp-python wheel built before). Repeatable.",
)
@flag(
    "--no-index",
    help="Never use the package index: wheels come from the --find-links folders (setuptools "
    "among them, to build kbpack's wheel) and llama-cpp-python from pip's wheel cache.",
)
@json_option()
@quiet_option()
def bundle(
    folder: Path,
    check: bool,
    llm: tuple[Path, ...],
    extras: str,
    find_links: tuple[Path, ...],
    no_index: bool,
    as_json: bool,
    quiet: bool,
) -> int:
    """Write FOLDER (new or empty): kbpack, every dependency and the default model as wheels,
    install.sh and SHA256SUMS, to install kbpack with no network on a machine of the same
    platform (OS, CPU architecture, C library) and Python version as this one.

    On that machine: sh FOLDER/install.sh [VENV] (checks the checksums, makes the venv,
    installs with --no-index), then VENV/bin/kbpack query PACK "question". For another
    platform, make the bundle on a machine of that platform. Exit 0 on success; with --check,
    1 when a file is missing or damaged.
    """
    from kbpack.ops.bundle import check_bundle, make_bundle

    if check:
        result = check_bundle(folder)
        if as_json:
            emit_json(result.as_dict())
        elif not quiet:
            for problem in result.problems:
                say(f"  FAILED  {problem}")
            for note in result.notes:
                say(f"  note    {note}")
            verdict = "intact" if result.ok else f"{len(result.problems)} problems"
            say(f"{folder}: {result.checked} files checked, {verdict}")
        return Exit.OK if result.ok else Exit.FAILURE

    def progress(line: str) -> None:
        if not (quiet or as_json):
            say(line, err=True)

    report = make_bundle(
        folder,
        extras=[e.strip() for e in extras.split(",") if e.strip()],
        find_links=find_links,
        no_index=no_index,
        llm=llm,
        say=progress,
    )
    if not summary_wanted(report.as_dict(), as_json, quiet):
        return Exit.OK
    t = report.target
    rows = [
        ("bundle", f"{report.path} ({human_size(report.bytes)}, {report.files} files)"),
        ("serves", f"Python {t['python']} ({t['abi']}), {t['platform']}, {t['libc']}"),
        ("wheels", f"{len(report.wheels)} (kbpack, its dependencies, the default model)"),
        ("models", ", ".join(report.models) or "-"),
        ("time", f"{report.seconds:.0f}s"),
    ]
    say(table(rows))
    say(f"On the air-gapped machine: sh {folder}/install.sh ~/kbpack")
    return Exit.OK
