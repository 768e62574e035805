"""A cold ``kbpack query`` starts loading its model before the CLI is imported.

A cold query's wall time is a chain: the interpreter, numpy and llama.cpp's bindings, then the
model load and the query's embedding, then the dense half of the search and the output. The
load runs in a worker thread (``kbpack.model.load``), but it used to start only after click,
the CLI, h5py and the pack's open -- ~75 ms on a quiet machine, more under load, all of it on
the chain (bench/RESULTS.md, "Cold query"). So ``kbpack.cli.entry`` hands the command line here
first: when it is a query whose model can be known (below), the load starts at once, and click,
h5py and the pack's open run beside it.

This is only a head start, never a decision. The query then runs exactly as before: the pack is
opened and checked, and ``kbpack.model.resolve.start_embedder`` chooses the model from the pack's stamp.
If it chooses the same file with the same threads, it :func:`claim` s this load (the same
``Embedder(path, threads=...)`` call, prefixes set from the stamp as the normal path sets them);
otherwise the early load is waited for (two llama.cpp loads at once are not safe) and thrown
away, and the chosen model loads as before. Its errors are raised only if it is claimed, and
then they are the errors the normal load raises. An early load nobody claimed is waited for
before the process exits (:func:`settle`), so llama.cpp is never torn down under a running load.

It starts only where it is safe and nearly always used:
* one pack that this machine already remembers as parsed (``kbpack.pack.preflight``): a pack
  met for the first time is parsed in a forked child first, and a fork while llama.cpp's
  threads run is not risked; its manifest (the user block, no HDF5) must count vectors;
* the model ``resolve_model`` will choose, known without HDF5: an earlier query of the same
  pack state recorded its model's SHA-256 and query prefix (:func:`remember_model`, in the
  user cache); a ``--model`` file, or the model the pack holds (extracted to the cache by that
  earlier query), is loaded early only if its hash is that one. Without the record, only the
  default model (kbpack's own conversion in the user cache), for a pack that holds no model;
  if the pack turns out to need another, the early load was wasted (waited for, dropped);
* ``--mode bm25``, ``--help``, an option this module does not know, several packs, or a
  command line that is a usage error (no query text) start nothing.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kbpack.model.load import ModelLoad

# ``kbpack query``'s options that take a value, and its flags. tests/model/test_early_model.py checks
# them against the command's click parameters, so a new option cannot be misread here.
VALUE_OPTIONS = frozenset(
    {
        "-k",
        "--mode",
        "--max-distance",
        "--model",
        "--doc",
        "--type",
        "--section",
        "--context",
        "--format",
        "--budget-tokens",
        "--rerank",
        "--rerank-top",
        "--batch",
        "--threads",
        "--key",
        "--probe",
    }
)
FLAGS = frozenset(
    {"--full", "--json", "-q", "--quiet", "--require-signature", "--allow-unsigned", "--exact"}
)


@dataclass(frozen=True)
class Plan:
    """What a query command line names: the pack, ``threads``, the query's text (None with
    ``--batch``) and ``--model``'s file."""

    pack: Path
    threads: int | None
    query: str | None = None
    model: Path | None = None  # --model


def plan(args: list[str]) -> Plan | None:
    """The early load a ``kbpack query`` command line (``args``: after ``query``) calls for,
    from its words alone (None: none). Reads no file; :func:`start` checks the pack."""
    values: dict[str, str] = {}
    positional: list[str] = []
    rest = iter(args)
    for word in rest:
        if word == "--":
            positional += list(rest)
            break
        if word.startswith("-") and word != "-":
            name, eq, value = word.partition("=")
            if name in VALUE_OPTIONS:
                if not eq:
                    value = next(rest, "")
                    if not value:
                        return None  # a missing value: click's usage error
                values[name] = value
            elif name in FLAGS and not eq:
                continue
            else:
                return None  # --help, a typo, -k5: whatever click makes of it, no head start
        else:
            positional.append(word)
    if not positional or values.get("--mode", "hybrid") == "bm25":
        return None
    pack, text = positional[0], positional[1:]
    if text and text[0].endswith(".kbpack") and Path(text[0]).is_file():
        return None  # several packs: kbpack.search.federate loads the model its own way
    if bool(" ".join(text).strip()) == ("--batch" in values):
        return None  # no query, or a query and --batch: a usage error follows
    threads = None
    if "--threads" in values:
        threads = int(values["--threads"])  # ValueError: start() starts nothing
        if threads < 1:
            return None
    model = Path(values["--model"]) if "--model" in values else None
    return Plan(Path(pack), threads, " ".join(text) if text else None, model)


_lock = threading.Lock()
_early: tuple[Path, int | None, ModelLoad] | None = None


def start(args: list[str]) -> None:
    """Start the early load for a query command line, if :func:`plan` calls for one and the
    pack is one that qualifies (module docstring). Never raises: any doubt starts nothing."""
    try:
        p = plan(args)
        known = None if p is None else _pack_state(p.pack)
        if p is None or known is None:
            return
        chosen = _model_for(p, *known)
        if chosen is None:
            return
        path, query_prefix = chosen
        load = start_load(path, p.threads)
        if p.query is not None:
            # embedded right after the load, as the search would ask (kbpack/model/load.py);
            # the search takes the vector only for the very text it embeds, prefix included
            load.ahead(query_prefix + p.query)
    except Exception:
        return


def start_load(path: Path, threads: int | None) -> ModelLoad:
    """Start loading ``path`` with ``threads`` as the process's early load (one at most: an
    earlier one is settled first)."""
    global _early
    from kbpack.model.embedder import Embedder
    from kbpack.model.load import ModelLoad

    settle()
    load = ModelLoad(lambda: Embedder(path, threads=threads))
    with _lock:
        _early = (Path(path), threads, load)
    return load


def _pack_state(pack: Path) -> tuple[dict[str, str] | None, bool] | None:
    """For a pack that qualifies: (what :func:`remember_model` recorded for it, or None;
    whether it holds its model). None for a pack that does not qualify: not a regular file
    with a kbpack header counting vectors, or not remembered as parsed on this machine (so
    that no child is forked while the model loads)."""
    if not pack.is_file():
        return None
    from kbpack.pack.manifest import read_header
    from kbpack.pack.preflight import is_remembered

    header = read_header(pack)
    counts = header.manifest.counts
    if counts.get("vectors", 0) <= 0 or not is_remembered(pack, header):
        return None
    return _recalled(pack, header), counts.get("model_bytes", 0) > 0


def _model_for(p: Plan, recalled: dict[str, str] | None, embedded: bool) -> tuple[Path, str] | None:
    """The model file ``kbpack.model.resolve.resolve_model`` will choose, and the query prefix, as far
    as can be known without HDF5; None where in doubt. With what :func:`remember_model`
    recorded (the pack's model hash), the file is the one whose hash matches, as there;
    without it, only the default model, for a pack that holds none."""
    from kbpack.model.identity import sha256_file

    want = recalled["sha256"] if recalled else None
    prefix = recalled["query_prefix"] if recalled else None
    if p.model is not None or embedded:
        if want is None:
            return None
        if p.model is not None:
            path = p.model
        else:
            from kbpack.pack.format import is_sha256_hex
            from kbpack.runtime.cache import cache_dir

            if not is_sha256_hex(want):  # never a path from anything but a hash
                return None
            path = cache_dir() / "models" / f"{want}.gguf"  # extracted by an earlier query
        if not path.is_file() or sha256_file(path) != want:
            return None
        return (path, prefix) if prefix is not None else None
    from kbpack.model.cache import DEFAULT_MODEL_NAME, converted_default_model
    from kbpack.model.prefixes import default_prefixes

    default = converted_default_model()
    if default is None or (want is not None and sha256_file(default) != want):
        return None  # not converted yet, no weights, or not the pack's model
    return default, prefix if prefix is not None else default_prefixes(DEFAULT_MODEL_NAME).query


# What a query learnt of a pack's model (its hash and query prefix, from /model), keyed by the
# pack's state as the pre-flight memo keys it (kbpack/pack/preflight.py): read by the next
# cold query of the same file before HDF5 is imported. One of this machine's memos
# (kbpack/runtime/memo.py).
MODEL_MEMO = "pack-models"


def _memo() -> Any:
    from kbpack.runtime.memo import Memo  # when used: kbpack's start imports this module

    return Memo(MODEL_MEMO, fan_out=True)


def _key(pack: Path, header: Any) -> str:
    from kbpack.pack.preflight import memo_key

    return memo_key(pack, header)


def _recalled(pack: Path, header: Any) -> dict[str, str] | None:
    saved = _memo().read_json(_key(pack, header))
    if (
        isinstance(saved, dict)
        and isinstance(saved.get("sha256"), str)
        and len(saved["sha256"]) == 64
        and isinstance(saved.get("query_prefix"), str)
    ):
        return {"sha256": saved["sha256"], "query_prefix": saved["query_prefix"]}
    return None


def remember_model(reader: Any) -> None:
    """Record the model hash and query prefix of ``reader``'s pack (a ``PackReader``) for the
    next cold query's head start. Never fails: a memo that cannot be written costs only the
    head start."""
    import contextlib

    from kbpack.pack import format as F

    with contextlib.suppress(Exception):
        stamp = reader.model
        if stamp is None:
            return
        memo, key = _memo(), _key(reader.path, reader.header)
        if memo.has(key):
            return
        doc = {"sha256": str(stamp[F.M_SHA256]), "query_prefix": str(stamp[F.M_QUERY_PREFIX])}
        memo.write_json(key, doc)


def claim(path: Path, threads: int | None) -> ModelLoad | None:
    """The early load, if it is of ``path`` with ``threads`` (it is then the caller's);
    otherwise None, after waiting for any early load to end (see :func:`settle`)."""
    global _early
    with _lock:
        early, _early = _early, None
    if early is None:
        return None
    if early[0] == Path(path) and early[1] == threads:
        return early[2]
    _discard(early[2])
    return None


def settle() -> None:
    """Wait for an early load nobody claimed, and free it: before another model loads (two
    llama.cpp loads at once are not safe) and before the process exits."""
    global _early
    with _lock:
        early, _early = _early, None
    if early is not None:
        _discard(early[2])


def _discard(load: Any) -> None:
    load.wait()
    embedder = load.embedder_if_loaded()
    if embedder is not None:
        embedder.close()
