"""Local worker processes on this machine's GPUs: which GPU each child gets, its environment,
and when a child that failed is started again.

`hpsearch worker --gpus all` (and `hpsearch run` with several devices) starts one child process
per device. A child sees exactly one GPU, through ``CUDA_VISIBLE_DEVICES``, and trains on it as
``cuda:0``. The entry it gets is the parent's own: with ``CUDA_VISIBLE_DEVICES=2,3`` (or UUIDs,
``GPU-8f6c...,GPU-11aa...``, or MIG instances) the children run on physical GPUs 2 and 3, not 0
and 1.

A child that exits 1 (a runtime failure: above all a CUDA error, which leaves the process's CUDA
context unusable, see ``trainer.faults``; the trial it held went back to the queue, one failed
attempt) or dies of a signal other than SIGTERM/SIGINT (the kernel's OOM killer, a crash in the
driver; the reaper hands its trial back) is started again after a backoff, at most
`CHILD_RESTARTS` times. A child that exits 2 (bad input: it would fail the same way again),
0 (the study is done) or 130 (interrupted) is not.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping

__all__ = [
    "CHILD_RESTARTS",
    "ChildPlan",
    "child_plans",
    "restart_delay",
    "visible_gpus",
]

CHILD_RESTARTS = 3
"""Restarts of one child that exited 1. A GPU whose every process fails (a broken card, a
driver gone) stops being retried after this many; the other GPUs' children go on."""
RESTART_BACKOFF_S = 2.0
"""Wait before the first restart; doubled for each further one (2, 4, 8 s)."""


class ChildPlan:
    """How one child is started: its ``--device`` argument and its environment."""

    def __init__(self, device: str, label: str, env: dict[str, str]) -> None:
        self.device = device
        """What the child is told to train on (``cuda:0``: it sees one GPU), or ``cpu``."""
        self.label = label
        """The device in the parent's terms, for the log (``cuda:1 (CUDA_VISIBLE_DEVICES=3)``)."""
        self.env = env

    def __repr__(self) -> str:
        return f"ChildPlan({self.device!r}, {self.label!r})"


def visible_gpus(env: Mapping[str, str], count: int) -> list[str]:
    """This process's GPUs as ``CUDA_VISIBLE_DEVICES`` entries, in torch's index order.

    `count` is how many GPUs torch sees (``torch.cuda.device_count()``). Without
    ``CUDA_VISIBLE_DEVICES`` they are ``0 .. count-1``; with it, its first `count` entries
    (CUDA stops at the first entry it cannot use, so torch's devices are the leading ones).
    """
    raw = env.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return [str(i) for i in range(count)]
    entries = [entry.strip() for entry in raw.split(",") if entry.strip()]
    return entries[:count]


def child_plans(
    devices: list[str], env: Mapping[str, str], *, gpu_count: int, cpu_count: int
) -> list[ChildPlan]:
    """One `ChildPlan` per entry of `devices` ("cuda:N" in this process's numbering, or "cpu").

    Each child also gets ``OMP_NUM_THREADS`` = its share of the CPU cores (unless set already):
    without it every child would start one thread per core, GPU children included (their data
    loading and optimizer run on the CPU), and they would fight over the cores.
    """
    gpus = visible_gpus(env, gpu_count)
    plans = []
    for device in devices:
        child_env = dict(env)
        if len(devices) > 1 and "OMP_NUM_THREADS" not in env:
            child_env["OMP_NUM_THREADS"] = str(max(1, cpu_count // len(devices)))
        if device.startswith("cuda"):
            # One GPU, or a group of K for data-parallel trials (``cuda:2,3``, --gpus-per-trial):
            # the child sees exactly those and numbers them from 0.
            indices = [int(i) for i in (device.partition(":")[2] or "0").split(",")]
            visible = ",".join(gpus[i] for i in indices)
            child_env["CUDA_VISIBLE_DEVICES"] = visible
            label = f"{device} (CUDA_VISIBLE_DEVICES={visible})"
            own = "cuda:" + ",".join(str(r) for r in range(len(indices)))
            plans.append(ChildPlan(own, label, child_env))
        else:
            plans.append(ChildPlan(device, device, child_env))
    return plans


def restart_delay(exit_code: int, restarts: int) -> float | None:
    """Seconds to wait before starting a child again that exited with `exit_code` after
    `restarts` restarts; None when it is not restarted."""
    crashed = exit_code < 0 and -exit_code not in (signal.SIGTERM, signal.SIGINT)
    if not (exit_code == 1 or crashed) or restarts >= CHILD_RESTARTS:
        return None
    return RESTART_BACKOFF_S * 2**restarts
