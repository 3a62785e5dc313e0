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

from search.study.settings import StudyConfig
from trainer import CheckpointStore

__all__ = [
    "BudgetSpent",
    "Finished",
    "Interrupted",
    "Lost",
    "Paused",
    "Pruned",
    "StopReason",
    "TrialEnd",
    "TrialFunction",
    "TrialOutcome",
    "TrialRun",
    "trial_end",
]


@dataclass(frozen=True)
class Finished:
    """The trial function returned by itself: completed, diverged, failed (or its machine
    failed: the outcome's status says which)."""

    name = "finished"


@dataclass(frozen=True)
class Pruned:
    """The pruner stopped it at `epoch` (or the trial function pruned itself)."""

    epoch: int
    name = "pruned"


@dataclass(frozen=True)
class Paused:
    """Promotion-based ASHA: at rung `rung` its `value` ranks below the top 1/eta; it is handed
    back paused, to be resumed from that epoch's checkpoint once it ranks there."""

    rung: int
    value: float
    name = "paused"


@dataclass(frozen=True)
class BudgetSpent:
    """The study's budget allowed no epoch after `epoch`: it is handed back with its checkpoint
    (`search.worker.recording`); the study's end ends it PRUNED, a raised budget resumes it."""

    epoch: int
    name = "budget"


@dataclass(frozen=True)
class Lost:
    """Another worker holds the trial now (this one was silent past its grace period): nothing
    of it is recorded here."""

    name = "lost"


@dataclass(frozen=True)
class Interrupted:
    """Stopped at a step and checkpointed (SIGTERM, Ctrl-C, or `fenced`: no heartbeat reached
    the database for most of the grace period); it is handed back."""

    fenced: bool = False
    name = "interrupted"


StopReason = Finished | Pruned | Paused | BudgetSpent | Lost | Interrupted
"""How a trial ended, as the worker records it (`search.worker.recording`)."""


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
    over by another worker (`search.worker.decisions.TrialReporter`)."""
    stop: threading.Event
    """Set when the worker must stop (SIGTERM, Ctrl-C): checkpoint and return "preempted"."""
    checkpoints: CheckpointStore | None = None
    reported: dict[int, float] = field(default_factory=dict)
    """Epoch -> value already recorded for this trial (non-empty when it is resumed)."""
    previous_worker: str | None = None
    """The worker that held this trial before (it died, was preempted, paused or stopped)."""
    why_stopped: Callable[[], StopReason | None] = field(default=lambda: None, repr=False)
    """Why report() said stop, once it has (the worker's reporter answers it)."""

    @property
    def stop_reason(self) -> str | None:
        """Once report() said stop: "pruned", "paused", "budget" or "lost"."""
        why = self.why_stopped()
        return None if why is None else why.name


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
