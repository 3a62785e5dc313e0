"""What a tracker is told about a trial, the same whether a worker sends it live or `hpsearch
export` sends it later: the trial's key, params, per-epoch values, state and provenance."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "KEY_TAG",
    "STUDY_KEY_TAG",
    "TrialEnded",
    "TrialStarted",
    "provenance_tags",
    "trial_key",
]

KEY_TAG = "hpsearch.trial_key"
"""Tag (MLflow) naming the trial a run belongs to: ``<study uid>/<trial number>``. Every worker
and every export finds a trial's run by it, so a resumed trial continues its run."""
STUDY_KEY_TAG = "hpsearch.study_key"
"""Tag of the study's parent run (MLflow): the study uid."""

State = Literal["complete", "pruned", "failed"]

PROVENANCE_KEYS = (
    "hostname",
    "worker_id",
    "device_name",
    "precision",
    "git_commit",
    "git_dirty",
    "data_fingerprint",
    "hpsearch_version",
    "torch_version",
    "cuda_version",
    "optuna_version",
    "python_version",
    "epochs_trained",
    "wall_seconds",
    "peak_memory_bytes",
    "seed",
    "resumed_from",
)
"""Trial user attributes that become tags: what made the trial (see `search.worker.training`)."""


def trial_key(study_uid: str, number: int) -> str:
    return f"{study_uid}/{number}"


def provenance_tags(attrs: dict[str, Any]) -> dict[str, str]:
    """``hpsearch.<attr>`` tags from a trial's user attributes (None left out, structures as
    JSON)."""
    tags = {}
    for key in PROVENANCE_KEYS:
        value = attrs.get(key)
        if value is None:
            continue
        text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        tags[f"hpsearch.{key}"] = text[:5000]
    return tags


@dataclass(frozen=True)
class TrialStarted:
    """A trial starts (or resumes) on a worker."""

    study_uid: str
    study_name: str
    number: int
    params: dict[str, Any]
    metric: str
    reported: dict[int, float] = field(default_factory=dict)
    """Values recorded before (a resumed trial, or an export): sent if the run lacks them."""
    tags: dict[str, str] = field(default_factory=dict)
    started_at: float = field(default_factory=time.time)
    running: bool = True
    """False for `hpsearch export` of a trial that has ended (its run is not reopened)."""
    live: bool = True
    """Sent by the worker that trains the trial (False: by `hpsearch export`)."""

    @property
    def key(self) -> str:
        return trial_key(self.study_uid, self.number)


@dataclass(frozen=True)
class TrialEnded:
    """How a trial ended: complete, pruned at an epoch, or failed with a reason."""

    number: int
    state: State
    value: float | None
    pruned_at: int | None = None
    reason: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    ended_at: float = field(default_factory=time.time)
