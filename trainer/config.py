"""How one trial is trained: the `[train]` settings plus the epoch budget and seed.

This module imports nothing heavy, so the search side can build a `TrainConfig` without
loading torch. Validation happens once, at the edge (``search.study.parse_config``); inside,
the values are trusted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_LR",
    "DEFAULT_WEIGHT_DECAY",
    "OPTIMIZERS",
    "PRECISIONS",
    "SHARDINGS",
    "Optimizer",
    "Precision",
    "Sharding",
    "TrainConfig",
]

Precision = Literal["auto", "bf16", "fp16", "fp32"]
Optimizer = Literal["adamw", "sgd"]
Sharding = Literal["none", "fsdp"]
PRECISIONS: tuple[str, ...] = ("auto", "bf16", "fp16", "fp32")
OPTIMIZERS: tuple[str, ...] = ("adamw", "sgd")
SHARDINGS: tuple[str, ...] = ("none", "fsdp")
DEFAULT_LR = 1e-3
"""Peak learning rate when params have no "lr"."""
DEFAULT_WEIGHT_DECAY = 0.0
"""Decoupled (AdamW) or L2 (SGD) weight decay when params have no "weight_decay"."""
DEFAULT_BATCH_SIZE = 64
"""Samples per optimizer step when params have no "batch_size" (the effective batch: it is
split into grad_accum_steps micro-batches)."""


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """Settings of one training run (one trial)."""

    epochs: int
    """Epochs to train; also the pruner's max_resource (one report per epoch)."""

    precision: Precision = "auto"
    """auto: bf16 on GPUs that support it, fp16 (with loss scaling) on older GPUs, fp32 on CPU."""

    grad_accum_steps: int = 1
    """Micro-batches per optimizer step; the micro-batch is batch_size / grad_accum_steps."""

    grad_checkpointing: bool = False
    """Recompute activations in the backward pass instead of keeping them (less memory, ~30%
    slower). Also turned on by the trainer after an out-of-memory error, if the model can."""

    checkpoint_every_s: float = 300.0
    """Seconds between mid-epoch checkpoints; one is also written at every epoch end and on
    SIGTERM."""

    optimizer: Optimizer = "adamw"
    """adamw or sgd (with Nesterov momentum 0.9)."""

    sharding: Sharding = "none"
    """none: a multi-rank trial (``--gpus-per-trial K``) is data-parallel (DDP), every rank
    holds the whole model, its gradients and optimizer state. fsdp: each rank holds 1/K of
    them (FSDP2, ``trainer.sharding``). A one-process trial has nothing to shard over and
    trains as with none."""

    deterministic: bool = False
    """GPU runs bitwise reproducible (a resume on another GPU included): deterministic kernels
    only, cuDNN benchmark off. Slower (typically 5-30%); see ``trainer.gpu_settings``. CPU runs
    are reproducible without it."""

    seed: int = 0
    """Seeds model init, data order and dropout: the same seed and params give the same run."""
