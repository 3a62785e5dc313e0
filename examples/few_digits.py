"""A task where the learning rate decides and dropout barely matters: digits from few images.

The built-in digits CNN (``trainer.tasks.digits``) trained on a fixed, stratified 600 of its
1,437 training images (60 per digit); validation keeps all 360. With so few images and a few
epochs of AdamW, the learning rate decides between a network that reads the digits and one
that does not, while dropout moves the score by about a point. That is the setting of Bergstra
& Bengio's case for random search (examples/grid_vs_random.toml): a 3 x 3 grid tries three
learning rates in nine trials, random search tries nine.

Referenced as ``task.name = "examples.few_digits:make_task"`` (run hpsearch from the
repository root, or put the repository on PYTHONPATH).
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch.utils.data import TensorDataset

from trainer import Task
from trainer.tasks import digits

__all__ = ["TRAIN_IMAGES", "make_task"]

TRAIN_IMAGES = 600
"""Training images kept, the same ones for every trial (a seeded, stratified choice)."""


@functools.cache
def _kept(labels: tuple[int, ...]) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    targets = torch.tensor(labels)
    kept = []
    for digit in range(10):
        of_digit = torch.nonzero(targets == digit).flatten()
        order = torch.randperm(len(of_digit), generator=generator)
        kept.append(of_digit[order[: TRAIN_IMAGES // 10]])
    return torch.cat(kept).sort().values


def make_task(params: dict[str, Any]) -> Task:
    """The digits task of `trainer.tasks.digits`, its training set cut to TRAIN_IMAGES."""
    task = digits.make_task(params)
    images, labels = task.train_set.tensors  # type: ignore[attr-defined]
    kept = _kept(tuple(labels.tolist()))
    task.train_set = TensorDataset(images[kept], labels[kept])
    return task
