"""Built-in task "digits": scikit-learn's bundled 8x8 digits and a small CNN (no download).

1,797 images of 10 digits, split once (stratified, fixed seed) into 1,437 training and 360
validation images. The metric is validation accuracy.

Params: ``width`` (channels, default 32), ``depth`` (conv blocks, default 2), ``dropout``
(default 0.1). The trainer itself reads ``lr``, ``weight_decay`` and ``batch_size``.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint
from torch.utils.data import TensorDataset

from trainer.task import Task

__all__ = ["DigitsCNN", "accuracy", "make_task"]

VALIDATION_FRACTION = 0.2
SPLIT_SEED = 0
"""The split never changes with the trial's seed: every trial is scored on the same images."""


class ConvBlock(nn.Sequential):
    """3x3 convolution, GroupNorm, ReLU, dropout.

    GroupNorm (one group: a LayerNorm over channels and pixels) rather than BatchNorm, so that a
    sample's output does not depend on the rest of its micro-batch: k micro-batches of b then
    give exactly the gradient of one batch of k*b.
    """

    def __init__(self, in_channels: int, out_channels: int, dropout: float) -> None:
        super().__init__(
            nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1),
            nn.GroupNorm(1, out_channels),
            nn.ReLU(),
            nn.Dropout(dropout),
        )


class DigitsCNN(nn.Module):
    """`depth` conv blocks of `width` channels at 8x8, pooled to 4x4, then a linear classifier."""

    def __init__(self, *, width: int = 32, depth: int = 2, dropout: float = 0.1) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(
            ConvBlock(1 if i == 0 else width, width, dropout) for i in range(depth)
        )
        self.head = nn.Sequential(
            nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Dropout(dropout), nn.Linear(16 * width, 10)
        )
        self.grad_checkpointing = False
        """Recompute each block's activations in the backward pass (the trainer's switch)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        checkpointing = self.grad_checkpointing and self.training and torch.is_grad_enabled()
        for block in self.blocks:
            # use_reentrant=False: the recommended implementation; it restores the RNG state, so
            # dropout masks in the recomputation match the first pass.
            x = checkpoint(block, x, use_reentrant=False) if checkpointing else block(x)
        return self.head(x)


def accuracy(outputs: torch.Tensor, targets: torch.Tensor) -> float:
    """Share of samples whose highest-scoring class is the target."""
    return (outputs.argmax(dim=1) == targets).float().mean().item()


@functools.cache
def _split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits  # scikit-learn loads only for this task
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[:, None]  # (N, 1, 8, 8) in [0, 1]
    labels = digits.target.astype(np.int64)
    x_train, x_val, y_train, y_val = train_test_split(
        images, labels, test_size=VALIDATION_FRACTION, stratify=labels, random_state=SPLIT_SEED
    )
    for array in (x_train, x_val, y_train, y_val):
        array.flags.writeable = False  # shared by every trial in the process
    return x_train, x_val, y_train, y_val


def make_task(params: dict[str, Any]) -> Task:
    """The digits task for one trial's params."""
    x_train, x_val, y_train, y_val = _split()
    model = DigitsCNN(
        width=int(params.get("width", 32)),
        depth=int(params.get("depth", 2)),
        dropout=float(params.get("dropout", 0.1)),
    )
    return Task(
        model=model,
        train_set=TensorDataset(torch.tensor(x_train), torch.tensor(y_train)),
        val_set=TensorDataset(torch.tensor(x_val), torch.tensor(y_val)),
        loss_fn=F.cross_entropy,
        metric_fn=accuracy,
    )
