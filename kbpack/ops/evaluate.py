"""Retrieval metrics without generation: needle matching, recall@k and MRR with 95% intervals,
paired sign tests, destroyed answers, and the refusal-threshold sweep used by ``calibrate``.

Pure functions over rankings; nothing here opens a pack. A *rank* is the 1-based position of the
first returned chunk that holds the question's needle, or ``None`` when none does.
"""

from __future__ import annotations

import json
import math
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kbpack.errors import UsageError

Z95 = 1.959963984540054  # two-sided 95% normal quantile
MAX_FALSE_REFUSAL = 0.05
# Below these a recommendation is noise: with 10 answerable questions one false refusal is
# 10%, and 6 out-of-domain queries cannot tell a 0% bluff rate from 30% (issue 13).
MIN_QUESTIONS = 20
MIN_OOD = 10
BOOTSTRAP = 1000  # resamples for the recommendation's interval
RULE = (
    "fewest bluffed out-of-domain queries among thresholds that falsely refuse at most "
    "{pct:g}% of the answerable questions; ties go to the smaller (stricter) threshold"
)


# -- input files ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Question:
    id: str
    query: str
    needle: str
    phrasing: str | None = None


@dataclass(frozen=True)
class Query:
    id: str
    query: str


def _jsonl(path: Path, required: Sequence[str]) -> list[tuple[int, dict[str, Any]]]:
    """Non-empty JSON-object lines with every required string field, or a one-line UsageError."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{path}: cannot read ({e}); give a UTF-8 JSON-lines file") from e
    rows: list[tuple[int, dict[str, Any]]] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise UsageError(
                f"{path} line {n}: not JSON ({e.msg}); write one object per line"
            ) from e
        if not isinstance(obj, dict):
            raise UsageError(f"{path} line {n}: not a JSON object; write one object per line")
        for key in required:
            if not isinstance(obj.get(key), str) or not obj[key].strip():
                raise UsageError(f"{path} line {n}: missing or empty string '{key}'; add it")
        rows.append((n, obj))
    if not rows:
        raise UsageError(f"{path}: no questions; write one JSON object per line")
    return rows


def _ids(path: Path, rows: list[tuple[int, dict[str, Any]]]) -> list[str]:
    ids: list[str] = []
    seen: set[str] = set()
    for n, obj in rows:
        qid = str(obj.get("id", f"line{n}"))
        if qid in seen:
            raise UsageError(f"{path} line {n}: id {qid!r} used twice; make ids unique")
        seen.add(qid)
        ids.append(qid)
    return ids


def load_questions(path: Path) -> list[Question]:
    """Answerable questions: ``{"query", "needle"}`` and optional ``id``, ``phrasing``."""
    rows = _jsonl(path, ("query", "needle"))
    return [
        Question(qid, obj["query"], obj["needle"], obj.get("phrasing") or None)
        for qid, (_, obj) in zip(_ids(path, rows), rows, strict=True)
    ]


def load_queries(path: Path) -> list[Query]:
    """Out-of-domain queries: ``{"query"}`` and optional ``id``."""
    rows = _jsonl(path, ("query",))
    return [Query(qid, obj["query"]) for qid, (_, obj) in zip(_ids(path, rows), rows, strict=True)]


# -- needles ----------------------------------------------------------------------------------------


def normalize(text: str) -> str:
    """NFKC, then every whitespace run collapsed to one space: how needles and chunks compare."""
    return " ".join(unicodedata.normalize("NFKC", text).split())


def hit_rank(contents: Iterable[str], needle: str) -> int | None:
    """1-based rank of the first content holding the whole needle, or None."""
    want = normalize(needle)
    for rank, content in enumerate(contents, 1):
        if want in normalize(content):
            return rank
    return None


def destroyed(needles: Sequence[str], contents: Iterable[str]) -> list[int]:
    """Indices of needles that no content holds whole: answers no retriever can ever return."""
    pending = {i: normalize(n) for i, n in enumerate(needles)}
    for content in contents:
        if not pending:
            break
        text = normalize(content)
        for i in [i for i, n in pending.items() if n in text]:
            del pending[i]
    return sorted(pending)


# -- estimates ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Estimate:
    """A proportion or mean over ``n`` questions with its 95% interval [low, high]."""

    value: float
    low: float
    high: float
    n: int

    def as_dict(self) -> dict[str, Any]:
        return {k: round(v, 4) if isinstance(v, float) else v for k, v in asdict(self).items()}

    def __str__(self) -> str:
        return f"{self.value:.2f} [{self.low:.2f}, {self.high:.2f}]"


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (stays inside [0, 1], sane at 0 and n)."""
    if n <= 0:
        return 0.0, 1.0
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be in [0, {n}], got {successes}")
    p = successes / n
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def recall_at(ranks: Sequence[int | None], k: int) -> Estimate:
    """Share of questions whose needle is in the top k, with its Wilson interval."""
    hits = sum(1 for r in ranks if r is not None and r <= k)
    low, high = wilson(hits, len(ranks))
    return Estimate(hits / len(ranks) if ranks else 0.0, low, high, len(ranks))


def mrr(ranks: Sequence[int | None]) -> Estimate:
    """Mean reciprocal rank (0 for a miss). MRR is a mean, not a proportion, so its interval is
    the normal approximation mean +/- 1.96 * sd / sqrt(n), clipped to [0, 1]."""
    n = len(ranks)
    if n == 0:
        return Estimate(0.0, 0.0, 1.0, 0)
    rr = [0.0 if r is None else 1.0 / r for r in ranks]
    mean = sum(rr) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in rr) / (n - 1)) if n > 1 else 0.0
    half = Z95 * sd / math.sqrt(n)
    return Estimate(mean, max(0.0, mean - half), min(1.0, mean + half), n)


# -- paired comparison -----------------------------------------------------------------------------


def sign_test(wins: int, losses: int) -> float:
    """Exact two-sided sign test on the discordant pairs: P(a split at least this uneven | p=1/2)."""
    n = wins + losses
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(wins, losses) + 1))
    return min(1.0, 2 * tail / 2**n)


@dataclass(frozen=True)
class Paired:
    """A vs B at one k over the same questions: ``wins`` = A finds the needle and B does not."""

    k: int
    wins: int
    losses: int
    both: int
    neither: int
    p_value: float

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["p_value"] = round(self.p_value, 6)
        return d


def paired(a: Sequence[int | None], b: Sequence[int | None], ks: Sequence[int]) -> list[Paired]:
    if len(a) != len(b):
        raise ValueError("paired rankings must cover the same questions")
    out = []
    for k in ks:
        ha = [r is not None and r <= k for r in a]
        hb = [r is not None and r <= k for r in b]
        wins = sum(x and not y for x, y in zip(ha, hb, strict=True))
        losses = sum(y and not x for x, y in zip(ha, hb, strict=True))
        both = sum(x and y for x, y in zip(ha, hb, strict=True))
        out.append(
            Paired(k, wins, losses, both, len(a) - wins - losses - both, sign_test(wins, losses))
        )
    return out


# -- calibration ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Gate:
    """One query's ranked results as the refusal gate sees them, best first.

    ``distances[i]``: the distance the gate compares with the threshold (cosine distance; -inf
    for a result the gate lets through whatever the threshold, e.g. one holding every code-like
    query term; +inf for one it never lets through nor shows; every result is +inf when a word
    the pack never mentions refuses the query). ``hits[i]``: the result holds the needle
    (all False for an out-of-domain query).
    """

    distances: tuple[float, ...]
    hits: tuple[bool, ...]


@dataclass(frozen=True)
class SweepRow:
    threshold: float
    answered_correctly: int  # answered, and a returned result holds the needle
    answered_wrongly: int  # answered, but no returned result holds the needle
    falsely_refused: int  # answerable question refused
    bluffed: int  # out-of-domain query answered
    questions: int
    ood: int

    @property
    def false_refusal_rate(self) -> float:
        return self.falsely_refused / self.questions if self.questions else 0.0

    @property
    def bluff_rate(self) -> float:
        return self.bluffed / self.ood if self.ood else 0.0

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["threshold"] = round(self.threshold, 6)
        d["false_refusal_rate"] = round(self.false_refusal_rate, 4)
        d["bluff_rate"] = round(self.bluff_rate, 4)
        return d


def threshold_grid(step: float = 0.005, high: float = 2.0) -> list[float]:
    """Cosine distances 0, step, ..., high (cosine distance lies in [0, 2])."""
    return [round(i * step, 6) for i in range(round(high / step) + 1)]


def outcomes(gates: Sequence[Gate], thresholds: np.ndarray, k: int) -> tuple[np.ndarray, ...]:
    """Per query and threshold (booleans, queries x thresholds): answered, and answered with the
    needle in the top k of what is shown. Refusal decides per query (issue 32): a query is
    answered when some result passes the threshold, and then the first k results that may be
    shown at all (distance not +inf) are, whatever their own distance."""
    answered = np.zeros((len(gates), len(thresholds)), dtype=bool)
    correct = np.zeros_like(answered)
    for i, g in enumerate(gates):
        if not g.distances:
            continue
        d = np.asarray(g.distances, dtype=np.float64)
        passes = d[None, :] <= thresholds[:, None]  # (thresholds, results)
        answered[i] = passes.any(axis=1)
        if any(g.hits):
            shown = d < np.inf
            returned = shown & (np.cumsum(shown) <= k)
            correct[i] = answered[i] & bool((returned & np.asarray(g.hits)).any())
    return answered, correct


def sweep(
    questions: Sequence[Gate], ood: Sequence[Gate], thresholds: Sequence[float], k: int
) -> list[SweepRow]:
    """Answered correctly / wrongly, falsely refused and bluffed at each threshold."""
    t = np.asarray(thresholds, dtype=np.float64)
    q_ans, q_ok = outcomes(questions, t, k)
    o_ans, _ = outcomes(ood, t, k)
    return _rows(
        t, q_ans.sum(axis=0), q_ok.sum(axis=0), o_ans.sum(axis=0), len(questions), len(ood)
    )


def _rows(
    t: np.ndarray,
    q_answered: np.ndarray,
    q_correct: np.ndarray,
    o_answered: np.ndarray,
    nq: int,
    no: int,
) -> list[SweepRow]:
    return [
        SweepRow(
            threshold=float(t[i]),
            answered_correctly=int(q_correct[i]),
            answered_wrongly=int(q_answered[i] - q_correct[i]),
            falsely_refused=nq - int(q_answered[i]),
            bluffed=int(o_answered[i]),
            questions=nq,
            ood=no,
        )
        for i in range(len(t))
    ]


def recommend(
    rows: Sequence[SweepRow], max_false_refusal: float = MAX_FALSE_REFUSAL
) -> SweepRow | None:
    """The rule in ``RULE``: None when no threshold keeps false refusals that low."""
    ok = [r for r in rows if r.false_refusal_rate <= max_false_refusal]
    if not ok:
        return None
    return min(ok, key=lambda r: (r.bluffed, r.threshold))


def bootstrap_interval(
    questions: Sequence[Gate],
    ood: Sequence[Gate],
    thresholds: Sequence[float],
    k: int,
    max_false_refusal: float = MAX_FALSE_REFUSAL,
    resamples: int = BOOTSTRAP,
    seed: int = 0,
) -> tuple[float, float] | None:
    """95% percentile bootstrap interval of the recommended threshold: the answerable and the
    out-of-domain queries are resampled (with replacement, separately) and ``recommend`` is
    applied to each resample. None when no resample yields a recommendation."""
    t = np.asarray(thresholds, dtype=np.float64)
    q_ans, _ = outcomes(questions, t, k)
    o_ans, _ = outcomes(ood, t, k)
    rng = np.random.default_rng(seed)
    nq, no = len(questions), len(ood)
    # multiplicity of each query in each resample, then counts per threshold by one product
    wq = np.stack([np.bincount(rng.integers(0, nq, nq), minlength=nq) for _ in range(resamples)])
    wo = np.stack([np.bincount(rng.integers(0, no, no), minlength=no) for _ in range(resamples)])
    refused = nq - wq @ q_ans.astype(np.int64)  # (resamples, thresholds)
    bluffed = wo @ o_ans.astype(np.int64)
    picks = []
    for i in range(resamples):
        ok = np.flatnonzero(refused[i] <= max_false_refusal * nq)
        if ok.size:
            fewest = bluffed[i, ok].min()
            picks.append(t[ok[bluffed[i, ok] == fewest][0]])  # the smallest threshold of the tie
    if not picks:
        return None
    lo, hi = np.percentile(picks, [2.5, 97.5])
    return float(lo), float(hi)


def rule_text(max_false_refusal: float = MAX_FALSE_REFUSAL) -> str:
    return RULE.format(pct=max_false_refusal * 100)
