"""Reference implementations the product replaced, kept as the benches' peers: weighted
reciprocal rank fusion (``rrf``: the rule kbpack's score fusion, kbpack/search/fusion.py,
replaced; bench/fusion.py and bench/quality_table.py measure the two against each other) and
the plain dense top-k over one array of similarities (``top_similar``: bench/dense_cold.py)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

CANDIDATES = 100  # as kbpack.search.fusion.CANDIDATES
RRF_K = 60


def rrf(
    ranked: Sequence[Sequence[int]], weights: Sequence[float], k: int = RRF_K
) -> list[tuple[int, float]]:
    """Weighted reciprocal rank fusion: score(c) = sum of w / (k + rank of c in each list).

    Ranks are 1-based; ties are broken by ascending chunk id so results are deterministic.
    """
    fused: dict[int, float] = {}
    for items, w in zip(ranked, weights, strict=True):
        for rank, c in enumerate(items, 1):
            fused[c] = fused.get(c, 0.0) + w / (k + rank)
    return sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))


def top_similar(sims: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """Ids of the ``CANDIDATES`` most similar chunks (within ``mask``), best first, ties by id."""
    if mask is not None:
        sims = np.where(mask, sims, -np.inf)
    n = min(CANDIDATES, int(np.isfinite(sims).sum()))
    if n == 0:
        return np.zeros(0, np.int64)
    top = np.argpartition(-sims, n - 1)[:n] if n < sims.size else np.arange(sims.size)
    return top[np.lexsort((top, -sims[top]))]
