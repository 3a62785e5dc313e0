"""The loop's own part of a checkpoint, typed: where the run is, how it was fitted into memory,
the data order of the current epoch and every random generator it draws from.

As torchtitan's ``TrainState``: the model, optimizer, scheduler and scaler have their own
``state_dict``; everything else the loop needs to go on exactly from a checkpoint lives here,
saved by `TrainState.state_dict` and read back by `TrainState.from_state_dict`, the one place
that knows its layout. Everything is a tensor or a plain container of numbers and strings, so a
checkpoint loads with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

__all__ = ["CHECKPOINT_FORMAT", "RngState", "TrainState"]

CHECKPOINT_FORMAT = 2
"""Layout of a whole checkpoint. 1: the loop state as one string-keyed dict (before TrainState);
a checkpoint of another format is not resumed: the trial restarts from its start."""


@dataclass
class RngState:
    """Every generator the run draws from: Python's, NumPy's global one, torch's CPU one and the
    CUDA generators of the devices this process could see when it was saved."""

    python: list[Any]
    numpy: list[Any]
    torch: torch.Tensor
    cuda: list[torch.Tensor] = field(default_factory=list)

    @classmethod
    def capture(cls) -> RngState:
        version, internal, gauss = random.getstate()
        name, keys, position, has_gauss, cached_gaussian = np.random.get_state()
        return cls(
            python=[version, list(internal), gauss],
            # NumPy's key array as a tensor: weights_only loading refuses numpy arrays.
            numpy=[
                name,
                torch.from_numpy(keys.astype(np.int64)),
                position,
                has_gauss,
                cached_gaussian,
            ],
            torch=torch.get_rng_state(),
            cuda=torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else [],
        )

    def restore(self) -> None:
        version, internal, gauss = self.python
        random.setstate((version, tuple(internal), gauss))
        name, keys, position, has_gauss, cached_gaussian = self.numpy
        np.random.set_state(
            (name, keys.numpy().astype(np.uint32), position, has_gauss, cached_gaussian)
        )
        torch.set_rng_state(self.torch)
        # A checkpoint from a machine with other GPUs (or none) restores the CPU generators only.
        if self.cuda and torch.cuda.is_available() and len(self.cuda) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(self.cuda)

    def state_dict(self) -> dict[str, Any]:
        return {"python": self.python, "numpy": self.numpy, "torch": self.torch, "cuda": self.cuda}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> RngState:
        return cls(
            python=state["python"], numpy=state["numpy"], torch=state["torch"], cuda=state["cuda"]
        )


@dataclass
class TrainState:
    """Where the loop is: `epoch` epochs are done and `step` is the next step of epoch `epoch`
    (0-based), with the history so far, the memory fitting and the epoch's data order."""

    epoch: int = 0
    step: int = 0
    optimizer_steps: int = 0
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
    rng: RngState | None = None

    def state_dict(self) -> dict[str, Any]:
        return {
            "loop": {
                "epoch": self.epoch,
                "step": self.step,
                "optimizer_steps": self.optimizer_steps,
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
            "rng": None if self.rng is None else self.rng.state_dict(),
        }

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> TrainState:
        loop, memory = state["loop"], state["memory"]
        return cls(
            epoch=int(loop["epoch"]),
            step=int(loop["step"]),
            optimizer_steps=int(loop["optimizer_steps"]),
            metrics=[float(v) for v in loop["metrics"]],
            train_losses=[float(v) for v in loop["train_losses"]],
            loss_sum=float(loop["loss_sum"]),
            loss_count=int(loop["loss_count"]),
            grad_accum_steps=int(memory["grad_accum_steps"]),
            grad_checkpointing=bool(memory["grad_checkpointing"]),
            adapted=list(memory["adapted"]),
            precision=str(memory["precision"]),
            order=state["data"]["order"],
            rng=None if state["rng"] is None else RngState.from_state_dict(state["rng"]),
        )
