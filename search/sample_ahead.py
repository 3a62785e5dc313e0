"""Creating a study's trials: one process at a time samples ahead, workers only claim.

Whoever holds the study's sampling lock (see `Queue.sampling_lock`) tops the queue of WAITING
trials up; `create` queues the first ones, workers refill it as they claim. The queue's depth
depends on the sampler:

- random, grid and QMC points do not depend on results: one queued trial per live worker, so
  a worker that finishes a trial never waits for sampling;
- TPE, CMA-ES and GP learn from finished trials, and see queued ones only once they run: their
  queue is kept short (a quarter of the live workers), so most points are sampled knowing the
  latest results. (With constant liar, TPE counts running trials as bad results, so parallel
  workers spread out instead of piling onto the current best point.)

Random trials are written whole (lock, count, trials and params) in one transaction on one
connection. Other samplers go through a real `optuna.Trial` on a row created for it, so every
sampler hook (grid ids, QMC counters, CMA-ES generations) and the fixed params of trials
enqueued with plain Optuna work as in Optuna.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from search.dispatch import Counts, Queue
from search.samplers import LEARNS_FROM_RESULTS
from search.space import Param
from search.storage import Storage
from search.study import StudyRef

if TYPE_CHECKING:
    import optuna

__all__ = ["PREFILL", "TrialSampler"]

PREFILL = 32
"""Trials `create` queues for samplers that do not learn from results: the first workers start
at once, without racing each other to sample."""


class TrialSampler:
    """Samples a study's next trials into its queue."""

    def __init__(self, storage: Storage, study: StudyRef, queue: Queue) -> None:
        self.storage, self.study, self.queue = storage, study, queue
        self.config = study.config
        self._optuna_study: optuna.Study | None = None

    def top_up(self, *, stop: threading.Event | None = None, at_least: int = 0) -> bool:
        """If this process wins the sampling lock, fill the queue to its depth (or to
        `at_least` trials waiting); True if it created trials."""

        def how_many(counts: Counts, live: int) -> int:
            missing = self.config.study.n_trials - counts.total
            learns = self.config.study.sampler in LEARNS_FROM_RESULTS
            depth = math.ceil(max(1, live) / 4) if learns else max(1, live)
            return min(missing, max(1, depth, at_least) - counts.waiting)

        if self.config.study.sampler == "random":
            # No history needed: lock, count and insert in one transaction, one connection.
            self.optuna_study()  # loaded first: SQLite must not wait on its own transaction
            return self.queue.create_sampled_trials(self._random_params, how_many) > 0
        with self.queue.sampling_lock() as got:
            if not got:
                return False
            wanted = how_many(self.queue.counts(), self.queue.live_workers())
            if wanted <= 0:
                return False
            for _ in range(wanted):
                if stop and stop.is_set():
                    break
                trial_id, number = self.queue.create_trial()
                self.sample_params(trial_id, number, self.config.space)
                self.queue.enqueue_sampled(trial_id)
            return True

    def sample_params(self, trial_id: int, number: int, space: Sequence[Param]) -> dict[str, Any]:
        """Sample `space` into trial `trial_id` through Optuna (sampler hooks, fixed params)."""
        import optuna

        from search.samplers import make_sampler, suggest
        from search.study import load_optuna_study

        study = load_optuna_study(self.storage, self.study, make_sampler(self.config, number))
        study.get_trials(deepcopy=False)  # sync the cached storage: it must know the new trial
        trial = optuna.Trial(study, trial_id)
        return {param.name: suggest(trial, param) for param in space}

    def optuna_study(self) -> optuna.Study:
        if self._optuna_study is None:
            from search.study import load_optuna_study

            self._optuna_study = load_optuna_study(self.storage, self.study)
        return self._optuna_study

    def _random_params(self, number: int) -> dict[str, tuple[float, str]]:
        from optuna.distributions import distribution_to_json
        from optuna.trial import TrialState, create_trial

        from search.samplers import distribution, make_sampler

        sampler = make_sampler(self.config, number)
        stub = create_trial(state=TrialState.RUNNING)
        out = {}
        for param in self.config.space:
            dist = distribution(param)
            value = sampler.sample_independent(self.optuna_study(), stub, param.name, dist)
            out[param.name] = (dist.to_internal_repr(value), distribution_to_json(dist))
        return out
