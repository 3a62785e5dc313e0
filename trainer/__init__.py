"""trainer: the training loop a worker runs for one trial. Knows nothing of Optuna.

``import trainer`` does not import torch: the search side's fast commands (``hpsearch status``)
and benchmark workers import it without paying for torch. Names that need torch are loaded on
first use (module ``__getattr__``).

Example::

    from trainer import TrainConfig, resolve_task, train

    result = train(resolve_task("digits"), {"lr": 3e-3}, TrainConfig(epochs=3))
    result.status, result.metrics    # ('completed', [0.93..., 0.96..., 0.97...])
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from trainer.checkpoint import CheckpointError, CheckpointStore, DirectoryCheckpointStore
from trainer.config import TrainConfig
from trainer.result import TrainResult
from trainer.task import Task, TaskFactory
from trainer.tasks import TaskImportError, resolve_task

if TYPE_CHECKING:
    from trainer.loop import train

__all__ = [
    "CheckpointError",
    "CheckpointStore",
    "DirectoryCheckpointStore",
    "Task",
    "TaskFactory",
    "TaskImportError",
    "TrainConfig",
    "TrainResult",
    "resolve_task",
    "train",
]

_LAZY = {"train": "trainer.loop"}
"""Public names whose modules import torch, loaded on first access."""


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # later lookups skip __getattr__
        return value
    raise AttributeError(f"module 'trainer' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
