"""Local worker processes: one worker in this process, or one child process per device, which
GPU each child gets, its environment, and when a child that failed is started again.

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

import functools
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from search.db.migrate import check_schema
from search.db.storage import Storage, retry
from search.errors import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK
from search.study.config import ConfigError
from search.study.studies import open_study
from search.worker.artifacts import artifact_store_for
from search.worker.loop import Worker
from search.worker.preflight import check_device
from search.worker.training import run_training
from search.worker.trial_group import gpu_groups, group_label, run_trial_group, trial_devices

__all__ = [
    "CHILD_RESTARTS",
    "ChildPlan",
    "Progress",
    "WorkerOptions",
    "check_devices",
    "child_plans",
    "default_device",
    "gpu_count",
    "local_devices",
    "restart_delay",
    "run_worker",
    "run_worker_processes",
    "visible_gpus",
]

logger = logging.getLogger("search.worker.launcher")

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


@dataclass(frozen=True)
class WorkerOptions:
    """What `run` and `worker` pass on to each worker (and to worker processes they start)."""

    artifacts: str | None
    grace_s: float
    keep_checkpoints: bool
    device_memory: int | None
    """Bytes a trial may use on the worker's device (the pre-training memory check)."""
    gpus_per_trial: int = 1
    """Ranks of each trial (search.worker.trial_group); 1: the trial runs in the worker process."""

    def argv(self) -> list[str]:
        """These options as `hpsearch worker` flags, for a child process."""
        out = ["--grace-s", str(self.grace_s)]
        if self.artifacts:
            out += ["--artifacts", self.artifacts]
        if self.keep_checkpoints:
            out.append("--keep-checkpoints")
        if self.device_memory is not None:
            out += ["--device-memory", str(self.device_memory)]
        if self.gpus_per_trial > 1:
            out += ["--gpus-per-trial", str(self.gpus_per_trial)]
        return out


class Progress(Protocol):
    """A live line the parent draws below its children's log lines (search.monitor.progress)."""

    def draw(self) -> None: ...

    def clear(self) -> None: ...


def run_worker(storage: Storage, study_name: str, device: str, options: WorkerOptions) -> int:
    """One worker in this process on `device` until the study is done; its exit code."""
    # The database answered once (open_storage); if it restarts now, wait for it.
    retry(lambda: check_schema(storage), "check the schema", attempts=12)
    study = retry(lambda: open_study(storage, study_name), "open the study", attempts=12)
    run_trial = None
    if options.device_memory is not None:
        run_trial = functools.partial(run_training, device_memory=options.device_memory)
    if options.gpus_per_trial > 1:
        group = trial_devices(device, options.gpus_per_trial)
        run_trial = functools.partial(run_trial_group, devices=group)
        device = group_label(group)
    worker = Worker(
        storage,
        study,
        device=device,
        run_trial=run_trial,
        grace_s=options.grace_s,
        artifacts=artifact_store_for(storage, options.artifacts),
        keep_checkpoints=options.keep_checkpoints,
    )
    try:
        return worker.run()
    finally:
        storage.close()


def run_worker_processes(
    url: str,
    study_name: str,
    devices: list[str],
    options: WorkerOptions,
    *,
    restart_failed: bool = False,
    progress: Progress | None = None,
) -> int:
    """One child process per device; the storage URL travels in the environment, never argv
    (where `ps` would show its password). With `restart_failed` (GPU workers), a child that
    exits 1 is started again (`restart_delay`). The children's log lines are relayed to this
    process's stderr, with `progress` redrawn below them."""
    # This process draws the one progress line; the workers only log.
    env = dict(os.environ, HPSEARCH_STORAGE=url, HPSEARCH_PROGRESS="0")
    gpus = gpu_count() if any(d.startswith("cuda") for d in devices) else 0
    plans = child_plans(devices, env, gpu_count=gpus, cpu_count=os.cpu_count() or 1)
    lines: queue.Queue[str] = queue.Queue()

    def start(plan: ChildPlan) -> subprocess.Popen[str]:
        cmd = [sys.executable, "-m", "search", "worker", "--study", study_name]
        cmd += ["--device", plan.device, *options.argv()]
        child = subprocess.Popen(cmd, env=plan.env, stderr=subprocess.PIPE, text=True, bufsize=1)
        threading.Thread(target=_relay, args=(child, lines), daemon=True).start()
        return child

    children = [start(plan) for plan in plans]
    restarts = [0] * len(plans)
    restart_at: list[float | None] = [None] * len(plans)
    ended = [False] * len(plans)
    logger.info("started %d workers on %s", len(children), ", ".join(p.label for p in plans))
    stopping = False

    def forward(signum: int, _frame: Any) -> None:
        nonlocal stopping
        stopping = True
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    def supervise() -> None:
        """Note the children that ended; restart those due (exit 1, within the budget)."""
        for i, child in enumerate(children):
            if ended[i] or child.poll() is None:
                continue
            if restart_at[i] is None:
                delay = restart_delay(child.returncode, restarts[i]) if restart_failed else None
                if delay is None or stopping:
                    ended[i] = True
                    if restart_failed and not stopping and restarts[i] == CHILD_RESTARTS:
                        logger.error(
                            "worker on %s ended (exit %d) after %d restarts: not restarted again",
                            plans[i].label,
                            child.returncode,
                            restarts[i],
                        )
                    continue
                restart_at[i] = time.monotonic() + delay
                logger.warning(
                    "worker on %s exited %d; starting a new one in %.0f s (restart %d of %d)",
                    plans[i].label,
                    child.returncode,
                    delay,
                    restarts[i] + 1,
                    CHILD_RESTARTS,
                )
            elif stopping:
                ended[i] = True
            elif time.monotonic() >= restart_at[i]:
                restart_at[i], restarts[i] = None, restarts[i] + 1
                children[i] = start(plans[i])

    previous = signal.signal(signal.SIGTERM, forward)
    interrupted = False
    try:
        while not all(ended) or not lines.empty():
            try:
                line = lines.get(timeout=0.2)
            except queue.Empty:
                line = None
            except KeyboardInterrupt:
                # The terminal sent Ctrl-C to the children too; they checkpoint and hand back.
                interrupted = stopping = True
                continue
            supervise()
            if progress is not None:
                progress.clear()
            if line is not None:
                sys.stderr.write(line)
            if progress is not None:
                progress.draw()
    finally:
        signal.signal(signal.SIGTERM, previous)
        if progress is not None:
            progress.clear()
    codes = [child.returncode for child in children]
    if interrupted or EXIT_INTERRUPTED in codes:
        return EXIT_INTERRUPTED
    return EXIT_OK if all(c == 0 for c in codes) else EXIT_FAILURE


def gpu_count() -> int:
    """GPUs torch sees in this process."""
    import torch  # only here: commands that need no GPU count never load torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def default_device() -> str:
    """A worker's device when none is given: the first GPU, else the CPU."""
    return "cuda:0" if gpu_count() else "cpu"


def local_devices(workers: int | None, *, gpus_only: bool = False, per_trial: int = 1) -> list[str]:
    """Devices for local workers: GPUs round-robin, else CPU. With K GPUs per trial, a
    worker's device is a group of K GPUs (``cuda:0,1``), the visible GPUs cut into groups."""
    gpus = gpu_count()
    if gpus_only and gpus == 0:
        raise ConfigError("--gpus all: no GPU is visible (CUDA_VISIBLE_DEVICES, drivers?)")
    if per_trial > 1 and gpus:
        try:
            groups = gpu_groups(gpus, per_trial)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        return [groups[i % len(groups)] for i in range(workers or len(groups))]
    n = workers or max(1, gpus)
    return [f"cuda:{i % gpus}" if gpus else "cpu" for i in range(n)]


def check_devices(device: str, per_trial: int) -> None:
    """check_device for a worker's device, or for each device of its trials' group."""
    if per_trial == 1:
        check_device(device)
        return
    try:
        group = trial_devices(device, per_trial)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    for member in sorted(set(group)):
        check_device(member)


def _relay(child: subprocess.Popen[str], lines: queue.Queue[str]) -> None:
    assert child.stderr is not None
    for line in child.stderr:
        lines.put(line)
