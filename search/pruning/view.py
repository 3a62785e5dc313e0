"""Pruning decisions with Optuna's own pruners, fed by a light, incremental view of the study.

Optuna's pruners decide from a study's trials: successive halving and Hyperband compare the
`completed_rung_k` system attributes of the trials in a bracket; the median pruner compares the
intermediate values of complete trials. Reading whole trials for that (params, attributes and
values of every running and queued trial, on every rung of every trial) was most of a worker's
database time. `PruningStorage` answers a pruner's reads from two small incremental queries
(`search.db.trial_changes`) instead, and records the rung attributes a pruner writes with one
statement; everything else is Optuna's RDBStorage unchanged. `tests/search/pruning/test_pruning.py`
checks that the decisions are those Optuna makes on its own storage.

Successive halving and Hyperband decide from `RungValues` instead of scanning trials: per bracket
and rung, the sorted values of the trials that completed it, kept up to date as the view
refreshes. A decision is a binary search (`_is_trial_promotable_to_next_rung` on a sorted list,
without building and sorting it), so it costs the same at 100 trials and at 10,000.

In a worker (`Pruner(..., refresh_s=...)`) nothing of a decision waits for the database: the
view is refreshed by a background thread (after every decision, and at least every
`refresh_s` while a trial runs), and the rung value a decision records is written by that thread
too. A decision is then Optuna's for the study as it was at most `refresh_s` ago (a value another
worker recorded in that moment is missed, as it is when it lands just after Optuna's own read);
a trial that must stop at a rung still stops there.

Example::

    pruner = Pruner(storage, study)            # once per worker (a StudyRef, from open_study)
    pruner.should_prune(trial_id, {1: 0.81, 2: 0.84, 3: 0.85})
"""

from __future__ import annotations

import copy
import json
import logging
import math
import threading
from collections.abc import Callable, Container, Sequence
from typing import Any

import optuna
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from search.db.statements import upsert_attributes
from search.db.storage import Storage, is_transient
from search.db.tables import stored_float, trial_system_attributes
from search.db.trial_changes import (
    RUNG_PREFIX,
    STATES,
    ChangeCursor,
    read_changed_trials,
    read_curves,
)
from search.pruning.promotion import RungTable
from search.pruning.pruners import HyperbandPruner, make_pruner
from search.study.studies import StudyRef
from search.study.view import StudyFactsStorage

__all__ = ["Pruner", "PruningStorage", "RungValues"]

logger = logging.getLogger("search.pruning")


class PruningStorage(StudyFactsStorage):
    """A study's storage as pruners need it: trial reads are light and incremental.

    Trials come back with number, state, their `completed_rung_*` system attributes and, for the
    median pruner, the intermediate values of finished trials; params, values, user attributes
    and other system attributes are left empty. Only pruners may read it;
    the methods pruners do not use go to Optuna's storage unchanged.
    """

    def __init__(self, storage: Storage, study: StudyRef) -> None:
        super().__init__(study)  # its id, name and direction: answered without a query
        self._storage = storage
        self._inner = storage.optuna_storage()
        self._with_curves = study.config.pruner.type == "median"
        self._trials: dict[int, FrozenTrial] = {}  # trial_id -> trial
        self._sorted: list[FrozenTrial] | None = None  # _trials by number, until one changes
        self._cursor = ChangeCursor(study.study_id)
        self._lock = threading.RLock()
        self.on_rung_value: Callable[[int, int, str, Any], None] | None = None
        """Called with (trial id, number, key, value) for every rung value read or written."""
        self.write_in_background = False
        """Rung values are kept in `_pending` and written by `flush_writes` (a worker's
        background thread) instead of at once."""
        self._pending: dict[int, dict[str, Any]] = {}  # trial_id -> attributes not written yet

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

    def refresh(self) -> None:
        """Read what changed since the last look (decisions meanwhile use what is known)."""
        self._refresh()

    def knows(self, trial_id: int) -> bool:
        with self._lock:
            return trial_id in self._trials

    def add_claimed(self, trial_id: int, number: int) -> None:
        """A trial this worker just claimed, known without reading it (a new trial has no rung
        values yet; a resumed one is read instead)."""
        with self._lock:
            if trial_id not in self._trials:
                self._trials[trial_id] = _light_trial(trial_id, number, TrialState.RUNNING, {}, {})
                self._cursor.unfinished.add(trial_id)
                self._sorted = None

    def set_trial_system_attr(self, trial_id: int, key: str, value: Any) -> None:
        if self.write_in_background:
            with self._lock:
                self._pending.setdefault(trial_id, {})[key] = value
        else:
            self._write_attributes(trial_id, {key: value})
        with self._lock:
            if trial_id in self._trials:
                # A new object: lists a pruner already holds must not change under it (successive
                # halving adds the trial's own value to the competing ones itself).
                trial = copy.copy(self._trials[trial_id])
                trial.system_attrs = {**trial.system_attrs, key: value}
                self._trials[trial_id] = trial
                self._sorted = None
                if self.on_rung_value is not None and key.startswith(RUNG_PREFIX):
                    self.on_rung_value(trial_id, trial.number, key, value)

    def flush_writes(self) -> bool:
        """Write the rung values kept for writing in the background; True if there were any.
        A database error leaves the rest for the next call."""
        # Called from the thread that refreshes: no refresh reads the rows meanwhile. Decisions
        # go on while it writes.
        with self._lock:
            pending = {trial_id: dict(attrs) for trial_id, attrs in self._pending.items()}
        for trial_id, attrs in pending.items():
            self._write_attributes(trial_id, attrs)
            with self._lock:
                left = self._pending.get(trial_id, {})
                for key, value in attrs.items():
                    if left.get(key) == value:
                        del left[key]
                if not left:
                    self._pending.pop(trial_id, None)
        return bool(pending)

    def has_pending_writes(self) -> bool:
        with self._lock:
            return bool(self._pending)

    def _write_attributes(self, trial_id: int, attrs: dict[str, Any]) -> None:
        with self._storage.autocommit() as conn:
            upsert_attributes(conn, trial_system_attributes, trial_id, attrs)

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
        """Read trials that are new or were unfinished last time; finished ones never change.
        The lock is not held while the database answers."""
        with self._lock:
            cursor = self._cursor.snapshot()
        with self._storage.autocommit() as conn:
            # One round trip: the trials and the rung attributes successive halving compares.
            joined = read_changed_trials(conn, cursor, with_rungs=True)
            if not joined:
                return
            rows = {r.trial_id: r for r in joined}.values()
            attrs: dict[int, list[tuple[str, str]]] = {}
            for r in joined:
                if r.key is not None:
                    attrs.setdefault(r.trial_id, []).append((r.key, r.value_json))
            # Only the median pruner reads finished trials' curves: the others skip the rows.
            finished = [r.trial_id for r in rows if STATES[r.state].is_finished()]
            steps: dict[int, list[tuple[int, float | None, str]]] = {}
            if self._with_curves and finished:
                for trial_id, step, value, kind in read_curves(conn, finished):
                    steps.setdefault(trial_id, []).append((step, value, kind))
        with self._lock:
            self._apply(rows, attrs, steps)

    def _apply(
        self,
        rows: Any,
        attrs: dict[int, list[tuple[str, str]]],
        steps: dict[int, list[tuple[int, float | None, str]]],
    ) -> None:
        for r in rows:
            state = STATES[r.state]
            system_attrs = {k: json.loads(v) for k, v in attrs.get(r.trial_id, [])}
            system_attrs.update(self._pending.get(r.trial_id, {}))  # decided, not written yet
            known = self._trials.get(r.trial_id)
            if known is not None and known.state == state and known.system_attrs == system_attrs:
                continue  # most unfinished trials have not changed since the last look
            if self.on_rung_value is not None:
                for key, value in system_attrs.items():
                    if key.startswith(RUNG_PREFIX):
                        self.on_rung_value(r.trial_id, r.number, key, value)
            self._sorted = None
            self._trials[r.trial_id] = _light_trial(
                r.trial_id,
                r.number,
                state,
                system_attrs,
                {step: stored_float(v, kind) for step, v, kind in steps.get(r.trial_id, [])},
            )
            self._cursor.saw(r.trial_id, state)


class RungValues:
    """Per Hyperband bracket and rung, the values of the trials that completed it, on a
    `RungTable` (the rung table promotion-based ASHA ranks on too): what successive halving
    compares a trial's value with, kept sorted as values arrive."""

    def __init__(self, bracket_of: Callable[[int], int], *, maximize: bool) -> None:
        self._bracket_of = bracket_of  # trial number -> bracket
        self._table = RungTable(maximize=maximize)

    def add(self, trial_id: int, number: int, key: str, value: Any) -> None:
        """Record a trial's value at a rung (again: no change; changed: replaced)."""
        if not isinstance(value, (int, float)) or math.isnan(value):
            return  # successive halving prunes a NaN before recording it
        self._table.record(trial_id, self._bracket_of(number), _rung(key), float(value))

    def rank(self, trial_id: int, number: int, key: str, value: float) -> tuple[int, int]:
        """(competing values, how many of them are strictly better than `value`): the trial's
        own value counted once, as successive halving counts it."""
        return self._table.standing(trial_id, self._bracket_of(number), _rung(key), value)


def _rung(key: str) -> int:
    return int(key.removeprefix(RUNG_PREFIX))


class Pruner:
    """The study's pruner, asked through `PruningStorage`: one per worker process.

    With `refresh_s`, decisions wait for nothing: the view is refreshed and rung values are
    written by a background thread (`begin_trial`, `end_trial` and `close` drive it).
    """

    def __init__(self, storage: Storage, study: StudyRef, *, refresh_s: float | None = None):
        self.view = PruningStorage(storage, study)
        self.pruner = make_pruner(study.config)
        self.study = optuna.Study(
            study_name=study.name,
            storage=self.view,
            pruner=self.pruner,
            sampler=optuna.samplers.RandomSampler(),
        )
        self._maximize = study.config.study.direction == "maximize"
        self._rung_values: RungValues | None = None
        if isinstance(self.pruner, (HyperbandPruner, optuna.pruners.SuccessiveHalvingPruner)):
            self._rung_values = RungValues(self._bracket_of, maximize=self._maximize)
            self.view.on_rung_value = self._rung_values.add
        self._refresh_s = refresh_s
        self._active = False  # a trial is running: keep its view fresh
        self._closed = False
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        if refresh_s is not None:
            self.view.write_in_background = True
            self._thread = threading.Thread(target=self._background, name="pruning", daemon=True)
            self._thread.start()

    def should_prune(self, trial_id: int, intermediate_values: dict[int, float]) -> bool:
        """Optuna's decision for a running trial that has reported these values."""
        if self._thread is None:
            self.view.refresh()
        try:
            with self.view._lock:
                known = self.view.get_trial(trial_id)
                if self._rung_values is not None:
                    return self._halving_decision(
                        trial_id, known.number, known.system_attrs, intermediate_values
                    )
                trial = _light_trial(
                    trial_id,
                    known.number,
                    TrialState.RUNNING,
                    dict(known.system_attrs),
                    dict(intermediate_values),
                )
                return bool(self.pruner.prune(self.study, trial))
        finally:
            self._wake.set()  # the next decision reads what changed meanwhile

    def begin_trial(self, trial_id: int, number: int, *, resumed: bool) -> None:
        """This worker runs trial `trial_id` now: a resumed trial's rung values are read (it
        may have passed rungs already), a new one is known without a read."""
        if resumed:
            self.view.refresh()
        self.view.add_claimed(trial_id, number)
        self._active = True
        self._wake.set()

    def end_trial(self) -> None:
        self._active = False
        self._wake.set()

    def close(self) -> None:
        """Stop the background thread; write what it has not written yet."""
        self._closed = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            self.view.flush_writes()
        except Exception as exc:
            if not is_transient(exc):
                raise
            logger.warning("could not record the last pruning rung values: %s", exc)

    def _background(self) -> None:
        assert self._refresh_s is not None
        while not self._closed:
            self._wake.wait(self._refresh_s)
            self._wake.clear()
            if self._closed:
                return
            try:
                self.view.flush_writes()
                if self._active:
                    self.view.refresh()
            except Exception as exc:
                # Decisions go on with what the view holds; the next round tries again.
                if not is_transient(exc):
                    logger.exception("refreshing the pruning view failed")
                if not self._closed:
                    self._wake.wait(self._refresh_s)

    def _bracket_of(self, number: int) -> int:
        if not isinstance(self.pruner, HyperbandPruner):
            return 0
        return self.pruner.bracket_of(self.study, number)

    def _halving(self, number: int) -> optuna.pruners.SuccessiveHalvingPruner:
        if isinstance(self.pruner, HyperbandPruner):
            return self.pruner.halving_pruner(self.study, number)
        return self.pruner  # type: ignore[return-value]

    def _halving_decision(
        self,
        trial_id: int,
        number: int,
        system_attrs: dict[str, Any],
        values: dict[int, float],
    ) -> bool:
        """Optuna's `SuccessiveHalvingPruner.prune` (in the trial's Hyperband bracket), with
        the competing values counted in `RungValues` instead of gathered and sorted."""
        if not values:
            return False
        step = max(values)
        value = values[step]
        halving = self._halving(number)
        min_resource = halving._min_resource
        assert isinstance(min_resource, int)
        rate, factor = halving._min_early_stopping_rate, halving._reduction_factor
        rung = 0
        while f"{RUNG_PREFIX}{rung}" in system_attrs:
            rung += 1
        assert self._rung_values is not None
        while True:
            if step < min_resource * factor ** (rate + rung):
                return False
            if math.isnan(value):
                return True
            key = f"{RUNG_PREFIX}{rung}"
            competing, better = self._rung_values.rank(trial_id, number, key, value)
            self.view.set_trial_system_attr(trial_id, key, value)
            if competing <= halving._bootstrap_count:
                return True
            promotable = max(0, competing // factor - 1)
            if better > promotable:
                return True
            rung += 1


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
