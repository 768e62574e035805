"""Valid packs to mutate: small ones built here by ``kbpack build`` (each kind of pack the format
allows: dense with sentence pieces, the model embedded, BM25 only), and any pack given
(the golden pack of the current format).

Builds run as ``python -m kbpack`` child processes: llama.cpp's OpenMP threads must never
start in the fuzzer's own process (its workers are separate processes anyway).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kbpack.testing.fuzz.pack_target import PackCommands

QUERY = "pump seal alarm pressure"
DOCS = {
    "pumps.md": "# Pumps\n\nThe seal of pump P-101 is checked every 500 hours.\n\n"
    "## Alarms\n\nAlarm A-17 means low suction pressure at the inlet.\n\n"
    "### Reset\n\nHold the reset key for 5 s; the alarm clears when pressure returns.\n",
    "valves.txt": "Valves\n======\n\nValve V-3 opens the bypass line to the reservoir.\n\n"
    "Pressure relief\n---------------\n\nThe relief valve lifts at 6 bar.\n",
    "manual.html": "<html><head><title>Seal manual</title></head><body><h1>Seals</h1>"
    "<p>Replace the pump seal when it weeps.</p><h2>Tools</h2><pre>torque 12 Nm\nkey 10 mm"
    "</pre><table><tr><td>P-101</td><td>seal kit 4</td></tr></table></body></html>",
    "broken.pdf": "this is not a pdf\n",
}
# (name, extra build options, whether dense search needs --model)
KINDS: tuple[tuple[str, tuple[str, ...], bool], ...] = (
    ("dense-pieces", ("--pieces",), True),
    ("embedded-model", ("--no-pieces", "--embed-model"), False),
    ("bm25-only", ("--no-vectors",), False),
)


def build_seed_packs(workdir: Path, model: Path) -> list[tuple[Path, PackCommands]]:
    """Build the small seed packs with ``model`` (a tiny GGUF) under ``workdir``."""
    src = workdir / "docs"
    src.mkdir(parents=True, exist_ok=True)
    for name, text in DOCS.items():
        (src / name).write_text(text, encoding="utf-8")
    out = []
    for name, options, needs_model in KINDS:
        pack = workdir / f"{name}.kbpack"
        argv = [sys.executable, "-m", "kbpack", "build", str(src), "-o", str(pack)]
        argv += ["--model", str(model), "--threads", "1", "-q", *options]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise RuntimeError(f"building seed {name} failed: {done.stderr.strip()[-400:]}")
        out.append((pack, PackCommands(QUERY, model if needs_model else None)))
    return out
