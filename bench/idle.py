"""Idle CPU, for benches on a shared machine: a parallel speed-up shows in wall time only while
the cores it needs are free, so a bench can wait (a while) for them before each timed run and
record what it found."""

from __future__ import annotations

import time


def _busy_idle() -> tuple[int, int]:
    with open("/proc/stat", encoding="ascii") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, idle


def idle_cores(seconds: float = 1.0) -> float:
    """Cores idle over the next ``seconds`` (from /proc/stat; 0.0 where it cannot be read)."""
    try:
        b0, i0 = _busy_idle()
        time.sleep(seconds)
        b1, i1 = _busy_idle()
    except OSError:
        return 0.0
    total = (b1 - b0) + (i1 - i0)
    import os

    return round((os.cpu_count() or 1) * (i1 - i0) / total, 2) if total else 0.0


def wait_for_idle(need: float, timeout: float) -> float:
    """Wait up to ``timeout`` seconds for ``need`` idle cores; the idle cores last seen."""
    end = time.monotonic() + timeout
    seen = idle_cores()
    while seen < need and time.monotonic() < end:
        seen = idle_cores()
    return seen
