"""The first load of a model that came in a pack runs in a child process (issue 30).

llama.cpp aborts on some malformed models (``GGML_ASSERT``: no Python code can catch it), and
the header check (``gguf_header.check_hyperparameters``) cannot know every such case. So a
pack's embedded model that this machine has never loaded is first loaded, and one text
embedded, in a forked child (the sandbox ``verify`` uses: time and memory limits, no right to
write files): a crash there becomes one line, and the model is refused. A model that passed is
remembered by its SHA-256 (computed by kbpack, never read from a pack) in the user cache, so
later queries load it in-process at once.
"""

from __future__ import annotations

from pathlib import Path

from kbpack.errors import ModelError
from kbpack.runtime.memo import Memo

MEMO_FOLDER = "loaded-models"
_LOADED = Memo(MEMO_FOLDER)  # one of this machine's memos (kbpack/runtime/memo.py)
TIMEOUT_S = 120.0  # the default model loads in ~0.3 s; a stuck load is what this is for
MEMORY_BYTES = 8 * 2**30


def _probe(path: str) -> bool:
    """In the child: what the reader will do with the model."""
    import signal

    # the child may write no file: a memo write must fail (EFBIG, suppressed), not kill it
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    from kbpack.model.embedder import Embedder

    with Embedder(Path(path), threads=1) as e:
        e.embed(["probe"])
    return True


def check_first_load(path: Path, sha256: str) -> None:
    """ModelError (one line) if loading ``path`` (whose SHA-256 kbpack computed) crashes,
    stalls or fails in a child; at once for a model that passed before on this machine."""
    if _LOADED.has(sha256):
        return
    from kbpack.runtime.sandbox import Limits, SandboxFailure, run_isolated

    try:
        run_isolated(_probe, (str(path),), Limits(TIMEOUT_S, MEMORY_BYTES))
    except SandboxFailure as e:
        detail = e.detail.replace("HDF5 parsing", "loading the model")
        raise ModelError(f"llama.cpp failed on it in a child process ({detail})") from e
    _LOADED.write(sha256, f"{path}\n".encode("utf-8", "surrogateescape"))
