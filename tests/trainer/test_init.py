"""The package surface: public names, and no torch on `import trainer`."""

from __future__ import annotations

import subprocess
import sys

import trainer

INTERFACE = {
    "CheckpointStore",
    "DirectoryCheckpointStore",
    "Task",
    "TaskFactory",
    "TaskImportError",
    "TrainConfig",
    "TrainResult",
    "resolve_task",
    "train",
}


def test_public_names() -> None:
    assert set(trainer.__all__) >= INTERFACE
    for name in trainer.__all__:
        assert getattr(trainer, name) is not None
    assert callable(trainer.train)


def test_import_trainer_does_not_import_torch() -> None:
    code = (
        "import sys, trainer, trainer.config\n"
        "from trainer import TrainConfig, Task, TaskFactory, TrainResult, CheckpointStore, "
        "DirectoryCheckpointStore, TaskImportError, resolve_task\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "trainer.train\n"
        "assert 'torch' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=trainer.__path__[0] + "/..")
