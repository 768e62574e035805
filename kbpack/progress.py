"""Progress on a terminal, silence everywhere else.

Shown only when stderr is a TTY and the user did not pass ``--quiet`` or ``--json``; redrawn at
most ten times a second so that progress never costs measurable time.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, enabled: bool | None = None, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self._last = 0.0
        self._width = 0
        self._started: dict[str, float] = {}

    def update(
        self, stage: str, done: int, total: int | None = None, unit: str = "", force: bool = False
    ) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        start = self._started.setdefault(stage, now)
        if not force and now - self._last < 0.1:
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
            if total and done < total:
                line += f"  ETA {(total - done) / rate:.0f}s"
        self._draw(line)

    def _draw(self, line: str) -> None:
        pad = max(0, self._width - len(line))
        self.stream.write("\r" + line + " " * pad)
        self.stream.flush()
        self._width = len(line)

    def done(self) -> None:
        if self.enabled and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0
