"""A custom task: an MLP on scikit-learn's bundled breast-cancer table (569 rows, 30 features).

Referenced from a study config as ``task.name = "examples.tabular:make_task"`` (run hpsearch
from the repository root, or put the package on PYTHONPATH). The factory gets every param of
the trial; the trainer itself uses ``lr``, ``weight_decay`` and ``batch_size``.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import torch
from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import train_test_split
from torch import nn
from torch.utils.data import TensorDataset

from trainer import Task


@cache
def _data() -> tuple[TensorDataset, TensorDataset]:
    features, labels = load_breast_cancer(return_X_y=True)
    x_train, x_val, y_train, y_val = train_test_split(
        features, labels, test_size=0.25, stratify=labels, random_state=0
    )
    mean, std = x_train.mean(0), x_train.std(0) + 1e-8  # scaled with the training rows only

    def tensors(x: Any, y: Any) -> TensorDataset:
        return TensorDataset(
            torch.tensor((x - mean) / std, dtype=torch.float32), torch.tensor(y, dtype=torch.long)
        )

    return tensors(x_train, y_train), tensors(x_val, y_val)


def make_task(params: dict[str, Any]) -> Task:
    width, layers = int(params.get("width", 64)), int(params.get("layers", 2))
    blocks: list[nn.Module] = []
    for i in range(layers):
        blocks += [
            nn.Linear(30 if i == 0 else width, width),
            nn.ReLU(),
            nn.Dropout(float(params.get("dropout", 0.1))),
        ]
    train_set, val_set = _data()
    return Task(
        model=nn.Sequential(*blocks, nn.Linear(width, 2)),
        train_set=train_set,
        val_set=val_set,
        loss_fn=nn.functional.cross_entropy,
        metric_fn=lambda outputs, targets: (outputs.argmax(1) == targets).float().mean().item(),
    )
