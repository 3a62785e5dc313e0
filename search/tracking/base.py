"""The interface every tracker implements (one module per tracker: `mlflow_tracker`,
`wandb_tracker`; `trackers.open_trackers` opens a study's).

A tracker's methods do network calls and may be slow or fail: a worker calls them only from its
background sender (`search.tracking.sender`), never from the training thread; `hpsearch export`
calls them directly. Each method can be retried after a failure without writing anything twice:
runs are found by the trial's key, and values already there are not sent again.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from search.study.studies import StudyRef
from search.tracking.records import TrialEnded, TrialStarted

__all__ = ["TRACKERS", "Tracker", "study_params"]

TRACKERS = ("mlflow", "wandb")


class Tracker(ABC):
    """One experiment tracker, for one study."""

    name: str
    """mlflow | wandb."""
    where: str
    """Where the runs go, safe to log (no password)."""

    @abstractmethod
    def start_trial(self, started: TrialStarted) -> None:
        """Find the trial's run (or create it, under the study's parent run or group), mark it
        running when `started.running`, log the params and the values it lacks."""

    @abstractmethod
    def log_epochs(self, number: int, points: list[tuple[int, float, float]]) -> None:
        """The trial's metric at some epochs: (epoch, value, when reported), step = epoch."""

    @abstractmethod
    def end_trial(self, ended: TrialEnded) -> None:
        """The trial's final state (complete, pruned at epoch k, failed with reason) and its
        provenance tags."""

    @abstractmethod
    def hand_back(self, number: int, why: str) -> None:
        """The trial stops here without ending (preempted, paused, its attempt failed): its run
        stays open for the worker that resumes it."""

    @abstractmethod
    def end_study(self) -> None:
        """The study is done: its parent run (or group) is finished."""

    def close(self) -> None:  # noqa: B027 (optional)
        """Release what the tracker holds (open runs, clients)."""

    @abstractmethod
    def is_transient(self, exc: BaseException) -> bool:
        """Worth retrying (the tracker unreachable, overloaded, timing out), as opposed to a
        refusal that would be the same next time."""


def study_params(study: StudyRef) -> dict[str, Any]:
    """What the study's parent run records: how the search was set up."""
    c = study.config
    return {
        "metric": c.study.metric,
        "direction": c.study.direction,
        "n_trials": c.study.n_trials,
        "sampler": c.study.sampler,
        "seed": c.study.seed,
        "pruner": c.pruner.type,
        "task": c.task.name,
        "epochs": c.task.epochs,
        "precision": c.train.precision,
        "space": ", ".join(p.name for p in c.space),
    }
