"""``kbpack calibrate``: the refusal threshold chosen from answerable and out-of-domain queries.
The sweep and the recommendation are ``kbpack.ops.calibrate``; this module parses options and prints."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from kbpack.cli.commands.common import emit_json, grid, say
from kbpack.cli.options import (
    chosen,
    file_path,
    flag,
    force_option,
    json_option,
    k_option,
    model_option,
    output_option,
    pack_argument,
    threads_option,
)
from kbpack.errors import Exit
from kbpack.ops import evaluate as E
from kbpack.ops.calibrate import calibrate_pack
from kbpack.ops.outpath import check_output


@click.command()
@pack_argument()
@click.option(
    "--questions",
    required=True,
    type=file_path(exists=True),
    help="Answerable questions (JSON lines: query, needle).",
)
@click.option(
    "--ood",
    required=True,
    type=file_path(exists=True),
    help="Out-of-domain queries the pack cannot answer (JSON lines: query).",
)
@chosen(
    "--mode",
    choices=["hybrid", "dense"],
    default="hybrid",
    help="The mode whose refusal gate is calibrated.",
)
@k_option("Results returned per answer (a correct answer has the needle in them).")
@click.option(
    "--max-false-refusal",
    type=click.FloatRange(0, 1),
    default=E.MAX_FALSE_REFUSAL,
    show_default=True,
    help="Share of answerable questions the threshold may refuse.",
)
@flag("--write", "write", help="Store the recommended threshold in PACK.")
@output_option(
    "With --write: write a calibrated copy here instead of replacing PACK.",
    dest="output",
    dir_okay=False,
)
@force_option()
@model_option()
@threads_option()
@json_option()
def calibrate(
    pack: Path,
    questions: Path,
    ood: Path,
    output: Path | None,
    force: bool,
    as_json: bool,
    **how: Any,
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
    if output is not None and not how["write"]:
        raise click.UsageError("--output only makes sense with --write")
    if output is not None:
        output = check_output(output, inputs=[pack, questions, ood], force=force)
    # the options are calibrate_pack's arguments, by name: mode, k, max_false_refusal, write...
    report, rows, best = calibrate_pack(pack, questions, ood, output=output, **how)
    if as_json:
        emit_json(report)
    else:
        say(render_calibration(report, rows, best))
    return Exit.OK


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
    lines += grid(head, table)
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
