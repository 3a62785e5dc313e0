"""The task of bench/efficiency/runner.py: a small MLP on 600 of the digits images, flattened.

Cheap enough that a benchmark of thousands of epochs runs in minutes on a CPU (a few
milliseconds an epoch), and a task where tuning matters: with AdamW over a wide log-scale
learning rate, a bad rate costs tens of points of validation accuracy, a good one needs
tens of epochs to converge, and the weight decay and width matter less.
"""

from __future__ import annotations

from typing import Any

from torch import nn
from torch.utils.data import TensorDataset

from examples.few_digits import make_task as few_digits_task
from trainer import Task
from trainer.tasks.digits import accuracy

__all__ = ["make_task"]


def make_task(params: dict[str, Any]) -> Task:
    images = few_digits_task({"width": 1, "depth": 1})  # the data only; its CNN is unused
    train_x, train_y = images.train_set.tensors  # type: ignore[attr-defined]
    val_x, val_y = images.val_set.tensors  # type: ignore[attr-defined]
    width = int(params.get("width", 32))
    model = nn.Sequential(
        nn.Flatten(),
        nn.Linear(64, width),
        nn.ReLU(),
        nn.Dropout(float(params.get("dropout", 0.0))),
        nn.Linear(width, 10),
    )
    return Task(
        model=model,
        train_set=TensorDataset(train_x, train_y),
        val_set=TensorDataset(val_x, val_y),
        loss_fn=nn.functional.cross_entropy,
        metric_fn=accuracy,
    )
