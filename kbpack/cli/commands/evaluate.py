"""``kbpack eval``: recall@k, MRR, destroyed answers and paired tests of a pack on a question
file. The measuring is ``kbpack.ops.evaluate_pack``; this module parses options and prints."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from kbpack.cli.commands.common import Choice, emit_json, grid, say
from kbpack.cli.options import (
    file_path,
    flag,
    json_option,
    model_option,
    pack_argument,
    rerank_options,
    threads_option,
)
from kbpack.errors import Exit
from kbpack.ops import evaluate as E
from kbpack.ops.evaluate_pack import MODES, evaluate_pack


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


@click.command("eval")
@pack_argument()
@click.argument("questions", type=file_path(exists=True))
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
    type=file_path(exists=True),
    help="Compare with another pack on the same questions (paired sign test).",
)
@flag("--ranks", "show_ranks", help="Also show each question's rank.")
@rerank_options(
    "Cross-encoder GGUF: also measure each mode reranked, paired with it unreranked.",
    "How many results the reranker scores per question.",
)
@model_option()
@threads_option()
@json_option()
def eval_cmd(pack: Path, questions: Path, ks: str, as_json: bool, **how: Any) -> int:
    """Measure retrieval on PACK with QUESTIONS (JSON lines: query, needle, optional id, phrasing).

    A question is found at rank r when the r-th result's content holds the whole needle (after
    NFKC and whitespace collapsing). Reports recall@k and MRR with 95% intervals, destroyed
    answers (needles no chunk holds whole), and paired sign tests: first mode vs each other
    mode, or PACK vs --against for each mode, or each mode vs itself reranked (--rerank).
    """
    if how["rerank"] is not None and how["against"] is not None:
        raise click.UsageError(
            "--rerank pairs each mode with itself reranked, --against pairs two packs: give one"
        )
    # the options are evaluate_pack's arguments, by name: modes, against, show_ranks, rerank...
    report, qs = evaluate_pack(pack, questions, ks=_parse_ks(ks), **how)
    if as_json:
        emit_json(report)
    else:
        say(render_eval(report, qs))
    return Exit.OK


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
        return grid(head, rows)

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
        lines += grid(["k", "wins", "losses", "sign-test p"], rows, indent=2)
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
        lines += ["", *grid(["id", *modes], rows)]
    lines += [
        "",
        "intervals: 95% Wilson (recall), normal approximation (MRR); '-' = not in the top "
        f"{max(report['k'])}",
    ]
    return "\n".join(lines)


def _est(e: dict[str, Any]) -> str:
    return f"{e['value']:.2f} [{e['low']:.2f},{e['high']:.2f}]"
