"""tiny_task, slowed down while a file exists: trials that stay mid-training until a test lets
them go (``task.name = "tests.helpers.held_task:make_task"``).

While the file named by ``$HELD_TASK_FILE`` exists, each training sample takes
`HELD_S_PER_SAMPLE` to read (an epoch of 64 samples: about 2.6 s, in 4 steps of 16, so a
SIGTERM is answered within a step); once it is gone, an epoch takes milliseconds. Tests use it
where the moment a signal arrives is not theirs to choose (Slurm's time limit is checked every
30 s) and the trial must still be running then.
"""

from __future__ import annotations

import os
import time
from typing import Any

from torch.utils.data import Dataset

from tests.helpers import tiny_task
from trainer import Task

HELD_S_PER_SAMPLE = 0.04


class _HeldSamples(Dataset):
    def __init__(self, samples: Dataset) -> None:
        self.samples = samples

    def __len__(self) -> int:
        return len(self.samples)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> Any:
        hold = os.environ.get("HELD_TASK_FILE")
        if hold and os.path.exists(hold):
            time.sleep(HELD_S_PER_SAMPLE)
        return self.samples[index]


def make_task(params: dict[str, Any]) -> Task:
    task = tiny_task.make_task(params)
    task.train_set = _HeldSamples(task.train_set)
    return task
