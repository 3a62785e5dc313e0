"""Enqueue known configurations into a study (`search.db.enqueued` says how they run next)."""

from __future__ import annotations

from typing import Any

from optuna.trial import TrialState, create_trial

from search.db.enqueued import ENQUEUED_ATTR, replace_next_queued
from search.db.storage import Storage
from search.sampling.samplers import distribution
from search.study.studies import StudyRef

__all__ = ["enqueue_configuration", "enqueue_configured"]

_COUNTED_SAMPLERS = ("grid", "qmc")
"""Samplers whose queued points are study-wide counters: a queued point is never replaced."""


def enqueue_configuration(storage: Storage, study: StudyRef, params: dict[str, Any]) -> int:
    """Put `params` (checked against the space) next in the study's queue; returns the number of
    the trial that will run them."""
    by_name = {p.name: p for p in study.config.space}
    if study.config.study.sampler not in _COUNTED_SAMPLERS:
        internal = {}
        for name, value in params.items():
            dist = distribution(by_name[name])
            internal[name] = (dist.to_internal_repr(value), dist)
        number = replace_next_queued(storage, study.study_id, internal)
        if number is not None:
            return number
    return _new_trial(storage, study, params)


def enqueue_configured(storage: Storage, study: StudyRef) -> list[int]:
    """A new study's ``[[study.enqueue]]`` configurations, as its first trials."""
    return [_new_trial(storage, study, dict(params)) for params in study.config.enqueue]


def _new_trial(storage: Storage, study: StudyRef, params: dict[str, Any]) -> int:
    """A WAITING trial with fixed params, as Optuna's `enqueue_trial` makes it (the worker that
    claims it samples the params it does not name)."""
    optuna_storage = storage.optuna_storage()
    template = create_trial(
        state=TrialState.WAITING,
        system_attrs={"fixed_params": params, ENQUEUED_ATTR: params},
    )
    trial_id = optuna_storage.create_new_trial(study.study_id, template_trial=template)
    return optuna_storage.get_trial_number_from_id(trial_id)
