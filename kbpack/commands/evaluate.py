"""``kbpack eval`` (recall@k, MRR, destroyed answers, paired tests) and ``kbpack calibrate``
(the refusal threshold chosen from answerable and out-of-domain queries)."""

from __future__ import annotations

import datetime as dt
import hashlib
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from kbpack import evaluate as E
from kbpack.commands.common import (
    Choice,
    emit_json,
    force_option,
    json_option,
    threads_option,
)
from kbpack.errors import UsageError
from kbpack.outpath import check_output
from kbpack.pack import format as F

MODES = ("hybrid", "dense", "bm25")
# How deep calibrate looks into each ranking: the gate may pass results from far down the fused
# list when the threshold is tight, so look at every candidate search considers.
GATE_DEPTH = 200

model_option = click.option(
    "--model",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Query-side GGUF model (must be the pack's model).",
)


def _parse_ks(value: str) -> list[int]:
    try:
        ks = sorted({int(x) for x in value.split(",") if x.strip()})
    except ValueError:
        raise click.BadParameter(
            f"{value!r}: give positive integers separated by commas, e.g. 1,4,8,20"
        ) from None
    if not ks or ks[0] < 1:
        raise click.BadParameter(
            f"{value!r}: give positive integers separated by commas, e.g. 1,4,8,20"
        )
    return ks


def _check_modes(pack: Any, modes: Sequence[str], asked: bool) -> list[str]:
    """Without vectors only bm25 can run: say so instead of reporting bm25 under another name."""
    if pack.reader.model is not None:
        return list(modes)
    if asked and any(m != "bm25" for m in modes):
        raise UsageError(
            f"{pack.path}: this pack has no vectors (built with --no-vectors); use --mode bm25"
        )
    return ["bm25"]


def _ensure_dense(pack: Any, modes: Sequence[str]) -> None:
    if any(m != "bm25" for m in modes) and pack.embedder is None:
        why = "; ".join(pack.searcher.notes) or "the pack's model is not available"
        raise UsageError(
            f"{pack.path}: dense search cannot run ({why}); pass --model FILE.gguf or use --mode bm25"
        )


RERANKED = "+rerank"  # suffix of a mode's name when the reranker reordered its results

rerank_option = click.option(
    "--rerank",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Cross-encoder GGUF: also measure each mode reranked, paired with it unreranked.",
)
rerank_top_option = click.option(
    "--rerank-top",
    type=click.IntRange(min=1),
    default=25,
    show_default=True,
    help="How many results the reranker scores per question.",
)


def _ranks(
    pack: Any,
    questions: Sequence[E.Question],
    mode: str,
    depth: int,
    reranker: Any | None = None,
    rerank_top: int = 25,
) -> list[int | None]:
    """The rank of each question's needle in ``mode`` (reordered by ``reranker`` if given)."""
    searcher = pack.searcher
    searcher.reranker = reranker
    out = []
    for q in questions:
        resp = pack.search(q.query, k=depth, mode=mode, refuse=False, rerank_top=rerank_top)
        out.append(E.hit_rank((r.content for r in resp.results), q.needle))
    return out


def _subsets(questions: Sequence[E.Question]) -> list[tuple[str, list[int]]]:
    """'all', then one subset per phrasing (doc, ticket, ...) when the file has them."""
    subsets = [("all", list(range(len(questions))))]
    for ph in sorted({q.phrasing for q in questions if q.phrasing}):
        subsets.append((ph, [i for i, q in enumerate(questions) if q.phrasing == ph]))
    return subsets


def _metrics(ranks: Sequence[int | None], ks: Sequence[int]) -> dict[str, Any]:
    return {
        "n": len(ranks),
        "recall": {str(k): E.recall_at(ranks, k).as_dict() for k in ks},
        "mrr": E.mrr(ranks).as_dict(),
    }


@click.command("eval")
@click.argument("pack", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("questions", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--mode",
    "modes",
    multiple=True,
    type=Choice(MODES),
    help="Retrieval mode (repeatable); default: all three (bm25 only without vectors).",
)
@click.option("-k", "ks", default="1,4,8,20", show_default=True, help="Cut-offs for recall@k.")
@click.option(
    "--against",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Compare with another pack on the same questions (paired sign test).",
)
@click.option("--ranks", "show_ranks", is_flag=True, help="Also show each question's rank.")
@rerank_option
@rerank_top_option
@model_option
@threads_option
@json_option
def eval_cmd(
    pack: Path,
    questions: Path,
    modes: tuple[str, ...],
    ks: str,
    against: Path | None,
    show_ranks: bool,
    rerank: Path | None,
    rerank_top: int,
    model: Path | None,
    threads: int | None,
    as_json: bool,
) -> int:
    """Measure retrieval on PACK with QUESTIONS (JSON lines: query, needle, optional id, phrasing).

    A question is found at rank r when the r-th result's content holds the whole needle (after
    NFKC and whitespace collapsing). Reports recall@k and MRR with 95% intervals, destroyed
    answers (needles no chunk holds whole), and paired sign tests: first mode vs each other
    mode, or PACK vs --against for each mode, or each mode vs itself reranked (--rerank).
    """
    import kbpack

    if rerank is not None and against is not None:
        raise click.UsageError(
            "--rerank pairs each mode with itself reranked, --against pairs two packs: give one"
        )
    cutoffs = _parse_ks(ks)
    qs = E.load_questions(questions)
    depth = max(cutoffs)
    report: dict[str, Any] = {"pack": str(pack), "questions": str(questions), "k": cutoffs}
    with kbpack.open(str(pack), model=model, threads=threads) as p:
        run_modes = _check_modes(p, modes or MODES, asked=bool(modes))
        _ensure_dense(p, run_modes)
        gone = E.destroyed([q.needle for q in qs], (c for _, c in p.iter_chunk_contents()))
        needles = {q.needle for q in qs}
        gone_needles = {qs[i].needle for i in gone}
        report.update(
            chunks=p.n_chunks,
            n_questions=len(qs),
            n_needles=len(needles),
            destroyed={"needles": len(gone_needles), "ids": [qs[i].id for i in gone]},
        )
        ranks = {m: _ranks(p, qs, m, depth) for m in run_modes}
        if rerank is not None:
            from kbpack.api import load_reranker

            reranker = load_reranker(rerank, threads)
            for m in list(run_modes):
                ranks[m + RERANKED] = _ranks(p, qs, m, depth, reranker, rerank_top)
            report["rerank"] = {"model": reranker.identity.as_dict(), "top": rerank_top}
            reranker.close()
    plain_modes = run_modes
    if rerank is not None:
        run_modes = [m for base in plain_modes for m in (base, base + RERANKED)]
    other: dict[str, list[int | None]] = {}
    if against is not None:
        with kbpack.open(str(against), model=model, threads=threads) as p2:
            _ensure_dense(p2, _check_modes(p2, run_modes, asked=True))
            other = {m: _ranks(p2, qs, m, depth) for m in run_modes}

    subsets = _subsets(qs)
    report["modes"] = {
        m: {name: _metrics([ranks[m][i] for i in idx], cutoffs) for name, idx in subsets}
        for m in run_modes
    }
    comparisons: list[tuple[str, str, list[int | None], list[int | None]]] = []
    if other and against is not None:
        comparisons = [
            (f"{m} {pack.name}", f"{m} {against.name}", ranks[m], other[m]) for m in run_modes
        ]
        report["against"] = {
            "pack": str(against),
            "modes": {
                m: {name: _metrics([other[m][i] for i in idx], cutoffs) for name, idx in subsets}
                for m in run_modes
            },
        }
    elif rerank is not None:
        comparisons = [(m, m + RERANKED, ranks[m], ranks[m + RERANKED]) for m in plain_modes]
    else:
        comparisons = [(run_modes[0], m, ranks[run_modes[0]], ranks[m]) for m in run_modes[1:]]
    report["paired"] = [
        {
            "a": a,
            "b": b,
            "subset": name,
            "n": len(idx),
            "k": [
                x.as_dict() for x in E.paired([ra[i] for i in idx], [rb[i] for i in idx], cutoffs)
            ],
        }
        for a, b, ra, rb in comparisons
        for name, idx in subsets
    ]
    if show_ranks:
        report["ranks"] = {m: {q.id: ranks[m][i] for i, q in enumerate(qs)} for m in run_modes}
    if as_json:
        emit_json(report)
    else:
        click.echo(render_eval(report, qs))
    return 0


def _fmt_p(p: float) -> str:
    return f"{p:.2g}" if p < 0.001 else f"{p:.3f}"


def render_eval(report: dict[str, Any], qs: Sequence[E.Question]) -> str:
    d = report["destroyed"]
    lines = [
        f"{report['pack']}: {report['n_questions']} questions, {report['n_needles']} needles, "
        f"{report['chunks']} chunks",
        f"destroyed answers: {d['needles']} of {report['n_needles']} needles"
        + (f" ({', '.join(d['ids'])})" if d["ids"] else ""),
        "",
    ]

    def block(modes: dict[str, Any], label: str) -> list[str]:
        head = ["mode", "subset", "n", *(f"R@{k}" for k in report["k"]), "MRR"]
        rows = [
            [
                label + m,
                name,
                str(v["n"]),
                *(_est(v["recall"][str(k)]) for k in report["k"]),
                _est(v["mrr"]),
            ]
            for m, subs in modes.items()
            for name, v in subs.items()
        ]
        return _grid(head, rows)

    lines += block(report["modes"], "")
    if "against" in report:
        lines += ["", f"against {report['against']['pack']}:"]
        lines += block(report["against"]["modes"], "")
    for c in report["paired"]:
        lines += [
            "",
            f"paired: {c['a']} vs {c['b']} ({c['subset']}, n={c['n']}): wins = only {c['a']} finds it",
        ]
        rows = [
            [str(x["k"]), str(x["wins"]), str(x["losses"]), _fmt_p(x["p_value"])] for x in c["k"]
        ]
        lines += _grid(["k", "wins", "losses", "sign-test p"], rows, indent=2)
    if "ranks" in report:
        modes = list(report["ranks"])
        rows = [
            [
                q.id,
                *(
                    "-" if report["ranks"][m][q.id] is None else str(report["ranks"][m][q.id])
                    for m in modes
                ),
            ]
            for q in qs
        ]
        lines += ["", *_grid(["id", *modes], rows)]
    lines += [
        "",
        "intervals: 95% Wilson (recall), normal approximation (MRR); '-' = not in the top "
        f"{max(report['k'])}",
    ]
    return "\n".join(lines)


def _est(e: dict[str, Any]) -> str:
    return f"{e['value']:.2f} [{e['low']:.2f},{e['high']:.2f}]"


def _grid(head: list[str], rows: list[list[str]], indent: int = 0) -> list[str]:
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    pad = " " * indent
    return [
        pad + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in [head, *rows]
    ]


# -- calibrate -------------------------------------------------------------------------------------


def _gate(pack: Any, query: str, needle: str | None, mode: str) -> E.Gate:
    """The query's ranking as the refusal gate sees it (see kbpack.search: a hybrid result that
    opens the identifier gate passes whatever its distance; a foreign-language query's result
    that shares no content word with it never passes on distance)."""
    resp = pack.search(query, k=GATE_DEPTH, mode=mode, refuse=False)
    gate = pack.searcher.identifier_gate(query) if mode == "hybrid" else None
    want = E.normalize(needle) if needle else None
    distances, hits = [], []
    for r in resp.results:
        d = math.inf if r.distance is None else float(r.distance)
        if not pack.searcher.distance_counts(query, r.content):
            d = math.inf  # a foreign-language query's result without a shared word never passes
        if gate is not None and gate.opens(r.content):
            d = -math.inf
        distances.append(d)
        hits.append(want is not None and want in E.normalize(r.content))
    return E.Gate(tuple(distances), tuple(hits))


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@click.command()
@click.argument("pack", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--questions",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Answerable questions (JSON lines: query, needle).",
)
@click.option(
    "--ood",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Out-of-domain queries the pack cannot answer (JSON lines: query).",
)
@click.option(
    "--mode",
    type=Choice(["hybrid", "dense"]),
    default="hybrid",
    show_default=True,
    help="The mode whose refusal gate is calibrated.",
)
@click.option(
    "-k",
    "k",
    type=click.IntRange(min=1),
    default=5,
    show_default=True,
    help="Results returned per answer (a correct answer has the needle in them).",
)
@click.option(
    "--max-false-refusal",
    type=click.FloatRange(0, 1),
    default=E.MAX_FALSE_REFUSAL,
    show_default=True,
    help="Share of answerable questions the threshold may refuse.",
)
@click.option("--write", "write", is_flag=True, help="Store the recommended threshold in PACK.")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="With --write: write a calibrated copy here instead of replacing PACK.",
)
@force_option
@model_option
@threads_option
@json_option
def calibrate(
    pack: Path,
    questions: Path,
    ood: Path,
    mode: str,
    k: int,
    max_false_refusal: float,
    write: bool,
    output: Path | None,
    force: bool,
    model: Path | None,
    threads: int | None,
    as_json: bool,
) -> int:
    """Sweep the refusal threshold (cosine distance) on PACK and recommend one.

    For each threshold: answerable questions answered correctly (the needle in the top k of what
    passes), answered wrongly, falsely refused, and out-of-domain queries bluffed (answered).
    The rule: fewest bluffs among thresholds refusing at most --max-false-refusal of the
    answerable questions; ties go to the smaller (stricter) threshold. No recommendation from
    fewer than 20 answerable or 10 out-of-domain queries. The recommendation comes with a 95%
    bootstrap interval, and, when looser than the default 0.675, the bluffs it adds. --write
    stores it with its provenance; query then uses it by default.
    """
    import kbpack

    if output is not None and not write:
        raise click.UsageError("--output only makes sense with --write")
    if output is not None:
        output = check_output(output, inputs=[pack, questions, ood], force=force)
    qs = E.load_questions(questions)
    oods = E.load_queries(ood)
    with kbpack.open(str(pack), model=model, threads=threads) as p:
        if p.reader.model is None:
            raise UsageError(
                f"{pack}: this pack has no vectors (built with --no-vectors); there is no distance to calibrate"
            )
        _ensure_dense(p, [mode])
        q_gates = [_gate(p, q.query, q.needle, mode) for q in qs]
        o_gates = [_gate(p, o.query, None, mode) for o in oods]
        grid = E.threshold_grid()
        rows = E.sweep(q_gates, o_gates, grid, k)
        short = _too_few(len(qs), len(oods))
        best = None if short else E.recommend(rows, max_false_refusal)
        current = p.reader.search_defaults.get("max_distance")
        rule = E.rule_text(max_false_refusal)
        report: dict[str, Any] = {
            "pack": str(pack),
            "mode": mode,
            "k": k,
            "questions": len(qs),
            "ood": len(oods),
            "rule": rule,
            "current_threshold": current,
            "too_few": short,
            "recommended": best.as_dict() if best else None,
            "interval": None,
            "vs_default": None,
            "sweep": [r.as_dict() for r in rows],
        }
        if best is not None:
            ci = E.bootstrap_interval(q_gates, o_gates, grid, k, max_false_refusal)
            report["interval"] = None if ci is None else [round(ci[0], 6), round(ci[1], 6)]
            report["vs_default"] = _vs_default(rows, best)
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
    if as_json:
        emit_json(report)
    else:
        click.echo(render_calibration(report, rows, best))
    return 0


def _too_few(questions: int, ood: int) -> str | None:
    """Why the sets are too small to recommend a threshold from, or None."""
    if questions >= E.MIN_QUESTIONS and ood >= E.MIN_OOD:
        return None
    return (
        f"too few queries to recommend a threshold: {questions} answerable (need "
        f"{E.MIN_QUESTIONS}) and {ood} out-of-domain (need {E.MIN_OOD}); add more"
    )


def _vs_default(rows: Sequence[E.SweepRow], best: E.SweepRow) -> dict[str, Any]:
    """The recommendation against the default threshold on the same queries: a looser one must
    say what it costs in bluffs."""
    default = min(rows, key=lambda r: abs(r.threshold - F.DEFAULT_MAX_DISTANCE))
    return {
        "default": F.DEFAULT_MAX_DISTANCE,
        "looser": best.threshold > default.threshold,
        "extra_bluffs": best.bluffed - default.bluffed,
        "fewer_false_refusals": default.falsely_refused - best.falsely_refused,
    }


def render_calibration(
    report: dict[str, Any], rows: Sequence[E.SweepRow], best: E.SweepRow | None
) -> str:
    lines = [
        f"{report['pack']} ({report['mode']}, k={report['k']}): {report['questions']} answerable "
        f"questions, {report['ood']} out-of-domain queries",
        "",
    ]
    shown = _rows_to_show(rows, best)
    head = ["threshold", "correct", "wrong", "refused", "bluffed"]
    table = [
        [
            ("*" if r is best else " ") + f"{r.threshold:.3f}",
            str(r.answered_correctly),
            str(r.answered_wrongly),
            f"{r.falsely_refused} ({r.false_refusal_rate:.0%})",
            f"{r.bluffed} ({r.bluff_rate:.0%})",
        ]
        for r in shown
    ]
    lines += _grid(head, table)
    lines.append("")
    if report.get("too_few"):
        lines.append(f"no recommendation: {report['too_few']}")
    elif best is None:
        lines.append(f"no recommendation: no threshold meets the rule ({report['rule']})")
    else:
        lo, hi = E.wilson(best.bluffed, best.ood)
        flo, fhi = E.wilson(best.falsely_refused, best.questions)
        lines += [
            f"recommended threshold: {best.threshold:.3f}"
            + (
                f" (95% bootstrap interval {report['interval'][0]:.3f}-{report['interval'][1]:.3f})"
                if report.get("interval")
                else ""
            ),
            f"  bluffed             {best.bluffed}/{best.ood} = {best.bluff_rate:.0%} "
            f"(95% CI {lo:.0%}-{hi:.0%})",
            f"  falsely refused     {best.falsely_refused}/{best.questions} = "
            f"{best.false_refusal_rate:.0%} (95% CI {flo:.0%}-{fhi:.0%})",
            f"  answered correctly  {best.answered_correctly}/{best.questions}",
            f"  rule: {report['rule']}",
        ]
        vs = report.get("vs_default")
        if vs and vs["looser"]:
            lines.append(
                f"  looser than the default {vs['default']:g}: {vs['extra_bluffs']} more bluffed "
                f"and {vs['fewer_false_refusals']} fewer falsely refused on these queries"
            )
    cur = report.get("current_threshold")
    if cur is not None:
        lines.append(f"pack's current threshold: {cur:g}")
    if "written" in report:
        lines.append(f"written to {report['written']}")
    elif best is not None:
        lines.append("(not written: add --write to store it in the pack)")
    return "\n".join(lines)


def _rows_to_show(rows: Sequence[E.SweepRow], best: E.SweepRow | None) -> list[E.SweepRow]:
    """The first row, then every 0.025 from just before the counts first change to where
    nothing is refused and every bluff that will happen has happened, plus the recommended row."""

    def counts(r: E.SweepRow) -> tuple[int, int, int]:
        return r.answered_correctly, r.falsely_refused, r.bluffed

    first = rows[0]
    moved = next((r.threshold for r in rows if counts(r) != counts(first)), first.threshold)
    last = rows[-1]
    done = next(
        (r.threshold for r in rows if r.falsely_refused == 0 and r.bluffed == last.bluffed),
        last.threshold,
    )
    picked = [first] + [
        r
        for r in rows[1:]
        if moved - 0.025 <= r.threshold <= done + 1e-9
        and round(r.threshold / 0.025, 6).is_integer()
    ]
    if best is not None and best not in picked:
        picked.append(best)
    return sorted(picked, key=lambda r: r.threshold)
