"""A cold ``kbpack query`` starts loading the default model before the CLI is imported.

A cold query's wall time is a chain: the interpreter, numpy and llama.cpp's bindings, then the
model load and the query's embedding, then the dense half of the search and the output. The
load runs in a worker thread (``kbpack.model_load``), but it used to start only after click,
the CLI, h5py and the pack's open -- ~75 ms on a quiet machine, more under load, all of it on
the chain (bench/RESULTS.md, "Cold query"). So ``kbpack.entry`` hands the command line here
first: when it is a query that will load the default model, the load starts at once, and click,
h5py and the pack's open run beside it.

This is only a head start, never a decision. The query then runs exactly as before: the pack is
opened and checked, and ``kbpack.api.start_embedder`` chooses the model from the pack's stamp.
If it chooses the same file with the same threads, it :func:`claim` s this load (the same
``Embedder(path, threads=...)`` call, prefixes set from the stamp as the normal path sets them);
otherwise the early load is waited for (two llama.cpp loads at once are not safe) and thrown
away, and the chosen model loads as before. Its errors are raised only if it is claimed, and
then they are the errors the normal load raises. An early load nobody claimed is waited for
before the process exits (:func:`settle`), so llama.cpp is never torn down under a running load.

It starts only where it is safe and nearly always used:
* the default model, never a ``--model`` file: the default is kbpack's own conversion in the
  user cache; a ``--model`` file is loaded only once its SHA-256 matches the pack's stamp;
* one pack that this machine already remembers as parsed (``kbpack.pack.preflight``): a pack
  met for the first time is parsed in a forked child first, and a fork while llama.cpp's
  threads run is not risked;
* a pack whose manifest counts vectors and no embedded model (read from the user block, no
  HDF5); ``--mode bm25``, ``--help``, an option this module does not know, or a command line
  that is a usage error (no query text) start nothing.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kbpack.model_load import ModelLoad

# ``kbpack query``'s options that take a value, and its flags. tests/test_early_model.py checks
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
    }
)
FLAGS = frozenset({"--full", "--json", "-q", "--quiet"})


@dataclass(frozen=True)
class Plan:
    """What a query command line will load: the pack's default model, with ``threads``."""

    pack: Path
    threads: int | None


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
    if not positional or values.get("--mode", "hybrid") == "bm25" or "--model" in values:
        return None
    pack, text = positional[0], positional[1:]
    if text and text[0].endswith(".kbpack") and Path(text[0]).is_file():
        return None  # several packs: kbpack.federate loads the model its own way
    if bool(" ".join(text).strip()) == ("--batch" in values):
        return None  # no query, or a query and --batch: a usage error follows
    threads = None
    if "--threads" in values:
        threads = int(values["--threads"])  # ValueError: start() starts nothing
        if threads < 1:
            return None
    return Plan(Path(pack), threads)


_lock = threading.Lock()
_early: tuple[Path, int | None, ModelLoad] | None = None


def start(args: list[str]) -> None:
    """Start the early load for a query command line, if :func:`plan` calls for one and the
    pack is one that qualifies (module docstring). Never raises: any doubt starts nothing."""
    try:
        p = plan(args)
        if p is None or not _pack_qualifies(p.pack):
            return
        from kbpack.model.cache import converted_default_model

        path = converted_default_model()
        if path is None:
            return  # not converted yet, or no weights: the normal path says what to do
        start_load(path, p.threads)
    except Exception:
        return


def start_load(path: Path, threads: int | None) -> None:
    """Start loading ``path`` with ``threads`` as the process's early load (one at most: an
    earlier one is settled first)."""
    global _early
    from kbpack.embed import Embedder
    from kbpack.model_load import ModelLoad

    settle()
    load = ModelLoad(lambda: Embedder(path, threads=threads))
    with _lock:
        _early = (Path(path), threads, load)


def _pack_qualifies(pack: Path) -> bool:
    """A regular file with a kbpack header counting vectors and no embedded model, that this
    machine remembers as parsed (so that no child is forked while the model loads)."""
    if not pack.is_file():
        return False
    from kbpack.pack.manifest import read_header
    from kbpack.pack.preflight import is_remembered

    header = read_header(pack)
    counts = header.manifest.counts
    if counts.get("vectors", 0) <= 0 or counts.get("model_bytes", 0) != 0:
        return False
    return is_remembered(pack, header)


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
