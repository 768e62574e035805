"""``kbpack calibrate`` on a pack: each query's ranking as the refusal gate sees it, the sweep
over thresholds, the recommendation (with its bootstrap interval and, against the default, the
bluffs a looser one adds) and the calibration record stored with ``--write``.

The sweep and the rule are pure functions in ``kbpack.ops.evaluate``; this module searches the pack.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kbpack.errors import UsageError
from kbpack.ops import evaluate as E
from kbpack.ops.evaluate_pack import ensure_dense
from kbpack.pack import format as F

# How deep calibrate looks into each ranking: the gate may pass results from far down the fused
# list when the threshold is tight, so look at every candidate search considers.
GATE_DEPTH = 200


def gate(pack: Any, query: str, needle: str | None, mode: str) -> E.Gate:
    """The query's ranking as the refusal gate sees it (see kbpack.search.searcher: a hybrid result that
    opens the identifier gate passes whatever its distance; a foreign-language query's result
    that shares no content word with it never passes on distance; a word the pack never
    mentions refuses the query unless a result is within ``NEAR_DISTANCE``)."""
    resp = pack.search(query, k=GATE_DEPTH, mode=mode, refuse=False)
    identifier = pack.searcher.identifier_gate(query) if mode == "hybrid" else None
    want = E.normalize(needle) if needle else None
    distances, hits = [], []
    for r in resp.results:
        d = math.inf if r.distance is None else float(r.distance)
        if not pack.searcher.distance_counts(query, r.content):
            d = math.inf  # a foreign-language query's result without a shared word never passes
        if identifier is not None and identifier.opens(r.content):
            d = -math.inf
        distances.append(d)
        hits.append(want is not None and want in E.normalize(r.content))
    if pack.searcher.absent_vetoes(
        query,
        resp.not_in_pack,
        dict(enumerate(r.distance for r in resp.results if r.distance is not None)),
    ):
        distances = [math.inf] * len(distances)  # the pack never mentions a word of it
    return E.Gate(tuple(distances), tuple(hits))


def too_few(questions: int, ood: int) -> str | None:
    """Why the sets are too small to recommend a threshold from, or None."""
    if questions >= E.MIN_QUESTIONS and ood >= E.MIN_OOD:
        return None
    return (
        f"too few queries to recommend a threshold: {questions} answerable (need "
        f"{E.MIN_QUESTIONS}) and {ood} out-of-domain (need {E.MIN_OOD}); add more"
    )


def vs_default(rows: Sequence[E.SweepRow], best: E.SweepRow) -> dict[str, Any]:
    """The recommendation against the default threshold on the same queries: a looser one must
    say what it costs in bluffs."""
    default = min(rows, key=lambda r: abs(r.threshold - F.DEFAULT_MAX_DISTANCE))
    return {
        "default": F.DEFAULT_MAX_DISTANCE,
        "looser": best.threshold > default.threshold,
        "extra_bluffs": best.bluffed - default.bluffed,
        "fewer_false_refusals": default.falsely_refused - best.falsely_refused,
    }


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def calibrate_pack(
    pack: Path,
    questions: Path,
    ood: Path,
    *,
    mode: str = "hybrid",
    k: int = 5,
    max_false_refusal: float = E.MAX_FALSE_REFUSAL,
    write: bool = False,
    output: Path | None = None,
    model: Path | None = None,
    threads: int | None = None,
) -> tuple[dict[str, Any], list[E.SweepRow], E.SweepRow | None]:
    """The ``kbpack calibrate`` report (spec/JSON.md), the sweep's rows and the recommended row.

    With ``write`` the recommendation is stored with its provenance in PACK (or in a calibrated
    copy at ``output``); a set too small or no threshold meeting the rule is a UsageError then.
    """
    import kbpack

    qs = E.load_questions(questions)
    oods = E.load_queries(ood)
    with kbpack.open(str(pack), model=model, threads=threads) as p:
        if p.reader.model is None:
            raise UsageError(
                f"{pack}: this pack has no vectors (built with --no-vectors); there is no distance to calibrate"
            )
        ensure_dense(p, [mode])
        q_gates = [gate(p, q.query, q.needle, mode) for q in qs]
        o_gates = [gate(p, o.query, None, mode) for o in oods]
        grid = E.threshold_grid()
        rows = E.sweep(q_gates, o_gates, grid, k)
        short = too_few(len(qs), len(oods))
        best = None if short else E.recommend(rows, max_false_refusal)
        rule = E.rule_text(max_false_refusal)
        report: dict[str, Any] = {
            "pack": str(pack),
            "mode": mode,
            "k": k,
            "questions": len(qs),
            "ood": len(oods),
            "rule": rule,
            "current_threshold": p.reader.search_defaults.get("max_distance"),
            "too_few": short,
            "recommended": best.as_dict() if best else None,
            "interval": None,
            "vs_default": None,
            "sweep": [r.as_dict() for r in rows],
        }
        if best is not None:
            ci = E.bootstrap_interval(q_gates, o_gates, grid, k, max_false_refusal)
            report["interval"] = None if ci is None else [round(ci[0], 6), round(ci[1], 6)]
            report["vs_default"] = vs_default(rows, best)
        if write:
            if short:
                raise UsageError(f"{pack}: {short}; nothing written")
            if best is None:
                raise UsageError(
                    f"{pack}: no threshold refuses at most {max_false_refusal:.0%} of the questions; nothing written"
                )
            calibration = {
                "threshold": best.threshold,
                "rule": rule,
                "mode": mode,
                "k": k,
                "questions": {
                    "file": questions.name,
                    "sha256": _sha256(questions),
                    "count": len(qs),
                },
                "ood": {"file": ood.name, "sha256": _sha256(ood), "count": len(oods)},
                "at_threshold": best.as_dict(),
                "interval": report["interval"],
                "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                "kbpack": kbpack.__version__,
            }
            report["written"] = str(p.store_calibration(output, calibration))
    return report, rows, best
