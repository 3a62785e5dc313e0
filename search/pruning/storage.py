"""The study as Optuna's pruners read it: the process's trial cache, and rung values written light.

Optuna's pruners decide from a study's trials: successive halving and Hyperband compare the
`completed_rung_k` system attributes of the trials in a bracket; the median pruner compares the
intermediate values of complete trials. Reading whole trials for that through Optuna's storage
(params, attributes and values of every running and queued trial, on every rung of every trial)
was most of a worker's database time. `PruningStorage` answers a pruner's reads from the
process's `TrialCache` (`search.db.trial_changes`: incremental, shared with the samplers'
mirror, so a change of the study is read once per process), and records the rung attributes a
pruner writes with one statement, at once or by a background thread (`flush_writes`);
everything else is Optuna's RDBStorage unchanged. `tests/search/pruning/test_pruning.py` checks
that the decisions are those Optuna makes on its own storage.

Example::

    view = PruningStorage(storage, study)     # a StudyRef, from open_study
    view.refresh()
    trials = view.get_all_trials(study.study_id)
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Container, Sequence
from typing import Any

import optuna
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from search.db.statements import upsert_attributes
from search.db.storage import Storage
from search.db.tables import trial_system_attributes
from search.db.trial_changes import TrialCache
from search.study.studies import StudyRef
from search.study.view import StudyFactsStorage

__all__ = ["PruningStorage"]


class PruningStorage(StudyFactsStorage):
    """A study's storage as pruners need it: trials from the process's `TrialCache`.

    Trials come back with number, state, params, value, system attributes (the
    `completed_rung_*` ones kept up to date) and, for the median pruner, the intermediate
    values of finished trials; user attributes are left empty. Only pruners may read it; the
    methods pruners do not use go to Optuna's storage unchanged.
    """

    def __init__(self, storage: Storage, study: StudyRef) -> None:
        super().__init__(study)  # its id, name and direction: answered without a query
        self._storage = storage
        self._inner = storage.optuna_storage()
        self.cache = TrialCache.of(storage, study.study_id)
        self.cache.need(finished_curves=study.config.pruner.type == "median")
        self._lock = self.cache.lock
        """Held by a decision: the trials and the rung values it reads do not change under it."""
        self._sorted: list[FrozenTrial] | None = None  # the cache's trials by number
        self._sorted_at = -1  # the cache's version they were sorted at
        self.write_in_background = False
        """Rung values are kept in `_pending` and written by `flush_writes` (a worker's
        background thread) instead of at once."""
        self._pending: dict[int, dict[str, Any]] = {}  # trial_id -> attributes not written yet
        self._writing = threading.Lock()

    def listen(self, on_rung_value: Callable[[int, int, str, Any], None]) -> None:
        """Call `on_rung_value(trial id, number, key, value)` for every rung value read or
        written (those known already too)."""
        self.cache.listen(on_rung_value)

    def get_all_trials(
        self,
        study_id: int,
        deepcopy: bool = True,
        states: Container[TrialState] | None = None,
    ) -> list[FrozenTrial]:
        self.cache.refresh()
        with self._lock:
            if self._sorted is None or self._sorted_at != self.cache.version:
                self._sorted_at = self.cache.version
                self._sorted = sorted(self.cache.trials(), key=lambda t: t.number)
            trials = self._sorted
        if states is not None:
            trials = [t for t in trials if t.state in states]
        return trials  # never deep-copied: pruners only read them

    def get_trial(self, trial_id: int) -> FrozenTrial:
        trial = self.cache.get(trial_id)
        if trial is None:
            self.cache.refresh()
            trial = self.cache.get(trial_id)
        if trial is None:
            raise KeyError(trial_id)
        return trial

    def refresh(self) -> None:
        """Read what changed since the last look (decisions meanwhile use what is known)."""
        self.cache.refresh()

    def knows(self, trial_id: int) -> bool:
        return self.cache.get(trial_id) is not None

    def add_claimed(self, trial_id: int, number: int) -> None:
        """A trial this worker just claimed, known without reading it (a new trial has no rung
        values yet; a resumed one is read instead)."""
        self.cache.add_running(trial_id, number)

    def set_trial_system_attr(self, trial_id: int, key: str, value: Any) -> None:
        if self.write_in_background:
            with self._lock:
                self._pending.setdefault(trial_id, {})[key] = value
        else:
            self._write_attributes(trial_id, {key: value})
        self.cache.set_system_attr(trial_id, key, value)

    def flush_writes(self) -> bool:
        """Write the rung values kept for writing in the background; True if there were any.
        A database error leaves the rest for the next call."""
        with self._writing:  # decisions go on while it writes
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
