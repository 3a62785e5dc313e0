"""What a worker hands the function that runs one trial, and what that function returns.

The default trial function trains the study's task (`search.worker.training.run_training`); tests
and benchmarks pass their own (`Worker(..., run_trial=f)`).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from search.study.config import StudyConfig
from trainer import CheckpointStore

__all__ = ["TrialEnd", "TrialFunction", "TrialOutcome", "TrialRun", "trial_end"]


@dataclass
class TrialRun:
    """One trial, as the worker hands it to the trial function."""

    number: int
    trial_id: int
    params: dict[str, Any]
    config: StudyConfig
    seed: int
    """Training seed of this trial: derived from the study seed and the trial number
    (`search.sampling.samplers.derived_seed`)."""
    device: str
    report: Callable[[int, float], bool]
    """report(epoch, value) -> True when the trial should stop: return "pruned" then (with
    the last value, or None). Why it stops is the worker's to know (`stop_reason`): pruned,
    paused at a rung (promotion: the worker hands it back paused, to be resumed from the
    checkpoint of that epoch, with `reported` up to it), the study's budget spent, or taken
    over by another worker."""
    stop: threading.Event
    """Set when the worker must stop (SIGTERM, Ctrl-C): checkpoint and return "preempted"."""
    checkpoints: CheckpointStore | None = None
    reported: dict[int, float] = field(default_factory=dict)
    """Epoch -> value already recorded for this trial (non-empty when it is resumed)."""
    previous_worker: str | None = None
    """The worker that held this trial before (it died, was preempted, paused or stopped)."""
    stop_reason: str | None = None
    """Set by the worker when report() says stop: "pruned", "paused", "budget" or "lost"."""


@dataclass
class TrialOutcome:
    """How a trial ended, as the trial function tells the worker."""

    status: Literal[
        "completed", "pruned", "diverged", "failed", "preempted", "machine_fault", "attempt_failed"
    ]
    """machine_fault: this machine cannot train (its device failed, the task no longer imports);
    the worker hands the trial back untouched (one failed attempt) and stops. attempt_failed:
    the attempt died as if its worker had (a rank of a multi-rank trial was killed); the trial
    goes back to the queue as one failed attempt, and the worker goes on."""
    value: float | None = None
    """The trial's value: its last reported score."""
    user_attrs: dict[str, Any] = field(default_factory=dict)
    reason: str | None = None


TrialFunction = Callable[[TrialRun], TrialOutcome]


@dataclass(frozen=True)
class TrialEnd:
    """How a finished trial is recorded: Optuna's state, its value, and why it failed."""

    state: Literal["COMPLETE", "PRUNED", "FAIL"]
    value: float | None
    fail_reason: str | None = None


def trial_end(outcome: TrialOutcome, reported: dict[int, float]) -> TrialEnd:
    """The record of a trial that ended (any status but "preempted" and "machine_fault", which
    are handed back).

    completed -> COMPLETE with its value; pruned -> PRUNED with its value, else its last
    reported one (as Optuna's ``tell`` does); anything else -> FAIL with the reason. A NaN
    value, or an infinite one for a complete trial, is no result: FAIL, saying so.
    """
    state = {"completed": "COMPLETE", "pruned": "PRUNED"}.get(outcome.status, "FAIL")
    value, reason = outcome.value, outcome.reason
    if state == "PRUNED" and value is None and reported:
        value = reported[max(reported)]
    if value is not None and (math.isnan(value) or (state == "COMPLETE" and math.isinf(value))):
        state, reason = "FAIL", reason or f"the trial's value is {value}"
    if state == "FAIL":
        return TrialEnd("FAIL", None, reason or f"the trial ended {outcome.status}")
    return TrialEnd(state, value)  # type: ignore[arg-type]
