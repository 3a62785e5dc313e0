"""Sampling ahead: one process at a time samples a study's next trials into its queue.

Whoever holds the study's sampling lock (`search.db.trial_rows.sampling_lock`) tops the queue of
WAITING trials up; `create` queues the first ones (`queue_first_trials`), workers refill it as
they claim. The queue's depth depends on the sampler:

- random, grid and QMC points do not depend on results: one queued trial per live worker, so
  a worker that finishes a trial never waits for sampling;
- TPE, CMA-ES and GP learn from finished trials, and see queued ones only once they run: their
  queue is kept short (a quarter of the live workers), so most points are sampled knowing the
  latest results. (With constant liar, TPE counts running trials as bad results, so parallel
  workers spread out instead of piling onto the current best point.)

Random trials are written whole (lock, count, trials and params) in one transaction on one
connection. TPE, CMA-ES and GP sample a batch of trials in memory, through real `optuna.Trial`s
on the process's mirror of the study (`search.sampling.mirror`: refreshed incrementally, not
reloaded per sample), each trial seeing the ones sampled before it as running (constant liar),
and the batch is inserted in one transaction. Grid and QMC go through a real `optuna.Trial` on
a row created for it in the database, so that their study-wide counters (grid ids, the QMC
sequence index) are shared as in Optuna. Trials enqueued with plain Optuna's
`enqueue_trial` (fixed params) are sampled that way too, by the worker that claims them.
"""

from __future__ import annotations

import math
import os
import socket
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import optuna
from optuna.distributions import distribution_to_json
from optuna.trial import TrialState, create_trial

from search.db import liveness, trial_rows
from search.db.storage import Storage, is_transient
from search.db.trial_rows import Counts
from search.errors import RuntimeFailure, first_line
from search.pruning.pruners import make_pruner
from search.sampling.hedge import HEDGE_ATTR, next_is_hedge, study_hedge_level
from search.sampling.mirror import StudyMirror
from search.sampling.samplers import (
    LEARNS_FROM_RESULTS,
    STARTUP_TRIALS,
    distribution,
    make_sampler,
    suggest,
)
from search.study.space import Param
from search.study.studies import StudyRef

__all__ = ["PREFILL", "TrialSampler", "load_optuna_study", "queue_first_trials"]

OWN_SAMPLING_POLL_S = 0.05
"""How often a thread waiting for this process's other sampling thread checks for a stop."""
PREFILL = 32
"""Trials `create` queues for samplers that do not learn from results: the first workers start
at once, without racing each other to sample."""


class TrialSampler:
    """Samples a study's next trials into its queue, as worker `worker_id`."""

    def __init__(self, storage: Storage, study: StudyRef, worker_id: str) -> None:
        self.storage, self.study, self.worker_id = storage, study, worker_id
        self.config = study.config
        self._optuna_study: optuna.Study | None = None
        self._sampling = threading.Lock()
        self._unqueued: set[int] = set()  # created by this process, not yet claimable
        self._created = False  # whether this process's last top-up created trials
        self._mirror: StudyMirror | None = None
        self.depth: int | None = None
        """The queue's depth when this process last looked (None: not yet); claims that
        leave fewer trials queued than this top it up."""
        self.live: int | None = None
        """Live workers of the study when this process last looked (None: not yet)."""

    def top_up(self, *, stop: threading.Event | None = None, at_least: int = 0) -> bool:
        """If this process wins the sampling lock, fill the queue to its depth (or to
        `at_least` trials waiting); True if it created trials. While this process's other
        thread samples, wait for it: True if that created trials."""

        def how_many(counts: Counts, live: int) -> int:
            missing = self.config.study.max_trials - counts.total
            learns = self.config.study.sampler in LEARNS_FROM_RESULTS
            depth = math.ceil(max(1, live) / 4) if learns else max(1, live)
            self.depth, self.live = depth, live
            return min(missing, max(1, depth, at_least) - counts.queued)

        # One sampling thread per process at a time (the worker's loop and its sampler thread
        # both call this). The other one waits for it and is told whether it created trials:
        # they are the ones it would sample, and waiting ends the moment they are in (polling
        # would add up to a poll interval per trial to a worker whose queue ran dry).
        if not self._sampling.acquire(blocking=False):
            while not self._sampling.acquire(timeout=OWN_SAMPLING_POLL_S):
                if stop is not None and stop.is_set():
                    return False
            self._sampling.release()
            return self._created
        try:
            self._created = False
            self._created = self._top_up(how_many, stop)
            return self._created
        finally:
            self._sampling.release()

    def _top_up(self, how_many: Callable[[Counts, int], int], stop: threading.Event | None) -> bool:
        study_id = self.study.study_id
        for trial_id in sorted(self._unqueued):
            # Created before a database outage interrupted its sampling: queue it as it is (a
            # worker that claims it samples what is missing), so that nobody waits for it.
            trial_rows.enqueue_sampled(self.storage, trial_id)
            self._unqueued.discard(trial_id)
        if self.config.study.sampler == "random":
            # No history needed: lock, count and insert in one transaction, one connection.
            self.optuna_study()  # loaded first: SQLite must not wait on its own transaction
            created = trial_rows.create_sampled_trials(
                self.storage,
                study_id,
                self._random_params,
                how_many,
                budget_epochs=self.config.study.budget_epochs,
            )
            return created > 0
        with trial_rows.sampling_lock(self.storage, study_id, self.worker_id) as got:
            if not got:
                return False
            counts = trial_rows.count_trials(self.storage, study_id)
            wanted = how_many(counts, liveness.live_workers(self.storage, study_id))
            if wanted <= 0:
                return False
            if self.config.study.sampler in LEARNS_FROM_RESULTS:
                return self._sample_in_memory(counts.total, wanted, stop) > 0
            for _ in range(wanted):
                if stop and stop.is_set():
                    break
                trial_id, number = trial_rows.create_trial(self.storage, study_id, self.worker_id)
                self._unqueued.add(trial_id)
                try:
                    self.sample_params(trial_id, number, self.config.space)
                except Exception as exc:
                    if is_transient(exc):
                        raise  # the database is away: the row is queued once it is back
                    # The sampler itself failed: a trial row exists only with its params, so
                    # it goes (it is the study's last: this worker still holds the lock).
                    trial_rows.remove_unsampled(self.storage, trial_id)
                    self._unqueued.discard(trial_id)
                    raise RuntimeFailure(
                        f"sampling trial {number} with the {self.config.study.sampler} sampler "
                        f"failed: {type(exc).__name__}: {first_line(exc)}"
                    ) from exc
                trial_rows.enqueue_sampled(self.storage, trial_id)
                self._unqueued.discard(trial_id)
            return True

    def _sample_in_memory(self, first: int, wanted: int, stop: threading.Event | None) -> int:
        """Sample `wanted` trials numbered from `first` on the study's mirror and insert them in
        one transaction (the caller holds the sampling lock); returns how many were queued."""
        if self._mirror is None:
            self._mirror = StudyMirror(self.storage, self.study)
        mirror = self._mirror
        mirror.refresh()
        hedges_at = study_hedge_level(self.config)  # None: the study hedges no trial
        try:
            for number in range(first, first + wanted):
                if stop and stop.is_set():
                    break
                # A hedge is decided from the trials sampled so far, this batch's included,
                # and recorded with the trial (search.sampling.hedge).
                hedge = hedges_at is not None and next_is_hedge(
                    mirror.get_all_trials(self.study.study_id, deepcopy=False), number
                )
                trial_id = mirror.new_trial(number)
                if hedge:
                    mirror.set_trial_system_attr(trial_id, HEDGE_ATTR, hedges_at)
                sampler = make_sampler(self.config, number, hedge=hedge)
                trial = optuna.Trial(mirror.study(sampler), trial_id)
                for param in self.config.space:
                    suggest(trial, param)
        except Exception as exc:
            mirror.take_sampled()  # nothing was written: the batch is dropped
            raise RuntimeFailure(
                f"sampling trial {number} with the {self.config.study.sampler} sampler "
                f"failed: {type(exc).__name__}: {first_line(exc)}"
            ) from exc
        return trial_rows.insert_sampled_trials(
            self.storage,
            self.study.study_id,
            self.worker_id,
            mirror.take_sampled(),
            self.config.study.max_trials,
            budget_epochs=self.config.study.budget_epochs,
        )

    def sample_params(self, trial_id: int, number: int, space: Sequence[Param]) -> dict[str, Any]:
        """Sample `space` into trial `trial_id` through Optuna (sampler hooks, fixed params)."""
        study = load_optuna_study(self.storage, self.study, make_sampler(self.config, number))
        study.get_trials(deepcopy=False)  # sync the cached storage: it must know the new trial
        trial = optuna.Trial(study, trial_id)
        return {param.name: suggest(trial, param) for param in space}

    def optuna_study(self) -> optuna.Study:
        if self._optuna_study is None:
            self._optuna_study = load_optuna_study(self.storage, self.study)
        return self._optuna_study

    def _random_params(self, number: int) -> dict[str, tuple[float, str]]:
        sampler = make_sampler(self.config, number)
        stub = create_trial(state=TrialState.RUNNING)
        out = {}
        for param in self.config.space:
            dist = distribution(param)
            value = sampler.sample_independent(self.optuna_study(), stub, param.name, dist)
            out[param.name] = (dist.to_internal_repr(value), distribution_to_json(dist))
        return out


def queue_first_trials(storage: Storage, study: StudyRef) -> None:
    """Sample a new study's first trials, so that the first workers start at once instead of
    racing each other to sample: `PREFILL` for samplers whose points do not depend on results,
    the start-up trials (random points) of those that learn."""
    sampler = study.config.study.sampler
    first = STARTUP_TRIALS[sampler] if sampler in LEARNS_FROM_RESULTS else PREFILL
    # Registered like a worker: should `create` die while sampling, its trials are reaped.
    hostname = socket.gethostname()
    creator = liveness.WorkerInfo(
        worker_id=f"create-{hostname[:40]}-{os.getpid()}-{uuid.uuid4().hex[:6]}",
        study_id=study.study_id,
        hostname=hostname,
        pid=os.getpid(),
        device="-",
        grace_s=60.0,
    )
    liveness.register(storage, creator)
    try:
        TrialSampler(storage, study, creator.worker_id).top_up(
            at_least=min(first, study.config.study.max_trials)
        )
    finally:
        liveness.unregister(storage, creator.worker_id, "created the study")


def load_optuna_study(
    storage: Storage, study: StudyRef, sampler: optuna.samplers.BaseSampler | None = None
) -> optuna.Study:
    """The Optuna study object (for sampling and pruning), on this process's cached storage."""
    return optuna.load_study(
        study_name=study.name,
        storage=storage.optuna_storage(),
        sampler=sampler or optuna.samplers.RandomSampler(),
        pruner=make_pruner(study.config),
    )
