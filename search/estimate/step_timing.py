"""A few real training steps of one configuration, timed, with their peak memory: the rows of
`hpsearch estimate --measure` (`search.estimate.measure`), and the benchmarks that check the dry
run (`trainer.memory`) against real steps. Imports torch: load it where a row runs.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch

from trainer.config import TrainConfig
from trainer.device import resolve_device
from trainer.loop import train
from trainer.memory.tracker import StorageTracker
from trainer.task import TaskFactory

__all__ = ["StepTiming", "time_steps"]


@dataclass(kw_only=True)
class StepTiming:
    """A few real training steps of one configuration: time per step and peak memory."""

    status: str
    """The trainer's status: "preempted" is the normal end (stopped after the steps)."""
    reason: str | None
    precision: str
    grad_accum_steps: int
    grad_checkpointing: bool
    adapted: list[str]
    """The trainer's adaptations (e.g. after an out-of-memory error): the row is then not the
    configuration it was asked for."""
    step_seconds: list[float]
    """Seconds of each measured optimizer step (after the warm-up steps)."""
    steps_include_evaluation: bool
    """True when an epoch was too short to time steps within one, so an end-of-epoch
    evaluation falls inside some of them."""
    peak_memory_bytes: int
    peak_memory_kind: str
    """"cuda_max_allocated" (torch's CUDA allocator) or "process_peak_rss" (the whole process,
    on a CPU)."""
    tensor_peak_bytes: int | None
    """Peak bytes of torch's tensors over a second, two-step run, counted by a dispatch mode
    (on a CPU, where there are no allocator statistics); None on a GPU."""
    device_name: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def time_steps(
    task_factory: TaskFactory,
    params: dict[str, Any],
    config: TrainConfig,
    *,
    device: str | None,
    steps: int,
    warmup: int = 2,
    count_tensors: bool | None = None,
) -> StepTiming:
    """Train `warmup` + `steps` optimizer steps with `trainer.train` and time the last `steps`.

    On a GPU each step ends with a synchronize, so its time is the GPU's, and the peak is
    ``torch.cuda.max_memory_allocated``. On a CPU the peak the trainer reports is the process's
    resident set (run this in a fresh process to make it this configuration's); with
    `count_tensors` (the default on a CPU) a second run of two steps counts torch's tensors.
    """
    if warmup < 1 or steps < 1:
        raise ValueError(f"warmup and steps must be >= 1, got {warmup} and {steps}")
    where = resolve_device(device)
    marks: list[tuple[int, float]] = []  # (epoch, time) at the end of each optimizer step
    stop = threading.Event()

    def progress(epoch: int, step: int, steps_per_epoch: int, loss: float) -> None:
        if where.type == "cuda":
            torch.cuda.synchronize(where)
        marks.append((epoch, time.perf_counter()))
        if len(marks) >= warmup + steps:
            stop.set()

    # Enough epochs that the stop comes first, and no checkpoint on the way.
    run_config = replace(config, epochs=warmup + steps + 1, checkpoint_every_s=math.inf)
    result = train(
        task_factory, params, run_config, device=str(where), stop=stop, progress=progress
    )
    # A step's time runs from the end of the one before: the first measured step follows the
    # last warm-up step. (seconds, whether both ends are in the same epoch)
    intervals = [
        (later[1] - earlier[1], later[0] == earlier[0])
        for earlier, later in zip(marks[warmup - 1 : -1], marks[warmup:], strict=True)
    ]
    within = [seconds for seconds, same_epoch in intervals if same_epoch]
    tensor_peak = None
    if count_tensors if count_tensors is not None else where.type == "cpu":
        tensor_peak = _tensor_peak(task_factory, params, run_config, where)
    return StepTiming(
        status=result.status,
        reason=None if result.status == "preempted" else result.reason,
        precision=result.precision,
        grad_accum_steps=result.grad_accum_steps,
        grad_checkpointing=result.grad_checkpointing,
        adapted=list(result.adapted),
        step_seconds=within or [seconds for seconds, _ in intervals],
        steps_include_evaluation=not within and bool(intervals),
        peak_memory_bytes=result.peak_memory_bytes,
        peak_memory_kind=result.peak_memory_kind,
        tensor_peak_bytes=tensor_peak,
        device_name=result.device_name,
    )


def _tensor_peak(
    task_factory: TaskFactory, params: dict[str, Any], config: TrainConfig, where: torch.device
) -> int:
    """Peak bytes of torch's tensors over two real steps (build, data, model, state, step)."""
    stop = threading.Event()
    done = [0]

    def progress(epoch: int, step: int, steps_per_epoch: int, loss: float) -> None:
        done[0] += 1
        if done[0] >= 2:
            stop.set()

    tracker = StorageTracker()
    with tracker:
        train(task_factory, params, config, device=str(where), stop=stop, progress=progress)
    return tracker.peak
