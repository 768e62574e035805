"""The spool files a pack writer streams texts and vectors into until the commit.

Beside its temp file; the commit copies them into HDF5.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np


def remove_files(paths: Sequence[Path]) -> None:
    for p in paths:
        with contextlib.suppress(OSError):
            p.unlink(missing_ok=True)


class Spools:
    """The text spool (always), the vector spool (dense packs) and the piece spool (packs with
    pieces) of one writer, named after its temp file ``tmp``; gone after ``remove``, or when the
    owner is collected or the interpreter exits (``tmp`` with them)."""

    def __init__(self, owner: Any, tmp: Path, vectors: bool, pieces: bool) -> None:
        """``owner``: the writer whose collection removes the files (a Ctrl-C after the spools
        exist but before the caller's ``with`` reaches __enter__ would skip its abort())."""
        self.text = tmp.with_name(tmp.name + ".text")
        self.vectors = tmp.with_name(tmp.name + ".vec")
        self.pieces = tmp.with_name(tmp.name + ".pieces")
        # After a commit they are gone already.
        weakref.finalize(owner, remove_files, (self.text, self.vectors, self.pieces, tmp))
        try:  # a Ctrl-C between two opens must not leave the first spool behind
            self._text_f = open(self.text, "wb")  # noqa: SIM115 - closed in close/close_quietly
            self._vec_f = open(self.vectors, "wb") if vectors else None  # noqa: SIM115
            self._piece_f = open(self.pieces, "wb") if pieces else None  # noqa: SIM115
        except BaseException:
            self.remove()  # (a handle opened here is closed when it is collected)
            raise

    @property
    def has_vectors(self) -> bool:
        return self._vec_f is not None

    @property
    def has_pieces(self) -> bool:
        return self._piece_f is not None

    def write(
        self,
        text: bytes,
        vectors: np.ndarray | None,
        n_chunks: int,
        piece_vectors: np.ndarray | None,
        n_pieces: int,
    ) -> None:
        """Append one document's text, and its vectors and piece vectors where spooled."""
        self._text_f.write(text)
        if self._vec_f is not None and vectors is not None and n_chunks:
            self._vec_f.write(np.ascontiguousarray(vectors, dtype="<f2").tobytes())
        if self._piece_f is not None and piece_vectors is not None and n_pieces:
            self._piece_f.write(np.ascontiguousarray(piece_vectors, dtype="<f2").tobytes())

    def close(self) -> None:
        """Close every spool (their bytes are complete: the commit reads them)."""
        self._text_f.close()
        if self._vec_f is not None:
            self._vec_f.close()
        if self._piece_f is not None:
            self._piece_f.close()

    def close_quietly(self) -> None:
        """Close every spool, ignoring errors (an abort)."""
        for f in (self._text_f, self._vec_f, self._piece_f):
            if f is not None:
                with contextlib.suppress(OSError):
                    f.close()

    def remove(self) -> None:
        """Remove the spool files."""
        for p in (self.text, self.vectors, self.pieces):
            with contextlib.suppress(OSError):
                p.unlink(missing_ok=True)
