"""The interface every tracker implements (one module per tracker: `mlflow_tracker`,
`wandb_tracker`), and how the trackers of a study are opened.

A tracker's methods do network calls and may be slow or fail: a worker calls them only from its
background sender (`search.tracking.sender`), never from the training thread; `hpsearch export`
calls them directly. Each method can be retried after a failure without writing anything twice:
runs are found by the trial's key, and values already there are not sent again.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from search.study.config import ConfigError, TrackingSettings, check_tracker_installed
from search.study.studies import StudyRef
from search.tracking.records import TrialEnded, TrialStarted

__all__ = ["TRACKERS", "Tracker", "open_trackers", "study_params"]

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


def open_trackers(
    study: StudyRef,
    settings: TrackingSettings | None = None,
    *,
    only: str | None = None,
    quick_fail: bool = False,
) -> list[Tracker]:
    """The study's trackers (its stored `[tracking]`, or `settings`); `only` keeps one of them.

    quick_fail: one attempt per request, with a short timeout (the worker's sender retries on
    its own thread); else the tracker library's own retries apply.
    ConfigError (exit 2) when a tracker's package is missing.
    """
    settings = settings if settings is not None else study.config.tracking
    trackers: list[Tracker] = []
    if settings.mlflow is not None and only in (None, "mlflow"):
        check_tracker_installed("mlflow")
        from search.tracking.mlflow_tracker import MlflowTracker

        trackers.append(MlflowTracker(settings.mlflow, study, quick_fail=quick_fail))
    if settings.wandb is not None and only in (None, "wandb"):
        check_tracker_installed("wandb")
        from search.tracking.wandb_tracker import WandbTracker

        trackers.append(WandbTracker(settings.wandb, study))
    if only is not None and not trackers:
        raise ConfigError(
            f"study {study.name!r} has no [tracking] {only} settings: give them on the "
            "command line (see hpsearch export --help)"
        )
    return trackers
