"""``build --dry-run``: what a build would make and how long it would take, without embedding.

The dry run is the build itself (``build_from``: extraction, chunking, pieces, the BM25 index
and the pack writer, into a temporary file that is then removed) with one step replaced: each
embedding call is tokenized exactly as the model would read it, and given placeholder vectors.
So the counts are the build's, and the pack size is that of a pack with the same rows (vectors
are stored uncompressed, so their values do not change it). The time is what the dry run took
(everything but embedding) plus the tokens to embed over a rate measured here, now: a sample of
the texts, spread over their lengths, embedded by the same model and threads.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

SAMPLE_TEXTS = 48  # texts embedded to measure the rate: ~1-3 s on one core for MiniLM
_PER_BUCKET = 4  # texts kept per length bucket (16 tokens wide) to sample from
_BUCKET = 16


@dataclass
class DryRun:
    """Collects the token counts of every text a build would embed, and a few texts of every
    length to measure the model on."""

    lengths: list[int] = field(default_factory=list)
    reused: int = 0  # texts whose decode batch the embedding cache already holds
    _kept: dict[int, list[list[int]]] = field(default_factory=dict)
    sample: dict[str, float] = field(default_factory=dict)

    def vectors(self, embedder: Any, tokenized: list[list[int]], cache: Any) -> np.ndarray:
        """Stands in for ``embed_tokens``: records, and returns placeholder unit vectors."""
        for tokens in tokenized:
            self.lengths.append(len(tokens))
            kept = self._kept.setdefault(len(tokens) // _BUCKET, [])
            if len(kept) < _PER_BUCKET:
                kept.append(tokens)
        if cache is not None:
            self.reused += sum(len(b) for b in embedder.batches(tokenized) if cache.has(b))
        out = np.zeros((len(tokenized), embedder.dims), np.float32)
        out[:, 0] = 1.0
        return out

    def measure(self, embedder: Any, n: int = SAMPLE_TEXTS) -> None:
        """Embed up to ``n`` texts taken at evenly spaced quantiles of the lengths seen, and
        record the tokens per second (after one warm-up call that is not timed)."""
        if not self.lengths:
            self.sample = {"texts": 0, "tokens": 0, "seconds": 0.0, "tokens_per_s": 0.0}
            return
        ordered = sorted(self.lengths)
        picks: list[list[int]] = []
        used: dict[int, int] = {}
        for q in range(n):
            length = ordered[min(len(ordered) - 1, (2 * q + 1) * len(ordered) // (2 * n))]
            bucket = self._kept[length // _BUCKET]
            picks.append(bucket[used.get(length // _BUCKET, 0) % len(bucket)])
            used[length // _BUCKET] = used.get(length // _BUCKET, 0) + 1
        embedder.embed_tokens(picks[:2])  # warm-up: the first call pays one-off costs
        t, cpu = time.perf_counter(), time.process_time()
        embedder.embed_tokens(picks)
        seconds = time.perf_counter() - t
        tokens = sum(map(len, picks))
        self.sample = {
            "texts": len(picks),
            "tokens": tokens,
            "seconds": round(seconds, 3),
            # CPU time too: on a shared machine wall time also measures the neighbours
            "cpu_seconds": round(time.process_time() - cpu, 3),
            "tokens_per_s": round(tokens / seconds, 1) if seconds > 0 else 0.0,
        }

    def summary(self, other_seconds: float) -> dict[str, Any]:
        """What ``--dry-run`` reports beside the counts: texts and tokens to embed, the sample,
        and the seconds -- embedding (the texts the cache does not hold, at the sampled rate)
        and the rest (what the dry run itself took: model load, extraction, chunking, index,
        write)."""
        rate = self.sample.get("tokens_per_s") or 0.0
        total = sum(self.lengths)
        share = 1 - self.reused / len(self.lengths) if self.lengths else 0.0
        embed = total * share / rate if rate else 0.0
        return {
            "texts": len(self.lengths),
            "tokens": total,
            "cached_texts": self.reused,
            "sample": self.sample,
            "estimated_seconds": round(embed + other_seconds, 3),
            "estimated_embed_seconds": round(embed, 3),
            "estimated_other_seconds": round(other_seconds, 3),
        }


__all__ = ["SAMPLE_TEXTS", "DryRun"]
