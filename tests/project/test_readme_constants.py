"""Every number the README states about fusion, refusal and limits is the code's number.

The README drifted once (it said BM25 weight 0.5 while the code used 0.25): each sentence
below is found in README.md and its number compared with the constant it describes. When a
constant changes, this test names the sentence to update.
"""

from __future__ import annotations

import re

import click
import pytest

from kbpack.cli.render import QUOTE_CHARS
from kbpack.pack import format as F
from kbpack.search import fusion
from kbpack.search import searcher as search
from tests.user_docs import user_docs

README = user_docs()  # README.md and docs/*.md
TEXT = " ".join(README.split())  # sentences wrap across lines


def _option_default(command: str, option: str) -> object:
    from kbpack.cli.main import cli

    cmd = cli.get_command(click.Context(cli), command)
    assert cmd is not None
    (param,) = [p for p in cmd.params if option in getattr(p, "opts", [])]
    return param.default


def _serve(name: str) -> object:
    pytest.importorskip("starlette")
    from kbpack.serve import library, mcp_tools

    return getattr(library, name, None) or getattr(mcp_tools, name)


# (pattern with one number group, the code's value)
STATEMENTS = [
    (r"each gets `([\d.]+) \* minmax\(cos\)", lambda: fusion.DENSE_WEIGHT),
    (r"minmax\(cos\) \+ ([\d.]+) \* bm25 / max bm25", lambda: round(1 - fusion.DENSE_WEIGHT, 6)),
    (r"The candidates are the dense top (\d+)", lambda: search.CANDIDATES),
    (r"and the BM25 top (\d+);", lambda: search.CANDIDATES),
    (r"calibrated value, else ([\d.]+)\)", lambda: F.DEFAULT_MAX_DISTANCE),
    (r"rare in the pack \(in at most (\d+)% of chunks", lambda: round(search.RARE_SHARE * 100)),
    (r"of chunks, or (\d+)[),]", lambda: search.RARE_MIN),
    (r"Quotes are cut at (\d+) characters", lambda: QUOTE_CHARS),
    (r"`--max-pages` \((\d+)\)", lambda: _option_default("build", "--max-pages")),
    (r"`--max-file-mb` \((\d+)\)", lambda: _option_default("build", "--max-file-mb")),
    (r"`--timeout` \((\d+) s\)", lambda: _option_default("build", "--timeout")),
    (r"queries are at most ([\d,]+) characters", lambda: _serve("MAX_QUERY_CHARS")),
    (r"and `k` at most (\d+);", lambda: _serve("MAX_K")),
    (r"\(at most ([\d,]+) characters a call\)", lambda: _serve("MAX_READ_CHARS")),
]


@pytest.mark.parametrize(("pattern", "value"), STATEMENTS, ids=[p for p, _ in STATEMENTS])
def test_readme_number_is_the_code(pattern: str, value: object) -> None:
    found = re.findall(pattern, TEXT)
    assert found, f"README no longer says /{pattern}/: update the sentence or this test"
    want = value() if callable(value) else value
    for got in found:
        assert float(got.replace(",", "")) == float(want), f"README says {got}, the code {want}"
