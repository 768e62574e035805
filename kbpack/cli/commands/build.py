"""``kbpack build``, and the options and run it shares with ``kbpack update``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from kbpack.cli.commands.common import emit_json, say, show_progress
from kbpack.cli.options import (
    at_least,
    counted,
    dry_run_option,
    flag,
    force_option,
    json_option,
    model_option,
    output_option,
    prefix_options,
    quiet_option,
    sources_argument,
    stacked,
    threads_option,
)
from kbpack.errors import Exit
from kbpack.text.analyze import PLAIN, SNOWBALL_ENGLISH

# --analyzer's choices -> the name a pack records ("plain" records none)
_ANALYZER_IDS = {"plain": PLAIN, "snowball-english": SNOWBALL_ENGLISH}


def build_options(f: Any) -> Any:
    """The options ``build`` and ``update`` share."""
    return stacked(
        model_option("GGUF embedding model (default: all-MiniLM-L6-v2).", exists=False),
        flag(
            "--embed-model",
            help="Store the GGUF model inside the pack (air-gapped query without a model install).",
        ),
        prefix_options(
            "Text before every query, stored in the pack (default: the model family's; "
            "README Models).",
            "Text before every embedded chunk, stored in the pack (default: the model "
            "family's; '' for none).",
        ),
        flag("--no-vectors", help="BM25 only: no embedding model needed."),
        click.option(
            "--analyzer",
            type=click.Choice(["plain", "snowball-english"]),
            default=None,
            help="BM25 terms: plain (words as written; the default) or snowball-english (also "
            "English stems, so 'orphan' finds 'orphaning'; codes stay exact). update: as the "
            "old pack unless given.",
        ),
        click.option(
            "--pieces/--no-pieces",
            default=None,
            help="Also embed sentence pieces of every chunk: finer dense matching for ~4x "
            "vectors and ~2x size. Default: on for build; update keeps what the pack has.",
        ),
        click.option(
            "--ivf/--no-ivf",
            default=None,
            help="Write an approximate (IVF) index of the vectors: queries read ~5% of them "
            "(kbpack query --exact still reads all). Default: from 1M chunks; update keeps "
            "what the pack has (docs/scaling.md).",
        ),
        click.option(
            "--ivf-lists",
            type=click.IntRange(min=1),
            metavar="N",
            help="Lists (clusters) of the IVF index; implies --ivf (default: about 2 sqrt(chunks)).",
        ),
        globs("--include", "Only names matching GLOB (repeatable)."),
        globs("--exclude", "Skip names matching GLOB (repeatable)."),
        flag(
            "--follow-symlinks",
            help="Also read files and folders outside the input that symlinks point to (loop-safe).",
        ),
        flag(
            "--keep-repeated",
            help="Keep blocks repeated across half a folder's documents (dropped as banners).",
        ),
        click.option(
            "--max-chars",
            type=click.IntRange(min=64),
            help="Character target per chunk (secondary to the token window).",
        ),
        counted(
            "--overlap",
            default=0,
            low=0,
            help="Characters of overlap between chunks (insurance against split answers; costs precision).",
        ),
        at_least(
            "--timeout",
            120.0,
            0.1,
            "CPU seconds per document before extraction is stopped (10x that in wall time).",
        ),
        at_least(
            "--max-file-mb",
            100.0,
            0.001,
            "Larger sources (and compressed ones that inflate past it) are recorded as failed.",
        ),
        counted("--max-pages", default=2000, help="PDFs with more pages are recorded as failed."),
        threads_option(),
        click.option(
            "--embed-cache-max",
            metavar="SIZE",
            help="Room for finished embeddings in the kbpack cache, reused by the next build of "
            "the same texts and model, an interrupted one included (default 2G; 0: no cache).",
        ),
        flag(
            "--strict",
            help="Exit 1 when any document failed or was skipped (files of types kbpack does not "
            "read, and --include/--exclude, aside).",
        ),
        flag(
            "--allow-empty",
            help="Write the pack even when no document could be read (else exit 1).",
        ),
        force_option(),
        json_option(),
        quiet_option(),
    )(f)


def globs(name: str, help: str) -> Any:
    return click.option(name, multiple=True, metavar="GLOB", help=help)


@click.command()
@sources_argument()
@output_option("The pack file to write.", required=True)
@click.option(
    "--shard",
    metavar="I/N",
    help="Only shard I of N of the documents (by a hash of the name); merge the N packs.",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    help="Extract, chunk and embed on a local Dask cluster of N worker processes.",
)
@click.option(
    "--scheduler",
    metavar="ADDRESS",
    help="Extract, chunk and embed on the Dask cluster at ADDRESS (tcp://host:8786).",
)
@click.option(
    "--split-size",
    metavar="SIZE",
    help="Write a pack set OUT-001.kbpack, OUT-002.kbpack, ... each under SIZE (e.g. 3.9G for FAT32).",
)
@dry_run_option(
    "Read and chunk the sources, embed a small sample, and print the counts, the "
    "estimated time and pack size; write nothing."
)
@build_options
def build(sources: tuple[Path, ...], out: Path, **kw: Any) -> int:
    """Build a pack from folders and files (md, txt, html, pdf, docx).

    Failed documents are recorded in the pack with their reason; the build goes on.
    Exit 0 on success, 1 when no document could be read (unless --allow-empty) or when
    --strict and a document failed or was skipped (unsupported types aside), 2 on usage
    errors, 130 when interrupted (the output path is left as it was).
    """
    return run_build_command(sources, out, **kw)


def _dry_run(opts: Any, progress: Any, as_json: bool, quiet: bool) -> int:
    """``build --dry-run``: the build into a temporary folder, with a measured sample in place
    of the embedding (kbpack/ops/estimate.py); the pack is removed, the output untouched."""
    import dataclasses
    import tempfile

    from kbpack.cli.build_report import render_dry_run
    from kbpack.ops.build import build as run_build
    from kbpack.ops.estimate import DryRun

    with tempfile.TemporaryDirectory(prefix="kbpack-dry-run-") as tmp:
        trial = dataclasses.replace(opts, out=Path(tmp) / "dry-run.kbpack")
        report = run_build(trial, progress, dry=DryRun())
    result = {
        "path": str(opts.out),
        "dry_run": True,
        "estimated_size": report.size,
        "counts": report.counts,
        "failed": report.failed,
        "skipped": report.skipped,
        "unsupported": report.unsupported,
        "model": report.model,
        **(report.dry_run or {}),
    }
    if as_json:
        emit_json(result)
    elif not quiet:
        say(render_dry_run(result))
    return Exit.OK


def _cache_size(text: str | None) -> int | None:
    if text is None:
        return None
    import re

    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)i?[bB]?\s*", text)
    if not m:
        raise click.UsageError(f"--embed-cache-max {text}: write a size such as 2G, 500M or 0")
    return int(float(m.group(1)) * 1024 ** " kmgt".index(m.group(2).lower() or " "))


def run_build_command(
    sources: tuple[Path, ...],
    out: Path,
    reuse: Path | None = None,
    sign: tuple[str | None, Path | None] | None = None,
    **kw: Any,
) -> int:
    """Build (or, with ``reuse``, update) and report. ``sign``: (the old pack's signer, a
    secret key to sign the new pack with), for update."""
    from kbpack.cli.build_report import render_report, render_set_members, render_signature
    from kbpack.extract import Limits
    from kbpack.index.pieces import DEFAULT_PIECES
    from kbpack.ops.build import BuildOptions
    from kbpack.ops.build import build as run_build
    from kbpack.ops.outpath import check_output
    from kbpack.ops.shards import parse_shard
    from kbpack.runtime.progress import Progress

    as_json, quiet, strict = kw.pop("as_json"), kw.pop("quiet"), kw.pop("strict")
    dry_run = kw.pop("dry_run", False)
    shard = kw.pop("shard", None)
    split_size = kw.pop("split_size", None)
    workers, scheduler = kw.pop("workers", None), kw.pop("scheduler", None)
    if workers is not None and scheduler is not None:
        raise click.UsageError("give either --workers or --scheduler, not both")
    # before any work: a long build must not end by refusing (or destroying) its output path
    out = check_output(out, inputs=sources, force=kw.pop("force"))
    pieces = kw["pieces"]
    if pieces is None and reuse is None:
        pieces = DEFAULT_PIECES  # (update, given neither, keeps what the old pack has)
    opts = BuildOptions(
        sources=list(sources),
        out=out,
        model=kw["model"],
        vectors=not kw["no_vectors"],
        embed_model=kw["embed_model"],
        include=kw["include"],
        exclude=kw["exclude"],
        follow_symlinks=kw["follow_symlinks"],
        keep_repeated=kw.get("keep_repeated", False),
        allow_empty=kw["allow_empty"],
        limits=Limits(
            max_file_bytes=int(kw["max_file_mb"] * 2**20),
            timeout_s=kw["timeout"],
            max_pages=kw["max_pages"],
        ),
        max_chars=kw["max_chars"],
        overlap=kw["overlap"],
        threads=kw["threads"],
        shard=parse_shard(shard) if shard else None,
        query_prefix=kw["query_prefix"],
        doc_prefix=kw["doc_prefix"],
        pieces=pieces,
        analyzer=_ANALYZER_IDS.get(kw["analyzer"]) if kw["analyzer"] else None,
        embed_cache_max=_cache_size(kw["embed_cache_max"]),
        ivf=True if kw["ivf_lists"] is not None and kw["ivf"] is None else kw["ivf"],
        ivf_lists=kw["ivf_lists"],
    )
    if kw["ivf_lists"] is not None and kw["ivf"] is False:
        raise click.UsageError("--ivf-lists asks for an index: drop --no-ivf")
    if opts.embed_model and not opts.vectors:
        raise click.UsageError("--embed-model needs vectors; drop --no-vectors")
    if not opts.vectors and (opts.query_prefix is not None or opts.doc_prefix is not None):
        raise click.UsageError("--query-prefix/--doc-prefix need vectors; drop --no-vectors")
    if kw["pieces"] and not opts.vectors:
        raise click.UsageError("--pieces needs vectors; drop --no-vectors")
    if dry_run:
        if split_size is not None or workers is not None or scheduler is not None:
            raise click.UsageError(
                "--dry-run estimates a plain build; drop --split-size/--workers/--scheduler"
            )
        return _dry_run(opts, Progress(show_progress(quiet, as_json)), as_json, quiet)
    # SIGTERM is Ctrl-C (kbpack.cli.main.main): the writer removes its temp file, exit 130
    if split_size is not None:
        from kbpack.ops.split import build_set, name_the_set, parse_size

        builder = None
        if workers is not None or scheduler is not None:
            from kbpack.ops.cluster import cluster_build

            def builder(o: Any, p: Any) -> Any:
                return cluster_build(o, workers, scheduler, p)

        report, members = build_set(
            opts, parse_size(split_size), Progress(show_progress(quiet, as_json)), builder
        )
        name_the_set(report, out, members)
        if as_json:
            emit_json({**report.as_dict(), "set": members.as_dict()})
        elif not quiet:
            say(render_report(report))
            if listing := render_set_members(members):
                say(listing)
        return Exit.FAILURE if (strict and report.strict_failures()) else Exit.OK
    if reuse is not None:
        from kbpack.ops.update import update_pack

        report = update_pack(reuse, opts, Progress(show_progress(quiet, as_json)))
    elif workers is not None or scheduler is not None:
        from kbpack.ops.cluster import cluster_build

        report = cluster_build(opts, workers, scheduler, Progress(show_progress(quiet, as_json)))
    else:
        report = run_build(opts, Progress(show_progress(quiet, as_json)))
    if sign is not None:
        from kbpack.pack.sign import sign_updated

        signature = sign_updated(report.path, *sign)
    else:
        signature = None
    if as_json:
        emit_json({**report.as_dict(), **({"signature": signature} if signature else {})})
    elif not quiet:
        say(render_report(report))
        if signature:
            say(render_signature(report.path, signature))
    return Exit.FAILURE if (strict and report.strict_failures()) else Exit.OK
