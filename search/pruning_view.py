"""Pruning decisions with Optuna's own pruners, fed by a light, incremental view of the study.

Optuna's pruners decide from a study's trials: successive halving and Hyperband compare the
`completed_rung_k` system attributes of the trials in a bracket; the median pruner compares the
intermediate values of complete trials. Reading whole trials for that (params, attributes and
values of every running and queued trial, on every rung of every trial) was most of a worker's
database time. `PruningStorage` answers a pruner's reads from two small incremental queries
instead, and records the rung attributes a pruner writes with one statement; everything else is
Optuna's RDBStorage unchanged. `tests/search/test_pruning.py` checks that the decisions are those
Optuna makes on its own storage.

Example::

    pruner = Pruner(storage, study)            # once per worker (a StudyRef, from open_study)
    pruner.should_prune(trial_id, {1: 0.81, 2: 0.84, 3: 0.85})
"""

from __future__ import annotations

import copy
import functools
import json
import threading
from collections.abc import Container, Sequence
from typing import Any

import optuna
import sqlalchemy as sa
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from search.db.statements import bound_ids, in_bound_ids, upsert_attributes
from search.db.tables import (
    stored_float,
    trial_intermediate_values,
    trial_system_attributes,
    trials,
)
from search.pruners import make_pruner
from search.storage import Storage
from search.study import StudyRef

__all__ = ["Pruner", "PruningStorage"]

_STATES = {s.name: s for s in TrialState}


class PruningStorage(optuna.storages.BaseStorage):
    """A study's storage as pruners need it: trial reads are light and incremental.

    Trials come back with number, state, their `completed_rung_*` system attributes and, for the
    median pruner, the intermediate values of finished trials; params, values, user attributes
    and other system attributes are left empty. Only pruners may read it;
    the methods pruners do not use go to Optuna's storage unchanged.
    """

    def __init__(self, storage: Storage, study: StudyRef) -> None:
        self._storage = storage
        self._inner = storage.optuna_storage()
        self._study = study
        self._with_curves = study.config.pruner.type == "median"
        self._directions = [StudyDirection[study.config.study.direction.upper()]]
        self._trials: dict[int, FrozenTrial] = {}  # trial_id -> trial
        self._sorted: list[FrozenTrial] | None = None  # _trials by number, until one changes
        self._unfinished: set[int] = set()
        self._max_id = -1
        self._lock = threading.Lock()

    # Immutable study facts: answered without a query (a _BracketStudy asks on every decision).
    def get_study_id_from_name(self, study_name: str) -> int:
        return self._study.study_id

    def get_study_name_from_id(self, study_id: int) -> str:
        return self._study.name

    def get_study_directions(self, study_id: int) -> list[StudyDirection]:
        return list(self._directions)

    def get_all_trials(
        self,
        study_id: int,
        deepcopy: bool = True,
        states: Container[TrialState] | None = None,
    ) -> list[FrozenTrial]:
        with self._lock:
            self._refresh()
            if self._sorted is None:
                self._sorted = sorted(self._trials.values(), key=lambda t: t.number)
            trials = self._sorted
        if states is not None:
            trials = [t for t in trials if t.state in states]
        return trials  # never deep-copied: pruners only read them

    def get_trial(self, trial_id: int) -> FrozenTrial:
        with self._lock:
            if trial_id not in self._trials:
                self._refresh()
            return self._trials[trial_id]

    def set_trial_system_attr(self, trial_id: int, key: str, value: Any) -> None:
        with self._storage.autocommit() as conn:
            upsert_attributes(conn, trial_system_attributes, trial_id, {key: value})
        with self._lock:
            if trial_id in self._trials:
                # A new object: lists a pruner already holds must not change under it (successive
                # halving adds the trial's own value to the competing ones itself).
                trial = copy.copy(self._trials[trial_id])
                trial.system_attrs = {**trial.system_attrs, key: value}
                self._trials[trial_id] = trial
                self._sorted = None

    # The rest of Optuna's storage interface, unused by pruners, goes to Optuna's storage.
    def create_new_study(
        self, directions: Sequence[StudyDirection], study_name: str | None = None
    ) -> int:
        return self._inner.create_new_study(directions, study_name)

    def delete_study(self, study_id: int) -> None:
        self._inner.delete_study(study_id)

    def set_study_user_attr(self, study_id: int, key: str, value: Any) -> None:
        self._inner.set_study_user_attr(study_id, key, value)

    def set_study_system_attr(self, study_id: int, key: str, value: Any) -> None:
        self._inner.set_study_system_attr(study_id, key, value)

    def get_study_user_attrs(self, study_id: int) -> dict[str, Any]:
        return self._inner.get_study_user_attrs(study_id)

    def get_study_system_attrs(self, study_id: int) -> dict[str, Any]:
        return self._inner.get_study_system_attrs(study_id)

    def get_all_studies(self) -> list[optuna.study.FrozenStudy]:
        return self._inner.get_all_studies()

    def create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None) -> int:
        return self._inner.create_new_trial(study_id, template_trial)

    def set_trial_param(
        self, trial_id: int, param_name: str, param_value_internal: float, distribution: Any
    ) -> None:
        self._inner.set_trial_param(trial_id, param_name, param_value_internal, distribution)

    def set_trial_state_values(
        self, trial_id: int, state: TrialState, values: Sequence[float] | None = None
    ) -> bool:
        return self._inner.set_trial_state_values(trial_id, state, values)

    def set_trial_intermediate_value(
        self, trial_id: int, step: int, intermediate_value: float
    ) -> None:
        self._inner.set_trial_intermediate_value(trial_id, step, intermediate_value)

    def set_trial_user_attr(self, trial_id: int, key: str, value: Any) -> None:
        self._inner.set_trial_user_attr(trial_id, key, value)

    def _refresh(self) -> None:
        """Read trials that are new or were unfinished last time; finished ones never change."""
        with self._storage.autocommit() as conn:
            dialect = conn.dialect.name
            # One round trip: the trials and the rung attributes successive halving compares.
            joined = conn.execute(
                _changed_trials_statement(dialect),
                {
                    "study": self._study.study_id,
                    "max_seen": self._max_id,
                    "ids": bound_ids(dialect, sorted(self._unfinished)),
                },
            ).all()
            if not joined:
                return
            rows = {r.trial_id: r for r in joined}.values()
            attrs: dict[int, list[tuple[str, str]]] = {}
            for r in joined:
                if r.key is not None:
                    attrs.setdefault(r.trial_id, []).append((r.key, r.value_json))
            # Only the median pruner reads finished trials' curves: the others skip the rows.
            finished = [r.trial_id for r in rows if _STATES[r.state].is_finished()]
            steps: dict[int, list[tuple[int, float | None, str]]] = {}
            if self._with_curves and finished:
                for trial_id, step, value, kind in conn.execute(
                    _curves_statement(dialect), {"ids": bound_ids(dialect, finished)}
                ):
                    steps.setdefault(trial_id, []).append((step, value, kind))
        for r in rows:
            state = _STATES[r.state]
            system_attrs = {k: json.loads(v) for k, v in attrs.get(r.trial_id, [])}
            known = self._trials.get(r.trial_id)
            if known is not None and known.state == state and known.system_attrs == system_attrs:
                continue  # most unfinished trials have not changed since the last look
            self._sorted = None
            self._trials[r.trial_id] = _light_trial(
                r.trial_id,
                r.number,
                state,
                system_attrs,
                {step: stored_float(v, kind) for step, v, kind in steps.get(r.trial_id, [])},
            )
            if state.is_finished():
                self._unfinished.discard(r.trial_id)
            else:
                self._unfinished.add(r.trial_id)
            self._max_id = max(self._max_id, r.trial_id)


class Pruner:
    """The study's pruner, asked through `PruningStorage`: one per worker process."""

    def __init__(self, storage: Storage, study: StudyRef) -> None:
        self.view = PruningStorage(storage, study)
        self.pruner = make_pruner(study.config)
        self.study = optuna.Study(
            study_name=study.name,
            storage=self.view,
            pruner=self.pruner,
            sampler=optuna.samplers.RandomSampler(),
        )

    def should_prune(self, trial_id: int, intermediate_values: dict[int, float]) -> bool:
        """Optuna's decision for a running trial that has reported these values."""
        known = self.view.get_trial(trial_id)
        trial = _light_trial(
            trial_id,
            known.number,
            TrialState.RUNNING,
            dict(known.system_attrs),
            dict(intermediate_values),
        )
        return bool(self.pruner.prune(self.study, trial))


def _light_trial(
    trial_id: int,
    number: int,
    state: TrialState,
    system_attrs: dict[str, Any],
    intermediate_values: dict[int, float],
) -> FrozenTrial:
    """A trial with what pruners read; params, values and user attributes left empty."""
    return FrozenTrial(
        number=number,
        state=state,
        value=None,
        values=None,
        datetime_start=None,
        datetime_complete=None,
        params={},
        distributions={},
        user_attrs={},
        system_attrs=system_attrs,
        intermediate_values=intermediate_values,
        trial_id=trial_id,
    )


@functools.cache
def _changed_trials_statement(dialect: str) -> sa.Select:
    """Trials created since the last look, or unfinished then, with their rung attributes."""
    t, a = trials, trial_system_attributes
    rung = sa.and_(
        a.c.trial_id == t.c.trial_id, a.c.key.startswith("completed_rung_", autoescape=True)
    )
    return (
        sa.select(t.c.trial_id, t.c.number, t.c.state, a.c.key, a.c.value_json)
        .select_from(t.outerjoin(a, rung))
        .where(
            t.c.study_id == sa.bindparam("study"),
            sa.or_(t.c.trial_id > sa.bindparam("max_seen"), in_bound_ids(dialect, t.c.trial_id)),
        )
    )


@functools.cache
def _curves_statement(dialect: str) -> sa.Select:
    v = trial_intermediate_values
    return sa.select(
        v.c.trial_id, v.c.step, v.c.intermediate_value, v.c.intermediate_value_type
    ).where(in_bound_ids(dialect, v.c.trial_id))
