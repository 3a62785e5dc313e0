"""What a dry run measures and against what: the plan, a step's bytes, the device, the verdict."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from trainer.device import choose_precision, device_name, resolve_device
from trainer.sizes import HEADROOM, format_size

__all__ = ["MemoryCheckError", "MemoryFit", "MemoryPlan", "MemoryTarget", "StepMemory"]


class MemoryCheckError(RuntimeError):
    """The dry run could not run the task's step; the message is one line."""


@dataclass(frozen=True, kw_only=True)
class MemoryPlan:
    """How a step is fitted into memory: the trainer's knobs, with the effective batch fixed."""

    batch_size: int
    """Samples per optimizer step (the effective batch)."""
    grad_accum_steps: int
    """Micro-batches per optimizer step."""
    grad_checkpointing: bool

    @property
    def micro_batch(self) -> int:
        return math.ceil(self.batch_size / self.grad_accum_steps)

    def describe(self) -> str:
        """E.g. "micro-batch 16 x 4, gradient checkpointing"."""
        text = f"micro-batch {self.micro_batch} x {self.grad_accum_steps}"
        return text + (", gradient checkpointing" if self.grad_checkpointing else "")


@dataclass(frozen=True, kw_only=True)
class StepMemory:
    """The bytes one training step of one configuration keeps, measured by a dry run."""

    plan: MemoryPlan
    micro_batch_samples: int
    """Samples in the largest micro-batch the trainer forms (the leftover samples of an epoch
    are spread over its steps, so a step can hold a few more than batch_size)."""
    precision: str
    """bf16 | fp16 (autocast, fp32 weights) | fp32."""
    weights_bytes: int
    """Parameters and buffers, as the model holds them (fp32 under autocast)."""
    gradients_bytes: int
    """The parameters' gradients (their dtype: fp32 under autocast)."""
    optimizer_bytes: int
    """Optimizer state: AdamW's two moments and step counters, or SGD's momentum."""
    activations_bytes: int
    """Peak of the forward and backward's own tensors, beyond weights, gradients and optimizer
    state: what the backward needs (saved activations, autocast's half copies of the weights),
    temporaries, and the micro-batch itself."""
    optimizer_step_bytes: int
    """Peak of the optimizer step's temporaries (e.g. the foreach SGD of a GPU makes whole
    copies of the momentum's size)."""
    peak_bytes: int
    """The measured peak of all of the above during the step: less than their sum, since
    activations are freed as the gradients appear (with accumulation, the gradients of one
    micro-batch stay alive through the next)."""
    data_bytes: int
    """Training data the trainer keeps on the device: a TensorDataset is preloaded there, with a
    shuffled copy per epoch (on a GPU, when it takes at most a quarter of the memory)."""
    measured_on: str
    """"fake cpu" | "fake cuda" (fake tensors, no compute) | "cpu" (real tensors)."""

    @property
    def total_bytes(self) -> int:
        """What must fit: the step's peak plus the data kept on the device."""
        return self.peak_bytes + self.data_bytes

    def breakdown(self) -> str:
        """One line: "weights 188 KiB, gradients 188 KiB, optimizer 376 KiB, ..."."""
        parts = [
            f"weights {format_size(self.weights_bytes)}",
            f"gradients {format_size(self.gradients_bytes)}",
            f"optimizer state {format_size(self.optimizer_bytes)}",
            f"activations {format_size(self.activations_bytes)}",
        ]
        if self.data_bytes:
            parts.append(f"data {format_size(self.data_bytes)}")
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "batch_size": self.plan.batch_size,
            "micro_batch": self.plan.micro_batch,
            "grad_accum_steps": self.plan.grad_accum_steps,
            "grad_checkpointing": self.plan.grad_checkpointing,
            "micro_batch_samples": self.micro_batch_samples,
            "precision": self.precision,
            "weights_bytes": self.weights_bytes,
            "gradients_bytes": self.gradients_bytes,
            "optimizer_bytes": self.optimizer_bytes,
            "activations_bytes": self.activations_bytes,
            "optimizer_step_bytes": self.optimizer_step_bytes,
            "peak_bytes": self.peak_bytes,
            "data_bytes": self.data_bytes,
            "total_bytes": self.total_bytes,
            "measured_on": self.measured_on,
        }


@dataclass(frozen=True, kw_only=True)
class MemoryTarget:
    """The device a trial would train on: its kind, the precision it gets, its memory."""

    device_type: str
    """cpu | cuda."""
    device_name: str
    """"cpu", a GPU's name, or "a GPU" (one this machine does not have)."""
    precision: str
    """bf16 | fp16 | fp32: what the trainer would use there (`choose_precision`)."""
    precision_reason: str
    limit_bytes: int | None
    """The memory a step may use; None on a CPU without a given limit."""
    limit_source: str
    """Where the limit comes from, in words."""
    free_bytes: int | None = None
    """A GPU's free memory, which the trainer's data preload is judged against (`trainer.data.
    preload`): the real GPU's, even when a smaller limit is given; the limit, for a GPU this
    machine does not have."""

    @property
    def usable_bytes(self) -> int | None:
        """The limit less `HEADROOM`."""
        return None if self.limit_bytes is None else int(self.limit_bytes * (1 - HEADROOM))

    @classmethod
    def for_device(
        cls, device: str | None, requested_precision: str, limit_bytes: int | None = None
    ) -> MemoryTarget:
        """A device of this machine ("cpu", "cuda:0"; None: CUDA if available, else the CPU).

        The limit is `limit_bytes` if given, else a GPU's free memory now (other processes and
        this one's CUDA context already taken), else none (a CPU has no fixed limit: its step
        is measured, not judged). Raises ValueError (one line) for a device it does not have.
        """
        where = resolve_device(device)
        precision, reason = choose_precision(requested_precision, where)
        name = device_name(where)
        free, total = torch.cuda.mem_get_info(where) if where.type == "cuda" else (None, None)
        if limit_bytes is not None:
            source = f"{format_size(limit_bytes)} given"
        elif free is not None and total is not None:
            limit_bytes = free
            source = f"{format_size(free)} free of {format_size(total)} on {name} ({where})"
        else:
            source = "the CPU has no fixed memory limit"
        return cls(
            device_type=where.type,
            device_name=name,
            precision=precision,
            precision_reason=reason,
            limit_bytes=limit_bytes,
            limit_source=source,
            free_bytes=free,
        )

    @classmethod
    def for_gpu(cls, limit_bytes: int, requested_precision: str) -> MemoryTarget:
        """A GPU of `limit_bytes` that this machine need not have (planning a launch).

        Precision as the trainer would choose on a recent GPU: auto is bf16 (fp16 on GPUs
        without bf16 keeps the same bytes).
        """
        precision = "bf16" if requested_precision == "auto" else requested_precision
        reason = (
            "auto on a GPU: bf16; fp16 on a GPU without bf16 keeps the same bytes"
            if requested_precision == "auto"
            else f"{requested_precision} requested"
        )
        return cls(
            device_type="cuda",
            device_name="a GPU",
            precision=precision,
            precision_reason=reason,
            limit_bytes=limit_bytes,
            limit_source=f"{format_size(limit_bytes)} given",
            free_bytes=limit_bytes,
        )


@dataclass(kw_only=True)
class MemoryFit:
    """Whether a configuration fits its target, and how: the trainer's plans, measured in the
    order it adapts after an out-of-memory error, up to the first that fits."""

    target: MemoryTarget
    configured: StepMemory
    """The plan as configured."""
    tried: list[StepMemory]
    """Every plan measured, in order (the configured one first)."""
    can_checkpoint: bool
    """Whether the model has a gradient checkpointing switch."""
    notes: list[str] = field(default_factory=list)
    """What the measurement had to do differently, in words (e.g. real tensors)."""

    @property
    def fits(self) -> bool | None:
        """None without a limit."""
        if self.target.usable_bytes is None:
            return None
        return self.fitted is not None

    @property
    def fitted(self) -> StepMemory | None:
        """The first plan that fits, or None (also without a limit)."""
        usable = self.target.usable_bytes
        if usable is None:
            return None
        return next((m for m in self.tried if m.total_bytes <= usable), None)

    @property
    def verdict(self) -> str:
        """A few words: "fits as configured", "fits with micro-batch 16 x 4", "does not fit"."""
        fits = self.fits
        if fits is None:
            return "no limit to check against"
        if not fits:
            return "does not fit"
        fitted = self.fitted
        assert fitted is not None
        if fitted.plan == self.configured.plan:
            return "fits as configured"
        if fitted.plan.grad_accum_steps == self.configured.plan.grad_accum_steps:
            return "fits with gradient checkpointing"
        return f"fits with {fitted.plan.describe()}"

    @property
    def reason(self) -> str:
        """One line: why it does not fit (or the verdict when it does)."""
        if self.fits is not False:
            return self.verdict
        last = self.tried[-1]
        usable, limit = self.target.usable_bytes, self.target.limit_bytes
        return (
            f"does not fit in {format_size(usable)} ({format_size(limit)} less "
            f"{HEADROOM:.0%} headroom): even {last.plan.describe()} needs "
            f"{format_size(last.total_bytes)} at its peak ({last.breakdown()}; "
            f"{last.precision})"
        )
