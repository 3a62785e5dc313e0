"""The packages' shape: no import cycle in `search` or `trainer`, each package of `search`
importing only the ones below it, and a trainer that knows nothing of `search`.

Imports are read from the source: every ``import`` and ``from ... import`` in a module, those
inside functions and under ``if TYPE_CHECKING:`` included, so a cycle hidden by a
function-local or type-only import is still a cycle here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.helpers import REPO

LAYERS = (
    "search.errors",
    "search.terminal",
    "search.db",
    "search.study",
    "search.pruning",
    "search.sampling",
    "search.tracking",
    "search.worker",
    "search.monitor",
    "search.estimate",
    "search.compare",
    "search.commands",
)
"""The packages of `search`, lowest first: each may import only those before it (README, "How
the code is laid out"). `search.__main__` and `search.program` (the
entry point) sit above them all."""

NEVER = {
    "search.db": ("search.sampling", "search.pruning", "search.worker", "search.commands"),
    "trainer": ("search", "optuna", "optuna_dashboard"),
}
"""Imports ruled out whatever the order says: the data layer knows no policy, and the trainer
is a library of its own."""


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str] | frozenset[str] = frozenset()) -> set[str]:
    """Modules `path` imports (absolute names; relative imports resolved)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    return _imports_in(path.read_text(), package, modules)


def _imports_in(
    source: str, package: str, modules: set[str] | frozenset[str] = frozenset()
) -> set[str]:
    """What `source` imports. ``from pkg import a`` imports the module pkg.a when there is one
    (`modules`: the modules there are), and pkg itself only for a name that is not a module:
    a package's ``__init__`` may import submodules that import their siblings from it."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names = {f"{base}.{alias.name}" for alias in node.names}
            found.update(names)
            if not names <= modules:
                found.add(base)
    return found


def _graph(package: str) -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in (REPO / package).rglob("*.py")}
    return {
        name: {m for m in _imports(path, set(modules)) if m in modules and m != name}
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


def _layer(module: str) -> str | None:
    """The entry of `LAYERS` that holds `module`, or None."""
    for layer in LAYERS:
        if module == layer or module.startswith(layer + "."):
            return layer
    return None


def _layering_faults(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a module of a higher layer, or of one `NEVER` rules out."""
    faults = []
    for module, targets in sorted(graph.items()):
        mine = _layer(module)
        for target in sorted(targets):
            theirs = _layer(target)
            upward = (
                mine is not None
                and theirs is not None
                and LAYERS.index(theirs) > LAYERS.index(mine)
            )
            never = any(
                (module == owner or module.startswith(owner + "."))
                and (target == banned or target.startswith(banned + "."))
                for owner, banned_list in NEVER.items()
                for banned in banned_list
            )
            if upward or never:
                faults.append(f"{module} imports {target}")
    return faults


@pytest.mark.parametrize("package", ["search", "trainer"])
def test_no_import_cycle(package: str) -> None:
    graph = _graph(package)
    assert len(graph) > 15  # the walk found the package
    cycle = _find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_each_package_of_search_imports_only_what_lies_below_it() -> None:
    graph = _graph("search")
    assert set(filter(None, map(_layer, graph))) == set(LAYERS)  # every layer has modules
    unplaced = sorted(
        m
        for m in graph
        if _layer(m) is None and m not in ("search", "search.__main__", "search.program")
    )
    assert not unplaced, f"modules in no layer of LAYERS: {unplaced}"
    faults = _layering_faults(graph)
    assert not faults, "\n".join(faults)


def test_the_check_sees_function_local_and_type_checking_imports() -> None:
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
    assert "search.study.config" in found
    siblings = _imports_in(
        "from search.commands import run\n", "search.commands", {"search.commands.run"}
    )
    assert siblings == {"search.commands.run"}
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_layering_check_finds_an_upward_import_and_a_banned_one() -> None:
    graph = {
        "search.db.trial_rows": {"search.sampling.view", "search.errors"},
        "search.study.setup": {"search.commands.cli"},
        "search.worker.loop": {"search.db.claims"},
    }
    assert _layering_faults(graph) == [
        "search.db.trial_rows imports search.sampling.view",
        "search.study.setup imports search.commands.cli",
    ]


@pytest.mark.parametrize("path", sorted((REPO / "trainer").rglob("*.py")), ids=str)
def test_the_trainer_imports_nothing_of_search_or_optuna(path: Path) -> None:
    foreign = {m for m in _imports(path) if m.split(".")[0] in NEVER["trainer"]}
    assert not foreign, f"{path.relative_to(REPO)} imports {sorted(foreign)}"
