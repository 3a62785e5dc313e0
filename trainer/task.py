"""What a task provides to the trainer: a model and data built from a trial's params."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch.utils.data import Dataset

__all__ = ["Task", "TaskFactory"]


@dataclass(kw_only=True)
class Task:
    """One configuration of one learning problem, as built by a task factory from params.

    Example (a custom task, referenced in a study config as
    ``task.name = "mypackage.tasks:make_task"``)::

        from trainer import Task

        def make_task(params: dict) -> Task:
            model = torch.nn.Sequential(torch.nn.Linear(64, params["width"]), torch.nn.ReLU(),
                                        torch.nn.Linear(params["width"], 10))
            return Task(model=model, train_set=train, val_set=val,
                        loss_fn=torch.nn.functional.cross_entropy,
                        metric_fn=lambda out, y: (out.argmax(1) == y).float().mean().item())
    """

    model: torch.nn.Module
    """Built from params (e.g. params["width"], params["dropout"]). The trainer seeds torch
    before calling the factory, so the same seed gives the same initial weights. A model with a
    boolean attribute ``grad_checkpointing`` (or a ``gradient_checkpointing_enable()`` method)
    gets gradient checkpointing from ``[train] grad_checkpointing`` and after an out-of-memory
    error. Prefer GroupNorm/LayerNorm to BatchNorm: with BatchNorm, accumulating micro-batches
    is not the same maths as one large batch."""

    train_set: Dataset[Any]
    """Map-style dataset of (input, target). A TensorDataset that fits is moved to the device
    once; any other dataset is read through a DataLoader (in the main process)."""

    val_set: Dataset[Any]
    """Map-style dataset of (input, target), scored once per epoch."""

    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    """(outputs, targets) -> scalar loss tensor: the MEAN over the batch (as PyTorch's losses
    do by default), which accumulation over micro-batches relies on."""

    metric_fn: Callable[[torch.Tensor, torch.Tensor], float]
    """Either (outputs, targets) -> float, called once per epoch on the whole validation set's
    outputs at once; or a streaming metric such as ``torchmetrics.classification.
    MulticlassAccuracy(num_classes=10)`` (anything with reset/update/compute), fed one batch at
    a time: use one for large outputs (segmentation masks, language-model logits), which would
    not all fit on the device together. Validation runs under ``torch.inference_mode``."""


TaskFactory = Callable[[dict[str, Any]], Task]
