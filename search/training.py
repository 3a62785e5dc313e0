"""The default trial function: train the study's task with `trainer.train`."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import trainer
from search.provenance import code_version, environment
from search.trial_run import TrialOutcome, TrialRun

__all__ = ["run_training"]


def run_training(run: TrialRun) -> TrialOutcome:
    """Train one trial; its user attributes record what made it (hostname, versions, code
    commit, data fingerprint, precision, epochs, wall time, peak memory, where it resumed
    from)."""
    config = dataclasses.replace(run.config.train, seed=run.seed)
    try:
        factory = _task_factory(run.config.task.name)
    except trainer.TaskImportError as exc:
        # It imported when this worker started (preflight): the machine changed, not the trial.
        return TrialOutcome(status="machine_fault", reason=f"the task no longer imports: {exc}")
    # `trainer.train` loads torch on first use: the commands that never train do not pay for it.
    result = trainer.train(
        factory,
        run.params,
        config,
        report=run.report,
        checkpoints=run.checkpoints,
        device=run.device,
        stop=run.stop,
    )
    attrs: dict[str, Any] = {
        **environment(),
        **code_version(),
        "device_name": result.device_name,
        "precision": result.precision,
        "precision_reason": result.precision_reason,
        "data_fingerprint": result.data_fingerprint,
        "epochs_trained": result.epochs_run,
        "wall_seconds": round(result.wall_seconds, 3),
        "peak_memory_bytes": result.peak_memory_bytes,
        "seed": run.seed,
    }
    if result.adapted:
        attrs["adapted"] = list(result.adapted)
    unreadable = getattr(run.checkpoints, "unreadable", None)
    if unreadable:
        attrs["checkpoint_unreadable"] = unreadable
    if result.resumed_from is not None or run.previous_worker is not None:
        # The same trial continues (same number, bracket and rungs); this says from where.
        attrs["resumed_from"] = {
            "trial": run.number,
            "worker_id": run.previous_worker,
            **(result.resumed_from or {"epoch": 0, "step": 0}),
        }
    value = result.metrics[-1] if result.metrics else None
    if result.status == "device_error":
        # The process's CUDA context is unusable: nothing more can train in it, whatever the
        # trial. The trial goes back (one failed attempt); the worker process ends.
        return TrialOutcome(status="machine_fault", value=value, reason=result.reason)
    return TrialOutcome(status=result.status, value=value, user_attrs=attrs, reason=result.reason)


@functools.cache
def _task_factory(name: str) -> Any:
    return trainer.resolve_task(name)
