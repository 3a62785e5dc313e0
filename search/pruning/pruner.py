"""Pruning decisions with Optuna's own pruners, fed by the study as pruners read it.

Optuna's pruners read the study through `PruningStorage` (`search.pruning.storage`: the
process's incremental trial cache, rung values written light); `tests/search/pruning/
test_pruning.py` checks that the decisions are those Optuna makes on its own storage.

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

import logging
import math
import threading
from collections.abc import Callable
from typing import Any

import optuna
from optuna.trial import TrialState

from search.db.storage import Storage, is_transient
from search.db.trial_changes import RUNG_PREFIX, light_trial
from search.pruning.promotion import RungTable
from search.pruning.pruners import HyperbandPruner, make_pruner
from search.pruning.storage import PruningStorage
from search.study.studies import StudyRef

__all__ = ["Pruner", "PruningStorage", "RungValues"]

logger = logging.getLogger("search.pruning")


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
            self.view.listen(self._rung_values.add)
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
                trial = light_trial(
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
