"""Progress on a terminal, silence everywhere else.

Shown only when stderr is a TTY and the user did not pass ``--quiet`` or ``--json``; redrawn at
most ten times a second so that progress never costs measurable time. A ticker thread redraws
the line every second with the elapsed time, so the screen moves even while one long step (an
embedding batch: llama.cpp releases the GIL) runs. A build's counts move with every decode
batch (at most ``BATCH_TOKENS`` tokens, well under a second), inside a long document too, and
its ETA divides the tokens left by the token rate of the last ``RATE_WINDOW_S`` seconds.

The tokens left are extrapolated from extracted text, not from source bytes, where the build
says what it extracted (:meth:`Progress.extracted`): a PDF's or an HTML page's bytes say
little about its text (fonts, images, markup), and a build extracts a whole folder before it
chunks any of it (kbpack/extract/repeated.py), so by the time embedding starts the text of
most documents is known. Tokens per character come from the documents whose texts have been
handed to the model (a document read but not yet batched has no tokens yet, and counting its
size would dilute the ratio), and count only the tokens the model reads (the embedding cache's
cost nothing); characters of documents not yet extracted are guessed from their bytes, at the
characters per byte of the documents of the same file type extracted so far.
"""

from __future__ import annotations

import resource
import sys
import threading
import time
from pathlib import PurePath
from typing import TextIO

from kbpack.runtime.terminal import printable

TICK_S = 1.0  # the ticker's period: something on the screen changes at least this often
# The ETA's rate: tokens per second over this much recent time. Long enough to smooth a
# document's extraction pause, short enough to follow a corpus whose texts change length.
RATE_WINDOW_S = 60.0


def duration(seconds: float) -> str:
    """``42s``, ``3m05s``, ``1h02m``: short enough for a progress line."""
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def peak_rss_mb() -> tuple[float, float]:
    """(peak resident memory of this process, of the largest child it has waited for), in MB.

    The extraction worker is a child process: it is waited for when extraction ends, so after
    a build the second figure is its peak (Linux reports ru_maxrss in KB)."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return round(own, 1), round(children, 1)


def file_kind(name: str) -> str:
    """A document's file type for the ETA's ratios: its suffix, lower case."""
    return PurePath(name).suffix.lower()


class Progress:
    def __init__(
        self, enabled: bool | None = None, stream: TextIO | None = None, tick_s: float = TICK_S
    ) -> None:
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.tick_s = tick_s
        self._last = 0.0
        self._width = 0
        self._started: dict[str, float] = {}
        self._t0 = time.monotonic()
        self._line = ""
        self._lock = threading.Lock()
        self._ticker: threading.Thread | None = None
        self._stop = threading.Event()
        # a build's ETA: source bytes of every document, and of those read so far
        self.source_bytes_total = 0
        # the same per file type (``kind``: the suffix), where the build gives it
        self.source_bytes_by_kind: dict[str, int] = {}
        self._bytes_done = 0
        self._bytes_batched = 0  # bytes of documents whose texts have gone to the model
        self._extracted: dict[str, tuple[int, int]] = {}  # kind -> (source bytes, characters)
        self._chars_read = 0  # characters of the documents the chunker has read
        self._chars_batched = 0  # ... and of those whose texts have gone to the model
        self._reused_tokens = 0  # tokens the cache supplied (no model time)
        self._tokens_done = 0  # tokens of finished embedding calls
        self._tokens_in_flight = 0  # tokens of the call under way
        self._flight_done = (0, 0)  # (texts, tokens) of that call already embedded
        self._flight_texts = 0
        self._model_tokens = 0  # tokens the model read (not the cache): the rate's unit
        self._samples: list[tuple[float, int]] = []  # (time, _model_tokens) for the rate
        self._documents = (0, 0)
        self._eta_at: float | None = None  # monotonic time the current ETA runs out

    def update(
        self,
        stage: str,
        done: int,
        total: int | None = None,
        unit: str = "",
        force: bool = False,
        detail: str = "",
        eta_s: float | None = None,
    ) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        start = self._started.setdefault(stage, now)
        # at most ten redraws a second, but the last step of a stage always shows (a fast
        # stage's "1/1" was skipped when it came within 0.1 s of the line before)
        if not force and now - self._last < 0.1 and not (total and done >= total):
            return
        self._last = now
        elapsed = now - start
        rate = done / elapsed if elapsed > 0 else 0.0
        line = f"{stage:<10} {done}"
        if total:
            line += f"/{total}"
        if unit:
            line += f" {unit}"
        if rate and elapsed > 1:
            line += f"  {rate:.1f}/s"
            if eta_s is None and total and done < total:
                eta_s = (total - done) / rate
        if detail:
            line += f"  {detail}"
        self._eta_at = now + eta_s if eta_s is not None else None
        self._line = line
        self._draw()
        self._start_ticker()

    def extracted(self, name: str, source_bytes: int, chars: int) -> None:
        """The extractor has read a document (``name``, ``source_bytes`` on disk) into
        ``chars`` characters of text (0 for one that failed or was skipped)."""
        if not self.enabled:
            return
        kind = file_kind(name)
        b, c = self._extracted.get(kind, (0, 0))
        self._extracted[kind] = (b + source_bytes, c + chars)

    def building(
        self, documents: int, total: int, source_bytes: int, chunks: int, chars: int = 0
    ) -> None:
        """A build's line: documents read (with ``source_bytes`` more read now, holding
        ``chars`` characters of text), chunks written, tokens embedded (chunk and piece
        texts), and the ETA. Called between embedding batches, so the batch announced by
        :meth:`embedding` is done."""
        if not self.enabled:
            return
        self._bytes_done += source_bytes
        self._chars_read += chars
        self._tokens_done += self._tokens_in_flight
        self._tokens_in_flight = 0
        self._flight_done = (0, 0)
        self._documents = (documents, total)
        self._sample()  # an extraction pause lowers the recent rate
        self.update(
            "building",
            documents,
            total,
            unit="documents",
            detail=f"{chunks} chunks embedded ({self._tokens_done} tokens)",
            eta_s=self._eta(),
        )

    def embedding(self, texts: int, tokens: int) -> None:
        """An embedding batch of ``texts`` (chunks and sentence pieces: ``tokens`` tokens, all
        the model reads) starts: say so, it may be long."""
        if not self.enabled:
            return
        # the documents read so far are the ones this call's texts come from
        self._bytes_batched = self._bytes_done
        self._chars_batched = self._chars_read
        self._tokens_in_flight = tokens
        self._flight_texts = texts
        self._flight_done = (0, 0)
        self._sample()
        self._show(force=True)

    def embedded(self, texts: int, tokens: int, reused: bool = False) -> None:
        """One decode batch of the announced call is done (``reused``: from the cache)."""
        if not self.enabled:
            return
        self._flight_done = (self._flight_done[0] + texts, self._flight_done[1] + tokens)
        if not reused:
            self._model_tokens += tokens
        else:
            self._reused_tokens += tokens
        self._sample()
        self._show()

    def _show(self, force: bool = False) -> None:
        done, total = self._documents
        (texts, tokens), all_texts = self._flight_done, self._flight_texts
        self.update(
            "building",
            done,
            total,
            unit="documents",
            detail=f"embedding {texts}/{all_texts} texts "
            f"({self._tokens_done + tokens}/{self._tokens_done + self._tokens_in_flight} tokens)",
            eta_s=self._eta(),
            force=force,
        )

    def _sample(self) -> None:
        now = time.monotonic()
        self._samples.append((now, self._model_tokens))
        while len(self._samples) > 2 and now - self._samples[1][0] > RATE_WINDOW_S:
            self._samples.pop(0)

    def rate(self) -> float | None:
        """Tokens the model reads per second, over the last ``RATE_WINDOW_S`` seconds of the
        pipeline (extraction pauses included); None until a second of it has passed."""
        if len(self._samples) < 2:
            return None
        (t0, n0), (t1, n1) = self._samples[0], self._samples[-1]
        if t1 - t0 < 1 or n1 <= n0:
            return None
        return (n1 - n0) / (t1 - t0)

    def _eta(self) -> float | None:
        """Seconds left: :meth:`tokens_left` over the recent token rate; None until there is
        a rate."""
        rate = self.rate()
        left = self.tokens_left()
        return None if rate is None or left is None else left / rate

    def tokens_left(self) -> float | None:
        """Tokens the model still has to read: what is left of the call in flight, plus the
        tokens per character of the texts batched so far times the characters still to batch
        (see the module's docstring); without extraction reports, per source byte. None
        before the first batch."""
        if not self._bytes_batched:
            return None
        # the model's work so far: every token announced but those the cache supplied
        work = self._tokens_done + self._tokens_in_flight - self._reused_tokens
        left: float = self._tokens_in_flight - self._flight_done[1]
        if self._chars_batched and self._extracted:
            left += work / self._chars_batched * max(0.0, self._chars_total() - self._chars_batched)
        else:
            left += (work / self._bytes_batched) * max(
                0, self.source_bytes_total - self._bytes_batched
            )
        return max(0.0, left)

    def _chars_total(self) -> float:
        """Characters of text in the whole build: those extracted, and for the bytes of each
        file type not yet extracted, as many per byte as its extracted documents held (all
        types' ratio for a type not seen yet, or when the build gave no types)."""
        chars = sum(c for _, c in self._extracted.values())
        seen = sum(b for b, _ in self._extracted.values())
        overall = chars / seen if seen else 0.0
        if not self.source_bytes_by_kind:
            return chars + max(0, self.source_bytes_total - seen) * overall
        total = float(chars)
        for kind, size in self.source_bytes_by_kind.items():
            b, c = self._extracted.get(kind, (0, 0))
            total += max(0, size - b) * (c / b if b else overall)
        return total

    def _draw(self) -> None:
        with self._lock:
            now = time.monotonic()
            line = printable(self._line)  # a stage's detail may carry a file's name
            if self._eta_at is not None:  # counts down between updates, so it moves too
                line += f"  ETA ~{duration(max(0.0, self._eta_at - now))}"
            line += f"  [{duration(now - self._t0)}]"
            pad = max(0, self._width - len(line))
            self.stream.write("\r" + line + " " * pad)
            self.stream.flush()
            self._width = len(line)

    def _start_ticker(self) -> None:
        if self._ticker is not None:
            return
        self._ticker = threading.Thread(target=self._tick, name="kbpack-progress", daemon=True)
        self._ticker.start()

    def _tick(self) -> None:
        while not self._stop.wait(self.tick_s):
            if self._line:
                self._draw()

    def interrupted(self) -> None:
        """Stop, and end the line where it stands: what follows (the interrupt's message)
        starts on a line of its own, below the last progress shown."""
        self._stop_ticker()
        if self.enabled and self._width:
            with self._lock:
                self.stream.write("\n")
                self.stream.flush()
                self._width = 0
                self._line = ""

    def _stop_ticker(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
            self._ticker = None
        self._stop = threading.Event()

    def done(self) -> None:
        self._stop_ticker()
        if self.enabled and self._width:
            with self._lock:
                self.stream.write("\r" + " " * self._width + "\r")
                self.stream.flush()
                self._width = 0
                self._line = ""
