"""A task whose rank `fault_rank` of a multi-rank trial misbehaves once: the digits task, with
a model that, at its `fault_after`-th training forward, kills its own process (``fault =
"kill"``, as the OOM killer or a segfault would) or raises (``"raise"``, a bug in the task).

The fault happens once per marker file ($RANK_FAULT_MARKER): a trial that is retried after it
trains normally.
"""

from __future__ import annotations

import dataclasses
import os
import signal
from pathlib import Path
from typing import Any

import torch

from trainer import Task
from trainer.tasks.digits import make_task as digits


class _Faulty(torch.nn.Module):
    def __init__(self, inner: torch.nn.Module, fault: str, after: int) -> None:
        super().__init__()
        self.inner, self.fault, self.after, self.calls = inner, fault, after, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.calls += 1
            marker = Path(os.environ["RANK_FAULT_MARKER"])
            if self.calls == self.after and not marker.exists():
                marker.write_text(self.fault)
                if self.fault == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                raise RuntimeError("the task's own bug on this rank")
        return self.inner(x)


def make_task(params: dict[str, Any]) -> Task:
    task = digits(params)
    if int(os.environ.get("RANK", "0")) == int(params.get("fault_rank", 1)):
        model = _Faulty(task.model, params["fault"], int(params.get("fault_after", 3)))
        task = dataclasses.replace(task, model=model)
    return task
