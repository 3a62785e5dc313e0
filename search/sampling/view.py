"""A study's trials kept in memory for the samplers that learn from them (TPE, CMA-ES, GP).

Optuna's samplers read the whole study before every sample. Through Optuna's storage that is a
reload of every trial that changed, attribute by attribute, and every suggested param is its own
write: about 35 commits per trial, under the study's sampling lock, while the other workers wait
for the queue. `StudyMirror` keeps the trials in this process instead, refreshed incrementally
(`refresh`: `search.db.trial_changes`, the trials created since the last look and the ones
unfinished then, a few indexed reads; a finished trial never changes), and the samplers write
their params and attributes into new trials held here until `take_sampled` hands them over, to
be inserted all at once (`search.db.trial_rows.insert_sampled_trials`).

Queued (WAITING) trials that have their params are shown to the samplers as RUNNING: they will
run, and TPE's constant liar should count them as it counts running ones, so that a batch
sampled under one lock, and the trials sampled ahead of it, spread out instead of piling onto the
current best point.

Example::

    mirror = StudyMirror(storage, study)      # once per process (a StudyRef, from open_study)
    mirror.refresh()
    trial_id = mirror.new_trial(number=41)    # provisional: negative, in memory only
    trial = optuna.Trial(mirror.study(make_sampler(config, 41)), trial_id)
    params = {p.name: suggest(trial, p) for p in config.space}
    insert_sampled_trials(storage, study_id, worker_id, mirror.take_sampled())
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Container, Sequence
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, json_to_distribution
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from search.db.storage import Storage
from search.db.tables import stored_float
from search.db.trial_changes import (
    STATES,
    ChangeCursor,
    read_changed_trials,
    read_curves,
    read_params,
    read_system_attrs,
    read_values,
)
from search.db.trial_rows import SampledTrial
from search.pruning.pruners import make_pruner
from search.sampling.multifidelity import trial_as, uses_fidelities
from search.study.studies import StudyRef
from search.study.view import StudyFactsStorage

__all__ = ["StudyMirror"]


class StudyMirror(StudyFactsStorage):
    """A study's trials in memory, for sampling; refreshed incrementally by `refresh`.

    Trials hold number, state, params, values, system attributes and (pruned trials, which TPE
    ranks by their last report) intermediate values; user attributes are left empty. Study
    attributes go to Optuna's storage. Only samplers may use it, from one thread at a time.
    """

    def __init__(self, storage: Storage, study: StudyRef) -> None:
        super().__init__(study)
        self._storage = storage
        self._trials: dict[int, FrozenTrial] = {}  # trial_id -> trial, from the database
        self._sampled: dict[int, FrozenTrial] = {}  # provisional id (< 0) -> trial in memory
        self._sorted: list[FrozenTrial] | None = None
        self._cursor = ChangeCursor(study.study_id)
        self._distributions: dict[str, BaseDistribution] = {}  # JSON -> parsed, parsed once
        self.all_curves = uses_fidelities(study.config)
        """Every trial's reports, running and paused trials' kept up to date, for samplers that
        learn across fidelities (search.sampling.multifidelity)."""

    # -- the mirror -----------------------------------------------------------------------------

    def refresh(self) -> int:
        """Read what changed since the last look; returns how many trials changed."""
        with self._storage.read() as conn:
            rows = read_changed_trials(conn, self._cursor)
            changed = [r for r in rows if self._changed(r.trial_id, r.state)]
            grown = self._refresh_curves(conn, changed) if self.all_curves else 0
            if not changed:
                return grown
            ids = [r.trial_id for r in changed]
            params: dict[int, tuple[dict[str, Any], dict[str, BaseDistribution]]] = {}
            for trial_id, name, value, dist_json in read_params(conn, ids):
                values, dists = params.setdefault(trial_id, ({}, {}))
                dist = self._distribution(dist_json)
                values[name] = dist.to_external_repr(value)
                dists[name] = dist
            attrs: dict[int, dict[str, Any]] = {}
            for trial_id, key, value_json in read_system_attrs(conn, ids):
                attrs.setdefault(trial_id, {})[key] = json.loads(value_json)
            finished = [r.trial_id for r in changed if STATES[r.state].is_finished()]
            unfinished_ids = [r.trial_id for r in changed if not STATES[r.state].is_finished()]
            values_of: dict[int, float] = {}
            curves: dict[int, dict[int, float]] = {}
            if finished:
                for trial_id, value, kind in read_values(conn, finished):
                    values_of[trial_id] = stored_float(value, kind)
                pruned = [
                    r.trial_id
                    for r in changed
                    if r.state == "PRUNED" or (self.all_curves and r.state == "COMPLETE")
                ]
                if pruned:
                    for trial_id, step, value, kind in read_curves(conn, pruned):
                        curves.setdefault(trial_id, {})[step] = stored_float(value, kind)
            if self.all_curves and unfinished_ids:  # resumed or paused trials have reports
                for trial_id, step, value, kind in read_curves(conn, unfinished_ids):
                    curves.setdefault(trial_id, {})[step] = stored_float(value, kind)
        for r in changed:
            values, dists = params.get(r.trial_id, ({}, {}))
            state = STATES[r.state]
            value = values_of.get(r.trial_id)
            self._trials[r.trial_id] = FrozenTrial(
                number=r.number,
                state=state,
                value=value,
                values=None,
                datetime_start=r.datetime_start,
                datetime_complete=r.datetime_complete,
                params=values,
                distributions=dists,
                user_attrs={},
                system_attrs=attrs.get(r.trial_id, {}),
                intermediate_values=curves.get(r.trial_id, {}),
                trial_id=r.trial_id,
            )
            self._cursor.saw(r.trial_id, state)
        self._sorted = None
        return len(changed)

    def _refresh_curves(self, conn: Any, changed: Sequence[Any]) -> int:
        """Read the reports of the unfinished trials (running, queued, paused) that are not
        re-read whole; returns how many have new reports."""
        ids = sorted(self._cursor.unfinished - {r.trial_id for r in changed})
        if not ids:
            return 0
        curves: dict[int, dict[int, float]] = {}
        for trial_id, step, value, kind in read_curves(conn, ids):
            curves.setdefault(trial_id, {})[step] = stored_float(value, kind)
        grown = 0
        for trial_id, curve in curves.items():
            trial = self._trials.get(trial_id)
            if trial is not None and curve != trial.intermediate_values:
                trial.intermediate_values = curve
                grown += 1
        if grown:
            self._sorted = None
        return grown

    def new_trial(self, number: int) -> int:
        """A trial to sample into, held here (RUNNING) until `take_sampled`; its provisional id."""
        trial_id = -1 - len(self._sampled)
        self._sampled[trial_id] = FrozenTrial(
            number=number,
            state=TrialState.RUNNING,
            value=None,
            values=None,
            datetime_start=datetime.datetime.now(),
            datetime_complete=None,
            params={},
            distributions={},
            user_attrs={},
            system_attrs={},
            intermediate_values={},
            trial_id=trial_id,
        )
        self._sorted = None
        return trial_id

    def take_sampled(self) -> list[SampledTrial]:
        """The trials sampled since the last call, in number order; they leave the mirror (the
        next `refresh` reads them back from the database once inserted)."""
        out = [SampledTrial(t) for t in sorted(self._sampled.values(), key=lambda t: t.number)]
        self._sampled.clear()
        self._sorted = None
        return out

    def study(self, sampler: optuna.samplers.BaseSampler) -> optuna.Study:
        """An Optuna study on this mirror, sampling with `sampler` (one per trial: Optuna's
        per-ask cache of the trials starts empty)."""
        return optuna.Study(
            study_name=self._study.name,
            storage=self,
            sampler=sampler,
            # Optuna's Hyperband shows a trial's sampler only its bracket's trials; samplers
            # that learn across fidelities see every trial.
            pruner=optuna.pruners.NopPruner()
            if self.all_curves
            else make_pruner(self._study.config),
        )

    def _changed(self, trial_id: int, state: str) -> bool:
        known = self._trials.get(trial_id)
        if known is None:
            return True
        if known.params and not known.state.is_finished() and not STATES[state].is_finished():
            return False  # queued or running, with its params: samplers see it running either way
        return known.state.name != state

    def _distribution(self, dist_json: str) -> BaseDistribution:
        dist = self._distributions.get(dist_json)
        if dist is None:
            dist = self._distributions[dist_json] = json_to_distribution(dist_json)
        return dist

    def _all(self) -> list[FrozenTrial]:
        if self._sorted is None:
            shown = [_queued_as_running(t) for t in self._trials.values()]
            self._sorted = sorted(
                [*shown, *self._sampled.values()], key=lambda t: (t.number, t._trial_id)
            )
        return self._sorted

    # -- what samplers read ---------------------------------------------------------------------

    def get_all_trials(
        self,
        study_id: int,
        deepcopy: bool = True,
        states: Container[TrialState] | None = None,
    ) -> list[FrozenTrial]:
        trials = self._all()
        if states is not None:
            trials = [t for t in trials if t.state in states]
        return trials  # never deep-copied: samplers only read them

    def get_trial(self, trial_id: int) -> FrozenTrial:
        if trial_id in self._sampled:
            return self._sampled[trial_id]
        return _queued_as_running(self._trials[trial_id])

    def get_study_user_attrs(self, study_id: int) -> dict[str, Any]:
        return self._optuna().get_study_user_attrs(study_id)

    def get_study_system_attrs(self, study_id: int) -> dict[str, Any]:
        return self._optuna().get_study_system_attrs(study_id)

    def get_all_studies(self) -> list[optuna.study.FrozenStudy]:
        return self._optuna().get_all_studies()

    # -- what samplers write: into the trials being sampled ---------------------------------------

    def set_trial_param(
        self,
        trial_id: int,
        param_name: str,
        param_value_internal: float,
        distribution: BaseDistribution,
    ) -> None:
        trial = self._sampled[trial_id]
        trial.params = {
            **trial.params,
            param_name: distribution.to_external_repr(param_value_internal),
        }
        trial.distributions = {**trial.distributions, param_name: distribution}

    def set_trial_system_attr(self, trial_id: int, key: str, value: Any) -> None:
        trial = self._sampled[trial_id]
        trial.system_attrs = {**trial.system_attrs, key: value}

    def set_trial_user_attr(self, trial_id: int, key: str, value: Any) -> None:
        trial = self._sampled[trial_id]
        trial.user_attrs = {**trial.user_attrs, key: value}

    def create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None) -> int:
        raise NotImplementedError("the mirror's trials are made by new_trial")

    def set_trial_state_values(
        self, trial_id: int, state: TrialState, values: Sequence[float] | None = None
    ) -> bool:
        raise NotImplementedError("samplers do not finish trials")

    def set_trial_intermediate_value(
        self, trial_id: int, step: int, intermediate_value: float
    ) -> None:
        raise NotImplementedError("samplers do not report")

    # Study-level writes (a sampler's counters) go to Optuna's storage, shared by every process.
    def set_study_user_attr(self, study_id: int, key: str, value: Any) -> None:
        self._optuna().set_study_user_attr(study_id, key, value)

    def set_study_system_attr(self, study_id: int, key: str, value: Any) -> None:
        self._optuna().set_study_system_attr(study_id, key, value)

    def create_new_study(
        self, directions: Sequence[StudyDirection], study_name: str | None = None
    ) -> int:
        raise NotImplementedError("the mirror holds one study")

    def delete_study(self, study_id: int) -> None:
        raise NotImplementedError("the mirror holds one study")

    def _optuna(self) -> optuna.storages.BaseStorage:
        return self._storage.optuna_storage()


def _queued_as_running(trial: FrozenTrial) -> FrozenTrial:
    """A queued trial with its params, as samplers should count it: running."""
    if trial.state != TrialState.WAITING or not trial.params:
        return trial
    return trial_as(trial, TrialState.RUNNING, None)
