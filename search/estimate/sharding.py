"""Per-GPU memory of a sharded trial (``[train] sharding = "fsdp"``) on N = 1, 2, 4, 8 GPUs,
and the smallest N that fits: arithmetic on one configuration's measured step.

FSDP keeps 1/N of the weights, of their gradients and of the optimizer state on each of the N
ranks (ZeRO-3); each rank's micro-batch is 1/N of the step's; and while a unit computes, its
full weights are gathered in the compute precision (the next unit's too: FSDP prefetches it).
So per GPU::

    state        (weights + gradients + optimizer state) / N
    activations  the measured ones x (per-rank micro-batch / measured micro-batch)
    gathered     2 x the largest FSDP unit's parameters x bytes of the compute precision
                 (0 for N = 1: nothing to gather)

For a 7e9-parameter model with AdamW under mixed precision the state is 16 bytes a parameter
(fp32 weights 4, fp32 gradients 4, two fp32 moments 8): 112 GB, which no GPU holds; over 8
GPUs 14 GB each. Approximations: buffers are counted as sharded (FSDP shards parameters only;
buffers are small in the models it is for), shards are padded to a multiple of N rows (at
most N-1 rows per parameter), the activations include autocast's half copies of the weights
(which FSDP's mixed precision replaces by the gathered units) and temporaries of collectives
are not counted. The measured step's data kept on the device is not divided (every rank
preloads the training set).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from search.estimate.text import columns
from trainer.sizes import format_size

if TYPE_CHECKING:
    from search.estimate.picking import Configuration
    from trainer.memory import MemoryFit, MemoryTarget, StepMemory

__all__ = [
    "RANKS",
    "PerGpu",
    "largest_unit_params",
    "per_gpu",
    "sharded_fits",
    "sharded_lines",
    "sharded_rows",
    "smallest_fit",
]

RANKS = (1, 2, 4, 8)
"""The numbers of GPUs the estimate shows."""
PREFETCHED_UNITS = 2
"""Units whose full weights a rank holds at once: the one computing and the next, prefetched."""
COMPUTE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


@dataclass(frozen=True)
class PerGpu:
    """What one of `ranks` GPUs holds during a step of a sharded trial, in bytes."""

    ranks: int
    weights_bytes: int
    gradients_bytes: int
    optimizer_bytes: int
    activations_bytes: int
    gathered_bytes: int
    """Full weights of the units being computed (2 units), in the compute precision."""
    data_bytes: int

    @property
    def state_bytes(self) -> int:
        return self.weights_bytes + self.gradients_bytes + self.optimizer_bytes

    @property
    def total_bytes(self) -> int:
        return self.state_bytes + self.activations_bytes + self.gathered_bytes + self.data_bytes

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "state_bytes": self.state_bytes, "total_bytes": self.total_bytes}


def per_gpu(
    *,
    ranks: int,
    weights_bytes: int,
    gradients_bytes: int,
    optimizer_bytes: int,
    activations_bytes: int = 0,
    micro_batch: int = 1,
    unit_params: int = 0,
    precision: str = "fp32",
    data_bytes: int = 0,
) -> PerGpu:
    """One GPU's share of a step measured on one device (see the module docstring).

    `activations_bytes` were measured for a micro-batch of `micro_batch` samples; each of the
    `ranks` GPUs gets ceil(micro_batch / ranks) of them. `unit_params`: the largest FSDP unit.
    """
    share = math.ceil(micro_batch / ranks) / micro_batch
    gathered = 0 if ranks == 1 else PREFETCHED_UNITS * unit_params * COMPUTE_BYTES[precision]
    return PerGpu(
        ranks=ranks,
        weights_bytes=math.ceil(weights_bytes / ranks),
        gradients_bytes=math.ceil(gradients_bytes / ranks),
        optimizer_bytes=math.ceil(optimizer_bytes / ranks),
        activations_bytes=math.ceil(activations_bytes * share),
        gathered_bytes=gathered,
        data_bytes=data_bytes,
    )


def sharded_rows(
    step: StepMemory, unit_params: int, ranks: tuple[int, ...] = RANKS
) -> list[PerGpu]:
    """`per_gpu` for each number of GPUs, from a measured step (`trainer.memory.StepMemory`)."""
    return [
        per_gpu(
            ranks=n,
            weights_bytes=step.weights_bytes,
            gradients_bytes=step.gradients_bytes,
            optimizer_bytes=step.optimizer_bytes,
            activations_bytes=step.activations_bytes,
            micro_batch=step.micro_batch_samples,
            unit_params=unit_params,
            precision=step.precision,
            data_bytes=step.data_bytes,
        )
        for n in ranks
    ]


def smallest_fit(rows: list[PerGpu], usable_bytes: int | None) -> int | None:
    """The fewest GPUs whose share fits `usable_bytes`; None if none does (or no limit)."""
    if usable_bytes is None:
        return None
    return next((row.ranks for row in rows if row.total_bytes <= usable_bytes), None)


def largest_unit_params(task_factory: Any, params: dict[str, Any]) -> int:
    """Parameters of the largest FSDP unit of the task's model (`trainer.sharding`'s rule),
    built on the meta device: no memory, no compute."""
    import torch

    from trainer.sharding import unit_sizes

    with torch.device("meta"):
        model = task_factory(dict(params)).model
    return max(unit_sizes(model).values())


def format_rows(rows: list[PerGpu], usable_bytes: int | None) -> list[list[str]]:
    """Table cells: GPUs, weights, grads, optimizer, activations, gathered, data, per GPU, fits."""
    out = []
    for row in rows:
        fits = "-" if usable_bytes is None else "yes" if row.total_bytes <= usable_bytes else "no"
        sizes = (
            row.weights_bytes,
            row.gradients_bytes,
            row.optimizer_bytes,
            row.activations_bytes,
            row.gathered_bytes,
            row.data_bytes,
            row.total_bytes,
        )
        out.append([str(row.ranks), *(format_size(s) for s in sizes), fits])
    return out


def sharded_fits(
    task_factory: Any, target: MemoryTarget, fits: list[tuple[Configuration, MemoryFit]]
) -> dict[str, tuple[list[PerGpu], int | None]]:
    """For each configuration (by label): its per-GPU rows for RANKS, from its plan as
    configured, and the fewest GPUs that fit `target`."""
    out = {}
    for row, fit in fits:
        rows = sharded_rows(fit.configured, largest_unit_params(task_factory, row.params))
        out[row.label] = (rows, smallest_fit(rows, target.usable_bytes))
    return out


def sharded_lines(
    label: str, rows: list[PerGpu], smallest: int | None, usable_bytes: int | None
) -> list[str]:
    """The per-GPU table of one configuration, and the verdict line."""
    header = ["GPUs", "weights", "grads", "optimizer", "activations", "gathered", "data"]
    table = [[*header, "per GPU", "fits"], *format_rows(rows, usable_bytes)]
    lines = [f"sharded (fsdp), {label}: per GPU of N GPUs"]
    lines += columns([tuple(r) for r in table], right=range(0, 8))
    if usable_bytes is None:
        lines.append("smallest N: nothing to check against (give --device-memory)")
    elif smallest is None:
        lines.append(f"smallest N: more than {rows[-1].ranks} GPUs")
    else:
        lines.append(f"smallest N: {smallest} GPU{'s' if smallest > 1 else ''}")
    return lines
