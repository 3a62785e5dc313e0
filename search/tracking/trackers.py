"""The trackers of a study, opened from its `[tracking]` settings."""

from __future__ import annotations

from search.study.parse_config import check_tracker_installed
from search.study.settings import ConfigError, TrackingSettings
from search.study.studies import StudyRef
from search.tracking.base import Tracker

__all__ = ["open_trackers"]


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
