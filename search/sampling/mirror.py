"""A study's trials kept in memory for the samplers that learn from them (TPE, CMA-ES, GP).

Optuna's samplers read the whole study before every sample. Through Optuna's storage that is a
reload of every trial that changed, attribute by attribute, and every suggested param is its own
write: about 35 commits per trial, under the study's sampling lock, while the other workers wait
for the queue. `StudyMirror` shows the samplers the process's trial cache instead
(`search.db.trial_changes.TrialCache`, refreshed incrementally: the trials created since the
last look and the ones unfinished then, a few indexed reads; a finished trial never changes;
the pruners' view reads the same cache), and the samplers write
their params and attributes into new trials held here until `take_sampled` hands them over, to
be inserted all at once (`search.db.trial_rows.insert_sampled_trials`).

The mirror keeps the trials sorted as samplers read them, updated from what changed in the cache
(`TrialCache.changes`), and hands the trials that changed to the bounded view of a long study
(`trial_changes`, search.sampling.bounded): nothing per sample grows with the study's size.

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

import bisect
import datetime
from collections.abc import Container, Sequence
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from search.db.storage import Storage
from search.db.trial_changes import TrialCache
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
        self._sampled: dict[int, FrozenTrial] = {}  # provisional id (< 0) -> trial in memory
        # The cache's trials as samplers see them, sorted by (number, trial id), kept up to date
        # from what changed in the cache (`TrialCache.changes`), not rebuilt per sample.
        self._shown: list[FrozenTrial] = []
        self._keys: list[tuple[int, int]] = []  # (number, trial id) of each of `_shown`
        self._token: tuple[int, int] | None = None  # where the last `TrialCache.changes` ended
        self._sorted: list[FrozenTrial] | None = None  # `_shown` and `_sampled`, merged
        # The trials shown that changed, in order, for readers that keep their own index of
        # the study (`trial_changes`; search.sampling.bounded).
        self._feed: list[FrozenTrial] = []
        self._feed_epoch = 0
        self.all_curves = uses_fidelities(study.config)
        """Every trial's reports, running and paused trials' kept up to date, for samplers that
        learn across fidelities (search.sampling.multifidelity)."""
        self.cache = TrialCache.of(storage, study.study_id)
        self.cache.need(finished_curves=self.all_curves, live_curves=self.all_curves)

    # -- the mirror -----------------------------------------------------------------------------

    def refresh(self) -> int:
        """Read what changed since the last look; returns how many trials changed."""
        return self.cache.refresh()

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
        self._note(self._sampled[trial_id])
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

    def _all(self) -> list[FrozenTrial]:
        token, changed, whole = self.cache.changes(self._token)
        self._token = token
        if whole:
            shown = sorted(
                (s for s in map(_shown_as, changed) if s is not None), key=_number_and_id
            )
            self._shown, self._keys = shown, [_number_and_id(t) for t in shown]
            self._feed, self._feed_epoch = [], self._feed_epoch + 1
            self._sorted = None
        elif changed:
            # A new list (a reader may hold the last one): a copy, then the changed trials.
            shown, keys = list(self._shown), list(self._keys)
            for trial in changed:
                key = _number_and_id(trial)
                now = _shown_as(trial)
                i = bisect.bisect_left(keys, key)
                there = i < len(keys) and keys[i] == key
                if now is None:
                    if there:
                        del shown[i], keys[i]
                    continue
                if there:
                    shown[i] = now
                else:
                    shown.insert(i, now)
                    keys.insert(i, key)
                self._note(now)
            self._shown, self._keys = shown, keys
            self._sorted = None
        if self._sorted is None:
            sampled = sorted(self._sampled.values(), key=_number_and_id)
            if not sampled:
                self._sorted = self._shown
            elif not self._keys or self._keys[-1] < _number_and_id(sampled[0]):
                self._sorted = [*self._shown, *sampled]
            else:
                self._sorted = sorted([*self._shown, *sampled], key=_number_and_id)
        return self._sorted

    def _note(self, trial: FrozenTrial) -> None:
        self._feed.append(trial)
        # Bounded (it holds trials' objects): a reader behind a restart looks at every trial
        # once, which costs about what half a study's changes cost it through the feed.
        if len(self._feed) > len(self._keys) // 2 + 1024:
            self._feed, self._feed_epoch = [], self._feed_epoch + 1

    def trial_changes(
        self, since: tuple[int, int] | None
    ) -> tuple[tuple[int, int], list[FrozenTrial] | None]:
        """The trials shown (by the last `get_all_trials`) that were added or replaced since the
        call that returned the token `since`, in order: (a token for the next call, those
        trials), or None for the trials when the reader must look at them all. A trial being
        sampled here counts once, when it is made (`new_trial`)."""
        token = (self._feed_epoch, len(self._feed))
        if since is None or since[0] != self._feed_epoch or since[1] > len(self._feed):
            return token, None
        return token, self._feed[since[1] :]

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
        trial = self.cache.get(trial_id)
        if trial is None:
            raise KeyError(trial_id)
        return _queued_as_running(trial)

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


def _number_and_id(trial: FrozenTrial) -> tuple[int, int]:
    return trial.number, trial._trial_id


def _shown_as(trial: FrozenTrial) -> FrozenTrial | None:
    """A cache's trial as samplers see it; None for one claimed here and not read yet."""
    if not trial.params and not trial.state.is_finished():
        return None
    return _queued_as_running(trial)


def _queued_as_running(trial: FrozenTrial) -> FrozenTrial:
    """A queued trial with its params, as samplers should count it: running."""
    if trial.state != TrialState.WAITING or not trial.params:
        return trial
    return trial_as(trial, TrialState.RUNNING, None)
