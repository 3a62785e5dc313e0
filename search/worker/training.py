"""The default trial function: train the study's task with `trainer.train`."""

from __future__ import annotations

import dataclasses
import functools
import logging
from typing import Any

import trainer
from search.worker.provenance import code_version, environment
from search.worker.trial import TrialOutcome, TrialRun

__all__ = ["outcome_of", "run_training"]

logger = logging.getLogger("search.worker.training")
_UNCHECKED_DEVICES: set[str] = set()


def run_training(run: TrialRun, *, device_memory: int | None = None) -> TrialOutcome:
    """Train one trial; its user attributes record what made it (hostname, versions, code
    commit, data fingerprint, precision, epochs, wall time, peak memory, where it resumed
    from).

    First the memory check (`trainer.memory.check_memory`): a configuration that cannot fit
    the device even with gradient checkpointing and micro-batches of one ends failed, with the
    reason, before any training. `device_memory` is the device's memory in bytes (the worker's
    ``--device-memory``); without it a GPU's free memory counts and a CPU is not checked.
    """
    config = dataclasses.replace(run.config.train, seed=run.seed)
    try:
        factory = _task_factory(run.config.task.name)
    except trainer.TaskImportError as exc:
        # It imported when this worker started (preflight): the machine changed, not the trial.
        return TrialOutcome(status="machine_fault", reason=f"the task no longer imports: {exc}")
    memory_check, refused = _check_memory(factory, run, config, device_memory)
    if refused is not None:
        return refused
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
    return outcome_of(run, result, memory_check)


def outcome_of(
    run: TrialRun, result: trainer.TrainResult, memory_check: dict[str, Any] | None = None
) -> TrialOutcome:
    """The trial's outcome and user attributes from the trainer's result (also the result of
    rank 0 of a multi-rank trial, `search.worker.trial_group`)."""
    attrs: dict[str, Any] = {
        **environment(),
        **code_version(),
        "device_name": result.device_name,
        "precision": result.precision,
        "precision_reason": result.precision_reason,
        "device_settings": result.device_settings,
        "data_fingerprint": result.data_fingerprint,
        "epochs_trained": result.epochs_run,
        "wall_seconds": round(result.wall_seconds, 3),
        "peak_memory_bytes": result.peak_memory_bytes,
        "seed": run.seed,
    }
    if memory_check is not None:
        attrs["memory_check"] = memory_check
    if result.adapted:
        attrs["adapted"] = list(result.adapted)
    if result.notes:
        attrs["notes"] = list(result.notes)
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
    if result.status == "failed" and result.traceback:
        # The task raised: the worker's log is where a user looks for why (the study keeps the
        # one-line reason as the trial's fail_reason).
        logger.error("trial %d raised:\n%s", run.number, result.traceback.rstrip())
    if result.status == "device_error":
        # The process's CUDA context is unusable: nothing more can train in it, whatever the
        # trial. The trial goes back (one failed attempt); the worker process ends.
        return TrialOutcome(status="machine_fault", value=value, reason=result.reason)
    return TrialOutcome(status=result.status, value=value, user_attrs=attrs, reason=result.reason)


def _check_memory(
    factory: Any, run: TrialRun, config: Any, device_memory: int | None
) -> tuple[dict[str, Any] | None, TrialOutcome | None]:
    """(what the check found, for the trial's attributes; the outcome if the trial is refused)."""
    # trainer.memory imports torch: loaded with the first trial, not by every command.
    from trainer.memory import MemoryCheckError, check_memory  # imports torch: in a trial only

    try:
        fit = check_memory(
            factory, run.params, config, device=run.device, limit_bytes=device_memory
        )
    except MemoryCheckError as exc:
        logger.warning("trial %d: memory check skipped: %s", run.number, exc)
        return None, None
    if fit is None:
        if run.device not in _UNCHECKED_DEVICES:  # said once per device and process
            _UNCHECKED_DEVICES.add(run.device)
            logger.info(
                "memory check off on %s: a CPU has no fixed memory limit (give one with "
                "--device-memory or $HPSEARCH_DEVICE_MEMORY)",
                run.device,
            )
        return None, None
    measured = fit.fitted or fit.tried[-1]
    found = {
        "verdict": fit.verdict,
        "peak_bytes": measured.total_bytes,
        "limit_bytes": fit.target.limit_bytes,
        "grad_accum_steps": measured.plan.grad_accum_steps,
        "grad_checkpointing": measured.plan.grad_checkpointing,
    }
    if fit.fits:
        if fit.fitted is not fit.configured:
            then = (
                "the trainer adapts after its first out-of-memory error"
                if fit.target.device_type == "cuda"
                else "trained as configured: nothing enforces the limit on a CPU"
            )
            logger.info("trial %d: %s (%s)", run.number, fit.verdict, then)
        return found, None
    attrs = {
        **environment(),
        **code_version(),
        "device_name": fit.target.device_name,
        "precision": fit.target.precision,
        "epochs_trained": 0,
        "seed": run.seed,
        "memory_check": found,
    }
    return found, TrialOutcome(status="failed", reason=fit.reason, user_attrs=attrs)


@functools.cache
def _task_factory(name: str) -> Any:
    return trainer.resolve_task(name)
