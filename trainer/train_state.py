"""The loop's own part of a checkpoint, typed: where the run is, how it was fitted into memory,
the data order of the current epoch and every random generator it draws from.

As torchtitan's ``TrainState``: the model, optimizer, scheduler and scaler have their own
``state_dict``; everything else the loop needs to go on exactly from a checkpoint lives here,
saved by `TrainState.state_dict` and read back by `TrainState.from_state_dict`, the one place
that knows its layout. Everything is a tensor or a plain container of numbers and strings, so a
checkpoint loads with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["CHECKPOINT_FORMAT", "TrainState"]

CHECKPOINT_FORMAT = 2
"""Layout of a whole checkpoint. 1: the loop state as one string-keyed dict (before TrainState);
a checkpoint of another format is not resumed: the trial restarts from its start."""


@dataclass
class TrainState:
    """Where the loop is: `epoch` epochs are done and `step` is the next step of epoch `epoch`
    (0-based), with the history so far, the memory fitting and the epoch's data order."""

    epoch: int = 0
    step: int = 0
    optimizer_steps: int = 0
    skipped_steps: int = 0
    """fp16 optimizer steps the loss scaler skipped after an overflow (0 in other precisions)."""
    metrics: list[float] = field(default_factory=list)
    """Validation score of each finished epoch."""
    train_losses: list[float] = field(default_factory=list)
    """Mean training loss of each finished epoch."""
    loss_sum: float = 0.0
    """Sum and count of the current epoch's micro-batch losses so far."""
    loss_count: int = 0
    grad_accum_steps: int = 1
    grad_checkpointing: bool = False
    adapted: list[str] = field(default_factory=list)
    """Each out-of-memory decision, in words, oldest first."""
    precision: str = "fp32"
    order: torch.Tensor | None = None
    """The current epoch's data order (None between epochs): a mid-epoch resume needs it."""
    rng: dict[str, Any] | None = None
    """Every random generator the run draws from (trainer.rng.rng_state: the run's own GPU's)."""

    def state_dict(self) -> dict[str, Any]:
        return {
            "loop": {
                "epoch": self.epoch,
                "step": self.step,
                "optimizer_steps": self.optimizer_steps,
                "skipped_steps": self.skipped_steps,
                "metrics": list(self.metrics),
                "train_losses": list(self.train_losses),
                "loss_sum": self.loss_sum,
                "loss_count": self.loss_count,
            },
            "memory": {
                "grad_accum_steps": self.grad_accum_steps,
                "grad_checkpointing": self.grad_checkpointing,
                "adapted": list(self.adapted),
                "precision": self.precision,
            },
            "data": {"order": self.order},
            "rng": self.rng,
        }

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> TrainState:
        loop, memory = state["loop"], state["memory"]
        return cls(
            epoch=int(loop["epoch"]),
            step=int(loop["step"]),
            optimizer_steps=int(loop["optimizer_steps"]),
            skipped_steps=int(loop["skipped_steps"]),
            metrics=[float(v) for v in loop["metrics"]],
            train_losses=[float(v) for v in loop["train_losses"]],
            loss_sum=float(loop["loss_sum"]),
            loss_count=int(loop["loss_count"]),
            grad_accum_steps=int(memory["grad_accum_steps"]),
            grad_checkpointing=bool(memory["grad_checkpointing"]),
            adapted=list(memory["adapted"]),
            precision=str(memory["precision"]),
            order=state["data"]["order"],
            rng=state["rng"],
        )
