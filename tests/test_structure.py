"""The packages' shape: no import cycle in `search` or `trainer`, each package of `search`
importing only the ones below it, and a trainer that knows nothing of `search`; and the tests',
where no test file imports from another (what they share is in `tests.helpers`).

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


def _package(path: Path) -> str:
    """The package relative imports in `path` start from."""
    name = _module_name(path)
    return name if path.name == "__init__.py" else name.rsplit(".", 1)[0]


def _imports(path: Path, modules: set[str] | frozenset[str] = frozenset()) -> set[str]:
    """Modules `path` imports (absolute names; relative imports resolved)."""
    return _imports_in(path.read_text(), _package(path), modules)


def _from_module(node: ast.ImportFrom, package: str) -> str:
    """The module ``from ... import`` imports from (a relative one resolved in `package`)."""
    base = node.module or ""
    if node.level:
        anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join([*anchor, base] if base else anchor)
    return base


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
            base = _from_module(node, package)
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


def _is_test_module(name: str) -> bool:
    return name.rsplit(".", 1)[-1].startswith("test_")


def _test_module_imports(source: str, package: str, modules: set[str]) -> list[str]:
    """Each import in `source` of a test module (one whose last component starts with
    ``test_``): ``import tests.x.test_a``, ``from tests.x.test_a import f``, ``from
    .test_a import f``, and ``from tests.x import test_a`` where tests.x.test_a is one of
    `modules`; as ``line: statement``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            hit = any(_is_test_module(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _from_module(node, package)
            hit = _is_test_module(base) or any(
                _is_test_module(alias.name) and f"{base}.{alias.name}" in modules
                for alias in node.names
            )
        else:
            continue
        if hit:
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return sorted(found, key=lambda line: int(line.split(":")[0]))


def test_no_test_file_imports_from_another() -> None:
    """README: "What tests share is in `tests/helpers/`; a test file never imports from
    another." Every module under tests/ is read (test files, the soak, helpers, conftests)."""
    paths = sorted((REPO / "tests").rglob("*.py"))
    modules = {_module_name(p) for p in paths}
    assert {"tests.test_structure", "tests.soak.chaos"} <= modules  # the walk found tests/
    faults = [
        f"{path.relative_to(REPO)}:{line}"
        for path in paths
        for line in _test_module_imports(path.read_text(), _package(path), modules)
    ]
    message = "test modules imported (move what they share to tests/helpers/):\n"
    assert not faults, message + "\n".join(faults)


def test_the_test_import_check_sees_plain_from_and_relative_imports() -> None:
    modules = {"tests.bench.test_efficiency", "tests.bench.test_design", "tests.helpers.configs"}
    source = (
        "import os\n"
        "import tests.bench.test_efficiency as e\n"
        "from tests.bench.test_efficiency import DATA\n"
        "from .test_efficiency import needs_data\n"
        "from . import test_efficiency\n"
        "from tests.helpers.configs import make_config, test_value\n"
        "from .. import helpers\n"
        "def f():\n"
        "    from tests.bench import test_design\n"
    )
    assert _test_module_imports(source, "tests.bench", modules) == [
        "2: import tests.bench.test_efficiency as e",
        "3: from tests.bench.test_efficiency import DATA",
        "4: from .test_efficiency import needs_data",
        "5: from . import test_efficiency",
        "9: from tests.bench import test_design",
    ]
