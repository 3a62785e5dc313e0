"""The packages' shape: no import cycle inside `search`, and a trainer that knows nothing of it.

Imports are read from the source (every ``import`` and ``from ... import`` in a module, those
inside functions included, except under ``if TYPE_CHECKING:``), so a cycle hidden by a
function-local import is still a cycle here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import REPO


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Modules `path` imports (absolute names; relative imports resolved)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    return _imports_in(path.read_text(), package)


def _imports_in(source: str, package: str) -> set[str]:
    tree = ast.parse(source)
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(child) for child in ast.walk(node))
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            # `from search import x` imports the module search.x when there is one.
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def _graph(package: str) -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in (REPO / package).rglob("*.py")}
    return {
        name: {m for m in _imports(path) if m in modules and m != name}
        for name, path in modules.items()
    }


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    visiting: list[str] = []
    done: set[str] = set()

    def visit(node: str) -> list[str] | None:
        if node in visiting:
            return [*visiting[visiting.index(node) :], node]
        if node in done:
            return None
        visiting.append(node)
        for target in sorted(graph[node]):
            cycle = visit(target)
            if cycle:
                return cycle
        visiting.pop()
        done.add(node)
        return None

    for start in sorted(graph):
        cycle = visit(start)
        if cycle:
            return cycle
    return None


def test_search_has_no_import_cycle() -> None:
    graph = _graph("search")
    assert len(graph) > 20  # the walk found the package
    cycle = _find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_check_sees_function_local_imports_but_not_type_checking_ones() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "from . import storage\n"
        "if TYPE_CHECKING:\n"
        "    from search.study.config import StudyConfig\n"
        "def f():\n"
        "    import search.worker.loop\n"
        "    from .db import claims\n"
    )
    found = _imports_in(source, "search")
    assert {"search.storage", "search.worker.loop", "search.db.claims"} <= found
    assert "search.study.config" not in found
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize("path", sorted((REPO / "trainer").rglob("*.py")), ids=str)
def test_the_trainer_imports_nothing_of_search_or_optuna(path: Path) -> None:
    foreign = {
        m for m in _imports(path) if m.split(".")[0] in ("search", "optuna", "optuna_dashboard")
    }
    assert not foreign, f"{path.relative_to(REPO)} imports {sorted(foreign)}"
