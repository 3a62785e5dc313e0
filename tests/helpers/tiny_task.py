"""A task that trains in milliseconds: a linear classifier on 64 fixed two-class points.

For tests that need real trials (the trainer, checkpoints, reports) but not a real model:
``task.name = "tests.helpers.tiny_task:make_task"``. The score depends on ``lr`` (too small
learns nothing in a few epochs).
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import nn
from torch.utils.data import TensorDataset

from trainer import Task


@functools.cache
def _data() -> tuple[TensorDataset, TensorDataset]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(96, 4, generator=generator)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).long()
    return TensorDataset(x[:64], y[:64]), TensorDataset(x[64:], y[64:])


def make_task(params: dict[str, Any]) -> Task:
    train_set, val_set = _data()
    return Task(
        model=nn.Sequential(nn.Dropout(float(params.get("dropout", 0.0))), nn.Linear(4, 2)),
        train_set=train_set,
        val_set=val_set,
        loss_fn=nn.functional.cross_entropy,
        metric_fn=lambda out, y: (out.argmax(1) == y).float().mean().item(),
    )
