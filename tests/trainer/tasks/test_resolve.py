"""trainer.tasks.resolve_task: built-in names and package.module:function."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer import TaskImportError, resolve_task
from trainer.tasks.digits import make_task


def test_builtin() -> None:
    assert resolve_task("digits") is make_task


def test_module_function_from_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "my_tasks_for_resolve.py").write_text("def make(params):\n    return params\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", [p for p in __import__("sys").path if p not in ("", ".")])
    assert resolve_task("my_tasks_for_resolve:make")({"a": 1}) == {"a": 1}


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("mnist", "task 'mnist': not a built-in task (digits) nor 'package.module:function'"),
        ("no_such_pkg.tasks:make", "task 'no_such_pkg.tasks:make': no module named 'no_such_pkg'"),
        ("trainer.tasks.digits:nope", "module 'trainer.tasks.digits' has no attribute 'nope'"),
        (
            "trainer.tasks.digits:VALIDATION_FRACTION",
            "'VALIDATION_FRACTION' is a float, not a function",
        ),
        ("trainer.tasks:", "not a built-in task"),
    ],
)
def test_errors_are_one_line_naming_task_and_cause(name: str, message: str) -> None:
    with pytest.raises(TaskImportError) as info:
        resolve_task(name)
    assert message in str(info.value)
    assert "\n" not in str(info.value)
    assert isinstance(info.value, ValueError)


def test_an_error_inside_the_module_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "broken_task_module.py").write_text("import no_such_dependency_xyz\n")
    (tmp_path / "syntax_task_module.py").write_text("def make(:\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        TaskImportError,
        match="importing 'broken_task_module' failed: No module named 'no_such_dependency_xyz'",
    ):
        resolve_task("broken_task_module:make")
    with pytest.raises(TaskImportError, match="importing 'syntax_task_module' failed: SyntaxError"):
        resolve_task("syntax_task_module:make")
