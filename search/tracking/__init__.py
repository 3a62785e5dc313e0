"""Experiment trackers (MLflow, Weights & Biases): every trial one run, written live by the
worker that trains it (`search.worker.tracked`) or later by `hpsearch export`
(`search.tracking.export`).

One module per tracker behind `Tracker` (`base`); `records` is what a tracker is told about a
trial; `sender` keeps tracker calls off the training thread.
"""

from search.tracking.base import TRACKERS, Tracker
from search.tracking.records import TrialEnded, TrialStarted
from search.tracking.trackers import open_trackers

__all__ = ["TRACKERS", "Tracker", "TrialEnded", "TrialStarted", "open_trackers"]
