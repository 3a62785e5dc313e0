"""Synthetic trial functions for dispatch tests: real workers, real storage, no training.

`curve`'s score rises with the trial's `x` and the epoch, so good and poor trials are known.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import sys
import time
from typing import Any

from search.db.storage import open_storage
from search.study.studies import open_study
from search.worker.loop import Worker
from search.worker.trial import TrialOutcome, TrialRun


def curve(run: TrialRun, epoch_s: float = 0.01) -> TrialOutcome:
    """Score x * epoch / epochs; stops on a prune or a stop request like the trainer does."""
    epochs = run.config.task.epochs
    value = None
    for epoch in range(max(run.reported, default=0) + 1, epochs + 1):
        time.sleep(epoch_s)
        value = run.params["x"] * epoch / epochs
        if run.report(epoch, value):
            return TrialOutcome(status="pruned", value=value)
        if run.stop.is_set():
            return TrialOutcome(status="preempted")
    return TrialOutcome(status="completed", value=value, user_attrs={"epochs_trained": epochs})


def slow_curve(run: TrialRun) -> TrialOutcome:
    return curve(run, epoch_s=0.2)


EPOCH_LOG_ENV = "HPSEARCH_TEST_EPOCH_LOG"
"""`logged_curve` appends "pid trial epoch start end" (wall-clock seconds) per epoch here."""


def logged_curve(run: TrialRun) -> TrialOutcome:
    """`curve` with 0.25 s epochs, each logged with its process and times: which worker trained
    what, when."""
    epochs = run.config.task.epochs
    value = None
    for epoch in range(max(run.reported, default=0) + 1, epochs + 1):
        start = time.time()
        time.sleep(0.25)
        with open(os.environ[EPOCH_LOG_ENV], "a") as log:
            log.write(f"{os.getpid()} {run.number} {epoch} {start} {time.time()}\n")
        value = run.params["x"] * epoch / epochs
        if run.report(epoch, value):
            return TrialOutcome(status="pruned", value=value)
        if run.stop.is_set():
            return TrialOutcome(status="preempted")
    return TrialOutcome(status="completed", value=value, user_attrs={"epochs_trained": epochs})


POISON_X = 0.123456789
"""The x of a poisonous trial: it kills whichever worker process runs it, after one epoch (as
a trial that gets its worker OOM-killed, segfaults or aborts CUDA would)."""


def poisoned_curve(run: TrialRun) -> TrialOutcome:
    if run.params["x"] == POISON_X:
        run.report(1, 0.0)
        time.sleep(1.0)  # the background writer stores epoch 1: the attempt died there
        os.kill(os.getpid(), signal.SIGKILL)
    return curve(run)


def early_best(run: TrialRun) -> TrialOutcome:
    """`curve` where the earliest trials are the best: the first to reach a rung (which pause,
    having nobody to beat yet) are promoted later (promotion-based ASHA)."""
    run.params = {**run.params, "x": 1.0 - run.number / 100}
    return curve(run)


OBJECTIVES = {
    "curve": curve,
    "slow_curve": slow_curve,
    "poisoned_curve": poisoned_curve,
    "logged_curve": logged_curve,
    "early_best": early_best,
}


def worker_main(url: str, study: str, objective: str, grace_s: float) -> None:
    logging.basicConfig(
        level=logging.INFO, format=f"%(asctime)s [{objective}] %(message)s", stream=sys.stderr
    )
    storage = open_storage(url)
    worker = Worker(
        storage,
        open_study(storage, study),
        run_trial=OBJECTIVES[objective],
        grace_s=grace_s,
        progress=False,
    )
    sys.exit(worker.run())


def start_workers(
    url: str, study: str, n: int, objective: str = "curve", grace_s: float = 5.0
) -> list[Any]:
    ctx = multiprocessing.get_context("spawn")
    procs = [
        ctx.Process(target=worker_main, args=(url, study, objective, grace_s)) for _ in range(n)
    ]
    for p in procs:
        p.start()
    return procs


def join_all(procs: list[Any], timeout_s: float = 120) -> list[int]:
    deadline = time.monotonic() + timeout_s
    for p in procs:
        p.join(max(0.1, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
            raise AssertionError(f"worker {p.pid} did not finish within {timeout_s} s")
    return [p.exitcode for p in procs]
