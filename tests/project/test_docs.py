"""Docs cannot drift: every element is in the spec, every command in the README and --help."""

from __future__ import annotations

import inspect
import re

from click.testing import CliRunner

from kbpack.cli.main import COMMANDS, cli
from kbpack.pack import format as F
from kbpack.text import analyze as lexical
from tests.paths import REPO_ROOT
from tests.user_docs import user_docs

ROOT = REPO_ROOT
SPEC = (ROOT / "spec" / "FORMAT.md").read_text()
README = user_docs()  # README.md and docs/*.md


def test_every_element_is_in_the_spec() -> None:
    for el in F.ELEMENTS:
        group, _, leaf = el.path.rpartition("/")
        assert f"`{el.path}`" in SPEC or (
            f"`{group or el.path}`" in SPEC and f"`{leaf}`" in SPEC
        ), el.path


def test_every_model_attribute_and_count_is_in_the_spec() -> None:
    for name in (*F.MODEL_ATTRS, *F.MODEL_PREFIX_ATTRS, *F.COUNT_KEYS):
        assert f"`{name}`" in SPEC, name


def test_spec_states_the_tokenizer_exactly() -> None:
    doc = inspect.getdoc(lexical.tokenize) or ""
    steps = doc.split("\n", 1)[1].strip()
    assert steps in SPEC


def test_every_command_is_documented_and_listed() -> None:
    out = CliRunner().invoke(cli, ["--help"]).stdout
    for name in COMMANDS:
        if cli.get_command(None, name) is None:  # type: ignore[arg-type]
            continue
        assert re.search(rf"^\s+{name}\s", out, re.M), f"{name} missing from --help"
        assert f"kbpack {name}" in README, f"README does not document `kbpack {name}`"


def test_every_prefix_family_is_in_the_readme_table() -> None:
    from kbpack.model.prefixes import FAMILIES

    for family in FAMILIES:
        row = next(
            (line for line in README.splitlines() if line.startswith(f"| {family.label} |")), None
        )
        assert row is not None, f"README Models table lacks {family.label}"
        for prefix in (family.prefixes.query, family.prefixes.document):
            shown = json_quoted(prefix)
            assert shown in row, f"{family.label}: README shows no {shown}"


def json_quoted(text: str) -> str:
    import json

    return "`" + json.dumps(text) + "`" if text else "none"
