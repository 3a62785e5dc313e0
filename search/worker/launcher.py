"""Local child processes: which devices and CPU threads each gets, and their supervision.

Every process hpsearch starts on this machine is planned here: the workers of `hpsearch run
--workers N` and `hpsearch worker --gpus all`, the workers `hpsearch compare` runs its studies
with (`run_worker_processes`), and the ranks of a data-parallel trial (`rank_plans`, started by
`search.worker.trial_group`). `gpu_count` asks torch only when a GPU is involved.

A worker child sees exactly its GPU (or its group of K, ``--gpus-per-trial``) through
``CUDA_VISIBLE_DEVICES`` and numbers it from 0. The entry it gets is the parent's own: with
``CUDA_VISIBLE_DEVICES=2,3`` (or UUIDs, ``GPU-8f6c...,GPU-11aa...``, or MIG instances) the
children run on physical GPUs 2 and 3, not 0 and 1.

A child that exits 1 (a runtime failure: above all a CUDA error, which leaves the process's CUDA
context unusable, see ``trainer.faults``; the trial it held went back to the queue, one failed
attempt) or dies of a signal other than SIGTERM/SIGINT (the kernel's OOM killer, a crash in the
driver; the reaper hands its trial back) is started again after a backoff, at most
`CHILD_RESTARTS` times, when the caller asks for it (GPU workers). A child that exits 2 (bad
input: it would fail the same way again), 0 (the study is done) or 130 (interrupted) is not.

Example (what `hpsearch worker --gpus all` does with two GPUs under CUDA_VISIBLE_DEVICES=2,3)::

    plans = child_plans(["cuda:0", "cuda:1"], os.environ, gpu_count=2, cpu_count=16)
    [p.env["CUDA_VISIBLE_DEVICES"] for p in plans]   # ["2", "3"], each trains on cuda:0
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from search.errors import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK
from search.study.settings import ConfigError
from search.worker.preflight import check_device

__all__ = [
    "CHILD_RESTARTS",
    "ChildPlan",
    "Progress",
    "check_devices",
    "child_plans",
    "default_device",
    "gpu_count",
    "gpu_groups",
    "group_label",
    "local_devices",
    "rank_plans",
    "restart_delay",
    "run_worker_processes",
    "supervise",
    "trial_devices",
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


def rank_plans(devices: list[str], env: Mapping[str, str], *, cpu_count: int) -> list[ChildPlan]:
    """One `ChildPlan` per rank of a data-parallel trial on `devices` (this process's numbering:
    ``cuda:N`` or ``cpu``, see `trial_devices`); rank r trains on ``plan.device``.

    GPU ranks all see the group's GPUs (the parent's ``CUDA_VISIBLE_DEVICES`` entries, so that
    NCCL finds its peers) and rank r trains on the r-th. CPU ranks share this process's threads:
    ``OMP_NUM_THREADS`` (else the core count) divided by K, or each would use all the cores.
    """
    k = len(devices)
    plans = []
    gpu_ids = [int(d.partition(":")[2] or 0) for d in devices if d.startswith("cuda")]
    visible = ",".join(visible_gpus(env, max(gpu_ids) + 1)[i] for i in gpu_ids) if gpu_ids else ""
    for r, device in enumerate(devices):
        child_env = dict(env)
        if device.startswith("cuda"):
            child_env["CUDA_VISIBLE_DEVICES"] = visible
            plans.append(ChildPlan(f"cuda:{r}", f"{device} (rank {r})", child_env))
        else:
            threads = int(env.get("OMP_NUM_THREADS") or cpu_count)
            child_env["OMP_NUM_THREADS"] = str(max(1, threads // k))
            plans.append(ChildPlan("cpu", f"cpu (rank {r})", child_env))
    return plans


def trial_devices(device: str, k: int) -> list[str]:
    """The K devices of one worker's trials: ``cpu`` -> K CPU ranks; ``cuda:I`` -> GPUs I..I+K-1;
    ``cuda:A,B`` -> exactly those (then K must match)."""
    if device == "cpu":
        return ["cpu"] * k
    kind, _, index = device.partition(":")
    if kind != "cuda":
        raise ValueError(f"--device {device}: use cpu, cuda, cuda:N or cuda:A,B,...")
    if "," in index:
        ids = [int(i) for i in index.split(",")]
        if len(ids) != k:
            raise ValueError(f"--device {device} names {len(ids)} GPUs, --gpus-per-trial is {k}")
        return [f"cuda:{i}" for i in ids]
    first = int(index or 0)
    return [f"cuda:{first + r}" for r in range(k)]


def gpu_groups(gpus: int, k: int) -> list[str]:
    """The devices of the workers that share `gpus` GPUs, K per trial: ``cuda:0,1``, ...
    (GPUs left over, fewer than K, go unused)."""
    if gpus < k:
        raise ValueError(f"--gpus-per-trial {k}: only {gpus} GPU(s) are visible")
    return ["cuda:" + ",".join(str(g * k + r) for r in range(k)) for g in range(gpus // k)]


def group_label(devices: list[str]) -> str:
    """How the worker shows its device: ``cpu x2``, ``cuda:0,1``."""
    if all(d == "cpu" for d in devices):
        return f"cpu x{len(devices)}"
    return "cuda:" + ",".join(d.partition(":")[2] for d in devices)


class Progress(Protocol):
    """A live line the parent draws below its children's log lines (search.monitor.progress)."""

    def draw(self) -> None: ...

    def clear(self) -> None: ...


def run_worker_processes(
    url: str,
    study_name: str,
    devices: list[str],
    worker_argv: Sequence[str],
    *,
    restart_failed: bool = False,
    progress: Progress | None = None,
    log_path: Path | None = None,
) -> int:
    """One `hpsearch worker` child process per device, on study `study_name`, with the flags
    `worker_argv`; their exit code (0, 1, or 130 if interrupted). The storage URL travels in the
    environment, never argv (where `ps` would show its password). See `supervise` for
    `restart_failed`, `progress` and `log_path`."""
    # The parent draws the one progress line, if any; the workers only log.
    env = dict(os.environ, HPSEARCH_STORAGE=url, HPSEARCH_PROGRESS="0")
    env.pop("HPSEARCH_SCHEMA", None)  # `url` has its schema, if any (compare's SQLite has none)
    gpus = gpu_count() if any(d.startswith("cuda") for d in devices) else 0
    plans = child_plans(devices, env, gpu_count=gpus, cpu_count=os.cpu_count() or 1)

    def command(plan: ChildPlan) -> list[str]:
        cmd = [sys.executable, "-m", "search", "worker", "--study", study_name]
        return [*cmd, "--device", plan.device, *worker_argv]

    code = supervise(
        plans, command, restart_failed=restart_failed, progress=progress, log_path=log_path
    )
    if code == EXIT_FAILURE and log_path is not None:
        logger.error("a worker of %s failed; see %s", study_name, log_path)
    return code


def supervise(
    plans: Sequence[ChildPlan],
    command: Callable[[ChildPlan], list[str]],
    *,
    restart_failed: bool = False,
    progress: Progress | None = None,
    log_path: Path | None = None,
) -> int:
    """Start ``command(plan)`` under ``plan.env`` for every plan and wait for them all.

    The children's stderr is relayed line by line to this process's stderr, `progress` redrawn
    below it; with `log_path`, their stdout and stderr go to that file instead. SIGTERM and
    Ctrl-C reach every child (they checkpoint and hand their trials back). With
    `restart_failed`, a child that exits 1 or crashes is started again (`restart_delay`).
    Returns 130 if interrupted, else 0 if every child exited 0, else 1.
    """
    lines: queue.Queue[str] = queue.Queue()
    if log_path is not None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "ab") if log_path is not None else None  # noqa: SIM115 (closed below)

    def start(plan: ChildPlan) -> subprocess.Popen[Any]:
        if log is not None:
            return subprocess.Popen(command(plan), env=plan.env, stdout=log, stderr=log)
        child = subprocess.Popen(
            command(plan), env=plan.env, stderr=subprocess.PIPE, text=True, bufsize=1
        )
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

    def check_children() -> None:
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
            check_children()
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
        if log is not None:
            log.close()
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
