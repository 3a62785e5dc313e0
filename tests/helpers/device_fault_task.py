"""A task whose trial with x = POISON_X meets a CUDA error in its first training step, as a bad
label index (device-side assert) or a failing GPU would; every other trial trains normally.
Runs on the CPU: the error is the RuntimeError torch raises, with torch's message."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

from trainer import Task
from trainer.tasks.digits import accuracy

POISON_X = 0.123456789
ILLEGAL_ACCESS = "CUDA error: an illegal memory access was encountered"


def make_task(params: dict[str, Any]) -> Task:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(96, 8, generator=generator)
    y = x[:, :3].argmax(dim=1)
    model = nn.Sequential(nn.Linear(8, int(params.get("width", 8))), nn.ReLU())
    model.append(nn.Linear(int(params.get("width", 8)), 3))
    if params.get("x") == POISON_X:

        def fault(module: nn.Module, args: Any) -> None:
            if module.training:
                raise RuntimeError(ILLEGAL_ACCESS)

        model.register_forward_pre_hook(fault)
    return Task(
        model=model,
        train_set=TensorDataset(x[:64], y[:64]),
        val_set=TensorDataset(x[64:], y[64:]),
        loss_fn=F.cross_entropy,
        metric_fn=accuracy,
    )
