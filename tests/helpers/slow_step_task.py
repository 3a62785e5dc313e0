"""tiny_task whose training steps are slow while a file exists: a signal that arrives in the
middle of a step is answered only after it
(``task.name = "tests.helpers.slow_step_task:make_task"``).

While the file named by ``$SLOW_STEP_FILE`` exists, each training forward pass takes
`SLOW_STEP_S` and first touches ``<file>.stepping`` (a test waits for it to know that a step has
begun); once the file is gone, steps take milliseconds (a step already begun still ends late).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tests.helpers import tiny_task
from trainer import Task

SLOW_STEP_S = 6.0


class _SlowSteps(nn.Module):
    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hold = os.environ.get("SLOW_STEP_FILE")
        if self.training and hold and os.path.exists(hold):
            Path(f"{hold}.stepping").touch()
            time.sleep(SLOW_STEP_S)
        return self.inner(x)


def make_task(params: dict[str, Any]) -> Task:
    task = tiny_task.make_task(params)
    task.model = _SlowSteps(task.model)
    return task
