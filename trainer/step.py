"""What a training step is, for the trainer (`trainer.loop`) and its dry run (`trainer.memory`):
the optimizer, one micro-batch's forward and backward, and how a run adapts to out-of-memory
errors. The dry run measures these very pieces, so a change here changes the estimate too.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from trainer.train_state import TrainState

__all__ = ["SGD_MOMENTUM", "MemoryAdaptation", "make_optimizer", "micro_step"]

log = logging.getLogger("trainer")

SGD_MOMENTUM = 0.9
"""Nesterov momentum of optimizer = "sgd"."""


def make_optimizer(
    name: str,
    parameters: Iterable[torch.nn.Parameter],
    lr: float,
    weight_decay: float,
    device: torch.device,
) -> torch.optim.Optimizer:
    """The run's optimizer ("sgd" or "adamw"); torch picks its implementation for the device
    (foreach on a GPU, the per-parameter loop on a CPU) except AdamW's, fused on CUDA."""
    if name == "sgd":
        return torch.optim.SGD(
            parameters,
            lr=lr,
            momentum=SGD_MOMENTUM,
            nesterov=True,
            weight_decay=weight_decay,
        )
    # Fused on CUDA: one kernel for all parameters, and with fp16 it reads the loss scaler's
    # overflow flag on the device instead of making the CPU wait for it.
    return torch.optim.AdamW(
        parameters, lr=lr, weight_decay=weight_decay, fused=device.type == "cuda"
    )


def micro_step(
    model: Callable[[Any], Any],
    loss_fn: Callable[[Any, Any], torch.Tensor],
    inputs: Any,
    targets: Any,
    backward: Callable[[torch.Tensor], Any],
    weight: float = 1.0,
) -> torch.Tensor:
    """One micro-batch: forward, loss, backward; returns the loss. `backward` is
    ``accelerator.backward`` in training (it divides by the accumulation); `weight` scales a
    micro-batch that holds fewer samples than the others (`trainer.data.TrainData.steps`)."""
    loss = loss_fn(model(inputs), targets)
    backward(loss if weight == 1.0 else loss * weight)
    return loss


@dataclass(kw_only=True)
class MemoryAdaptation:
    """How the run is fitted into memory: changed only after an out-of-memory error, recorded
    in every checkpoint so that a resumed run (on any machine) goes on the same way."""

    grad_accum_steps: int
    """Micro-batches per optimizer step."""
    grad_checkpointing: bool
    adapted: list[str] = field(default_factory=list)
    """Each decision, in words, oldest first (TrainResult.adapted)."""
    model_can_checkpoint: bool = False
    """Whether the model has a gradient checkpointing switch (known once it is built)."""
    phase: str = "while building the task"
    """Where the attempt is, in words that follow "out of memory" (TRAIN_STEP in a step)."""

    def after_out_of_memory(self, error: str, batch_size: int) -> str | None:
        """Adapt for the next attempt and return the decision, or None if nothing is left.
        (`trainer.memory.adaptation_plans` replays these decisions for the dry run.)

        First gradient checkpointing (if the model has it), then half the micro-batch and
        twice the accumulation: the effective batch, and so the run's maths, stay the same.
        """
        micro = math.ceil(batch_size / self.grad_accum_steps)
        if self.model_can_checkpoint and not self.grad_checkpointing:
            self.grad_checkpointing = True
            decision = (
                f"out of memory at micro-batch {micro} ({error}): gradient checkpointing turned on"
            )
        elif micro > 1:
            before = self.grad_accum_steps
            self.grad_accum_steps = min(batch_size, 2 * before)
            decision = (
                f"out of memory at micro-batch {micro} ({error}): micro-batch {micro} -> "
                f"{math.ceil(batch_size / self.grad_accum_steps)}, grad_accum_steps {before} -> "
                f"{self.grad_accum_steps} (effective batch {batch_size} unchanged)"
            )
        else:
            return None
        self.adapted.append(decision)
        return decision

    def adopt(self, saved: TrainState) -> None:
        """Take the checkpoint's fitting unless this process has adapted further since."""
        if len(saved.adapted) >= len(self.adapted):
            self.grad_accum_steps = saved.grad_accum_steps
            self.grad_checkpointing = saved.grad_checkpointing
            self.adapted = list(saved.adapted)

    def note(self, decision: str) -> None:
        if decision not in self.adapted:
            log.warning("%s", decision)
            self.adapted.append(decision)
