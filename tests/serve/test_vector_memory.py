"""``kbpack serve/mcp --vector-memory``: the budget for the bfloat16 copies that batches of
concurrent searches scan (``kbpack.search.vectors.CopyBudget``)."""

from __future__ import annotations

from cli_run import run

from kbpack.cli.commands import serve as serve_cli
from kbpack.search.vectors import CopyBudget
from kbpack.serve import library


def test_the_cli_default_is_the_library_s() -> None:
    assert serve_cli.VECTOR_MEMORY_MB == library.VECTOR_MEMORY_MB


def test_a_negative_budget_is_refused_in_one_line() -> None:
    code, _, err = run("serve", "nothing.kbpack", "--vector-memory", "-1")
    assert code == 2 and "--vector-memory" in err and "Traceback" not in err


def test_the_budget_is_shared_and_given_back() -> None:
    budget = CopyBudget(100)
    assert budget.take(60) and not budget.take(50) and budget.take(40)
    budget.give(60)
    assert budget.used == 40 and budget.take(60) and budget.used == 100
