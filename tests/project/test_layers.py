"""The package layout is the architecture (docs/development.md, issue 31): import-linter's
contracts in pyproject.toml hold, no import circle exists, and kbpack/ keeps few loose modules."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from tests.paths import REPO_ROOT

ROOT = REPO_ROOT


def test_the_import_contracts_hold() -> None:
    pytest.importorskip("importlinter")  # a dev dependency (pyproject.toml [dev])
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            "from importlinter.cli import lint_imports_command; lint_imports_command()",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0 and "0 broken" in r.stdout, r.stdout + r.stderr


def _module_imports() -> dict[str, set[str]]:
    """Every kbpack module -> the kbpack modules it imports at module level (not in functions)."""
    mods = {}
    for p in (ROOT / "kbpack").rglob("*.py"):
        name = ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        mods[name] = p
    out: dict[str, set[str]] = {}
    for name, p in mods.items():
        deps: set[str] = set()
        for node in ast.parse(p.read_text()).body:  # module level only
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    full = f"{node.module}.{a.name}"
                    deps.add(full if full in mods else node.module)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names)
        out[name] = {d for d in deps if d in mods and d != name}
    return out


def test_no_import_circle_at_module_level() -> None:
    graph = _module_imports()
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph[node]):
            if dep == "kbpack" or node == "kbpack":
                continue
            if state.get(dep) == 1:
                cycles.append([*path[path.index(dep) :], dep] if dep in path else [node, dep])
            elif dep not in state:
                visit(dep, [*path, dep])
        state[node] = 2

    for mod in sorted(graph):
        if mod not in state:
            visit(mod, [mod])
    assert cycles == []


def test_few_loose_modules_at_the_top() -> None:
    loose = sorted(p.name for p in (ROOT / "kbpack").glob("*.py"))
    assert len(loose) <= 12, loose


def test_the_public_python_names_keep_working() -> None:
    """docs/python.md: the API and its result types, at the root and where they were in 0.2."""
    import kbpack
    from kbpack.search import Result, Searcher, SearchResponse

    assert callable(kbpack.open) and callable(kbpack.open_many)
    assert kbpack.SearchResponse is SearchResponse and kbpack.Result is Result
    assert (
        kbpack.Pack.__module__ == "kbpack.api" and Searcher.__module__ == "kbpack.search.searcher"
    )
    assert kbpack.PackSet.__name__ == "PackSet"


def test_the_tests_mirror_the_packages() -> None:
    """docs/development.md: every test module sits in the folder of what it tests, and reaches
    another folder's helpers only through the shared modules at the top of tests/."""
    tests = ROOT / "tests"
    assert not list(tests.glob("test_*.py")), "a test module belongs in a package folder"
    folders = {p.parent.name for p in tests.glob("*/test_*.py")}
    assert folders - {"hostile", "project"} <= {
        p.name for p in (ROOT / "kbpack").iterdir() if p.is_dir()
    }
    where = {p.stem: p.parent for p in tests.glob("*/test_*.py")}
    crossing = []
    for path in tests.glob("*/test_*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            crossing += [
                f"{path.relative_to(tests)} imports {n}"
                for n in names
                if (n in where and where[n] != path.parent) or n.startswith("tests.test_")
            ]
    assert crossing == []
