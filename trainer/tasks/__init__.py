"""Finding a task by name: a built-in one, or ``package.module:function`` (like uvicorn).

This module imports no task (and so no torch) until one is resolved.
"""

from __future__ import annotations

import importlib
import os
import sys

from trainer.task import TaskFactory

__all__ = ["BUILTIN_METRICS", "BUILTIN_TASKS", "TaskImportError", "resolve_task"]

BUILTIN_TASKS: dict[str, str] = {"digits": "trainer.tasks.digits:make_task"}
"""Built-in task names and the factory each stands for."""

BUILTIN_METRICS: dict[str, tuple[str, str]] = {"digits": ("val_accuracy", "maximize")}
"""The score each built-in task's metric_fn computes, and the direction that improves it: a
study of a built-in task names that metric (its `[study] metric` is a name, not a choice)."""


class TaskImportError(ValueError):
    """A task name that does not lead to a callable; the message is one line."""


def resolve_task(name: str) -> TaskFactory:
    """The task factory for a study config's ``task.name``.

    A built-in name ("digits"), or "package.module:function", imported with the current working
    directory on ``sys.path`` (so ``python -m trainer`` and workers find a project's own tasks).
    Raises `TaskImportError` naming the task and the cause.

    Example::

        >>> make_task = resolve_task("digits")
        >>> make_task.__name__
        'make_task'
    """
    target = BUILTIN_TASKS.get(name, name)
    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name or not attribute:
        raise TaskImportError(
            f"task {name!r}: not a built-in task ({', '.join(BUILTIN_TASKS)}) "
            "nor 'package.module:function'"
        )
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module_name.startswith(exc.name):
            top = exc.name.split(".")[0]
            raise TaskImportError(
                f"task {name!r}: no module named {exc.name!r} in the current directory "
                f"({os.getcwd()}) nor on sys.path: run from the directory that holds {top}/ "
                "(for hpsearch's own examples, the repository's root) or add that directory "
                "to PYTHONPATH"
            ) from None
        raise TaskImportError(f"task {name!r}: importing {module_name!r} failed: {exc}") from None
    except Exception as exc:
        raise TaskImportError(
            f"task {name!r}: importing {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from None
    factory = module
    for part in attribute.split("."):
        try:
            factory = getattr(factory, part)
        except AttributeError:
            raise TaskImportError(
                f"task {name!r}: module {module_name!r} has no attribute {attribute!r}"
            ) from None
    if not callable(factory):
        raise TaskImportError(
            f"task {name!r}: {attribute!r} is a {type(factory).__name__}, not a function"
        )
    return factory
