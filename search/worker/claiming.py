"""Claiming a study's next trial, and deciding when the study is over.

`Claimer.next()` is the next trial this worker runs (a `Claim`), or the study's end (`StudyOver`).
It claims the next WAITING trial (with a budget, one epoch of it reserved first; with
promotion-based ASHA, a promotable paused trial comes first, and once the epoch budget left
could not train a new trial fully, paused trials are promoted by the looser draining rule, so
that the last epochs finish the best of them); when nothing is waiting it samples
new trials (if n_trials allows), or waits for a dead worker's trial to free up, or finds the
study over (`StudyEnd`): n_trials done, the budget spent, or nothing left to start or promote
(what is left paused or queued then ends PRUNED). After a claim that leaves the queue short, a
background thread samples ahead (`SampleAhead`), so that the next claim finds a trial waiting.

    claimer = Claimer(storage, study, worker_id, rules=rules, health=health, sampler=sampler,
                      tracking=tracking)
    match claimer.next():
        case StudyOver(): ...
        case claim: ...
"""

from __future__ import annotations

import enum
import functools
import logging
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass

from search.db import claims, pauses, trial_rows
from search.db.leases import Claim
from search.db.storage import Storage, is_transient
from search.errors import first_line
from search.sampling.sample_ahead import TrialSampler
from search.sampling.samplers import LEARNS_FROM_RESULTS
from search.study.extend import BUDGET_KEYS
from search.study.studies import StudyRef
from search.worker import leftovers
from search.worker.artifacts import ArtifactStore
from search.worker.decisions import StudyRules
from search.worker.health import DatabaseHealth
from search.worker.tracked import TrialTracking

__all__ = ["Claimer", "SampleAhead", "StudyEnd", "StudyOver"]

logger = logging.getLogger("search.worker.claiming")

IDLE_POLL_MAX_S = 1.0
"""Longest wait between two looks for work when nothing is queued."""
SAMPLING_POLL_S = 0.1
"""Wait between looks for work while another worker samples the next trials."""
SAMPLER_JOIN_S = 60.0
"""How long a worker that ends the study (or leaves) waits for its sampler thread's insert."""
SAMPLE_AHEAD_BELOW = 16
"""Samplers that do not learn from results (random, grid, QMC) refill the queue once fewer
trials than this are left after a claim, in one batch, instead of one trial per claim."""


class StudyEnd(enum.Enum):
    """With a budget or promotion, when nothing was claimed: what comes next."""

    SAMPLE = "sample"
    """New trials may start."""
    DRAIN = "drain"
    """None may: promote paused trials with the looser rule."""
    WAIT = "wait"
    """For running trials (or queued ones the next claim takes)."""
    OVER = "over"
    """The study is over: what was left queued or paused has ended PRUNED with its last value."""


@dataclass(frozen=True)
class StudyOver:
    """No trial left for this worker: the study is over, or the worker must stop (a signal,
    the database gone: its stop event says so)."""


class SampleAhead:
    """A background thread that refills the queue after a claim that left it short."""

    def __init__(self, sampler: TrialSampler, stop: threading.Event) -> None:
        self.sampler, self._stop = sampler, stop
        self._thread: threading.Thread | None = None
        self._over = False  # the study is ending: sample nothing more ahead

    def top_up(self) -> bool:
        """In the caller's thread: fill the queue if this worker wins the sampling lock."""
        return self.sampler.top_up(stop=self._stop)

    def after_claim(self, claim: Claim, config_sampler: str) -> None:
        """If the claim left the queue short, refill it in the background."""
        if claim.waiting is not None and claim.waiting >= self._below(config_sampler):
            return
        if self._over:
            return  # the study is ending: nothing sampled now would be claimed
        if self._thread is not None and self._thread.is_alive():
            return
        if config_sampler in LEARNS_FROM_RESULTS and (self.sampler.live or 0) <= 1:
            # Alone (or not known yet): sample now, from the study as it is at the claim, so
            # that a seed gives the same trials run after run (a thread would see the running
            # trial's reports as far as its timing let it).
            self._quietly()
            return
        self._thread = threading.Thread(target=self._quietly, name="sampler", daemon=True)
        self._thread.start()

    def reopen(self) -> None:
        """The study goes on after `close` (its budgets were raised as it was ending)."""
        self._over = False

    def close(self) -> None:
        """Sample nothing more; wait for an insert under way."""
        self._over = True
        thread = self._thread
        if thread is not None and thread.is_alive():
            thread.join(timeout=SAMPLER_JOIN_S)
            if thread.is_alive():
                logger.warning("sampling ahead still runs after %.0f s", SAMPLER_JOIN_S)

    def _below(self, config_sampler: str) -> float:
        """Claims that leave fewer trials queued than this top the queue up."""
        if config_sampler not in LEARNS_FROM_RESULTS:
            return SAMPLE_AHEAD_BELOW
        # Samplers that learn keep a short queue of the latest knowledge: every claim that
        # leaves it short refills it (unknown until this process has looked: always).
        depth = self.sampler.depth
        return float("inf") if depth is None else depth

    def _quietly(self) -> None:
        try:
            self.top_up()
        except Exception as exc:  # the loop samples synchronously when it finds nothing queued
            if not is_transient(exc):
                logger.warning("sampling ahead failed: %s", first_line(exc))


class Claimer:
    """Claims one study's trials for one worker until the study is over."""

    def __init__(
        self,
        storage: Storage,
        study: StudyRef,
        worker_id: str,
        *,
        rules: StudyRules,
        health: DatabaseHealth,
        sampler: TrialSampler,
        tracking: TrialTracking,
        artifacts: ArtifactStore | None = None,
    ) -> None:
        self.storage, self.study, self.worker_id = storage, study, worker_id
        self.rules, self.health, self.tracking = rules, health, tracking
        self.artifacts = artifacts  # the checkpoints to sweep at the study's end (None: keep)
        self.ahead = SampleAhead(sampler, health.stop)
        rules.follow(self._adopt)

    def _adopt(self, study: StudyRef) -> None:
        """New budgets (`StudyRules.more_budget`): claim and sample up to them."""
        self.study = study
        self.ahead.sampler.study, self.ahead.sampler.config = study, study.config

    def next(self) -> Claim | StudyOver:
        """The next trial to run, or the study's end (or the worker must stop)."""
        stop = self.health.stop
        idle_s = 0.05
        while not stop.is_set():
            claim = self._claim_once()
            if claim is not None:
                self.ahead.after_claim(claim, self.study.config.study.sampler)
                return claim
            counts = self.health.retry(
                lambda: trial_rows.count_trials(self.storage, self.study.study_id), "count trials"
            )
            if counts.total >= self.study.config.study.max_trials:
                # n_trials reached, unless it was raised meanwhile (`hpsearch extend`).
                self.health.retry(self.rules.more_budget, "read the study's budgets")
            n_trials = self.study.config.study.max_trials
            if self.rules.limited:
                end = self.health.retry(
                    functools.partial(self._study_end, counts), "check the study's end"
                )
                if end is StudyEnd.OVER:
                    return StudyOver()
                if end is StudyEnd.DRAIN:
                    claim = self._with_epoch(self._promote_draining)
                    if claim is not None:
                        return claim
                if end is not StudyEnd.SAMPLE:
                    stop.wait(idle_s * (0.5 + random.random()))
                    idle_s = min(idle_s * 2, IDLE_POLL_MAX_S)
                    continue
            elif counts.total >= n_trials and counts.waiting == 0 and counts.running == 0:
                return StudyOver()
            if counts.total < n_trials:
                if not self.health.retry(self.ahead.top_up, "sample trials"):
                    # Another worker is sampling: its trials appear within moments.
                    stop.wait(SAMPLING_POLL_S * (0.5 + random.random()))
                continue
            # Everything is created and taken: wait for a trial to free up (a dead worker's,
            # reaped by the heartbeat thread) or for the study to end.
            stop.wait(idle_s * (0.5 + random.random()))
            # At most a second: the last trials' end (and the study's) is noticed quickly, at
            # the cost of one small query per idle worker and second.
            idle_s = min(idle_s * 2, IDLE_POLL_MAX_S)
        return StudyOver()

    def close(self) -> None:
        self.ahead.close()

    def _claim_once(self) -> Claim | None:
        failed = False
        promoter = self.rules.promoter

        def attempt() -> Claim | None:
            nonlocal failed
            if failed:
                # The connection broke around a commit: the claim may have gone through.
                held = claims.held_claims(self.storage, self.worker_id)
                if held:
                    return held[0]
            try:
                if promoter is not None:
                    # When the budget left could not train a new trial fully, the paused trials
                    # are promoted first, by the draining rule: the last epochs go to finishing
                    # the best of them, not to trials that cannot finish.
                    finishing = self._budget_too_little_for_a_new_trial()
                    promoted = promoter.resume_next(
                        self.worker_id,
                        draining=finishing,
                        why="the budget left cannot train a new trial fully",
                    )
                    if promoted is not None:
                        return promoted
                return claims.claim_next_trial(
                    self.storage,
                    self.study.study_id,
                    self.worker_id,
                    skip_paused=promoter is not None,
                )
            except Exception:
                failed = True
                raise

        return self._with_epoch(lambda: self.health.retry(attempt, "claim a trial"))

    def _with_epoch(self, claim_one: Callable[[], Claim | None]) -> Claim | None:
        """`claim_one()`, with one epoch of the study's budget reserved first (and given back
        if there is no trial to claim); None without claiming when the budget is spent."""
        limits = self.rules.limits
        if limits is None:
            return claim_one()
        chunk = self.rules.first_chunk()
        if not self.health.retry(lambda: limits.reserve(chunk), "reserve an epoch"):
            return None
        claim = claim_one()
        if claim is None:
            self.health.retry(limits.give_back, "return an epoch")
        return claim

    def _budget_too_little_for_a_new_trial(self) -> bool:
        limits = self.rules.limits
        return limits is not None and limits.too_little_for(self.study.config.task.epochs)

    def _promote_draining(self) -> Claim | None:
        promoter = self.rules.promoter
        assert promoter is not None
        return self.health.retry(
            lambda: promoter.resume_next(self.worker_id, draining=True), "promote a trial"
        )

    def _study_end(self, counts: trial_rows.Counts) -> StudyEnd:
        """With a budget or promotion, when nothing was claimed: what comes next."""
        limits, promoter = self.rules.limits, self.rules.promoter
        if limits is not None and limits.spent():  # read after the running trials' count
            if counts.running > 0:
                return StudyEnd.WAIT  # they give back what they do not train, or end
            return self._end_waiting("budget")
        if counts.total < self.study.config.study.max_trials:
            return StudyEnd.SAMPLE
        if promoter is None:
            done = counts.waiting == 0 and counts.running == 0
            return StudyEnd.OVER if done else StudyEnd.WAIT
        if counts.queued > 0:
            return StudyEnd.WAIT  # queued trials (handed back): the next claim takes them
        if counts.paused == 0:
            return StudyEnd.OVER if counts.running == 0 else StudyEnd.WAIT
        if counts.running > 0:
            return StudyEnd.DRAIN
        if promoter.can_resume(draining=True):
            return StudyEnd.DRAIN
        return self._end_waiting("n_trials")

    def _end_waiting(self, why: str) -> StudyEnd:
        # This worker's sampler thread may still be inserting trials it sampled ahead: they
        # must be in before the cleanup below, which removes them, not after it, where they
        # would stay WAITING for ever (no worker is left to claim them).
        self.ahead.close()
        s = self.study.config.study
        found_spent = {k: getattr(s, k) for k in BUDGET_KEYS}
        done = pauses.end_waiting(self.storage, self.study.study_id, why, budgets=found_spent)
        if done is None:
            # The budgets were raised since this worker read them (`hpsearch extend`, or the
            # config run again, as it was ending the study): nothing ended, it goes on.
            self.rules.more_budget()
            self.ahead.reopen()
            logger.info(
                "study %r: its budget was raised as it was ending; it goes on", self.study.name
            )
            return StudyEnd.WAIT
        ended, removed = done
        self.tracking.ended_by_study_end(ended)
        over = "budget spent" if why == "budget" else "no trial left to start or promote"
        if ended:
            logger.info(
                "study over (%s): %d paused or queued trial(s) end PRUNED with their last value",
                over,
                len(ended),
            )
        if self.artifacts is not None:
            try:
                swept = leftovers.sweep(self.storage, self.artifacts, self.study)
            except Exception:  # disk space, not correctness
                logger.warning("could not delete the ended trials' checkpoints")
            else:
                logger.info("study over: %s", leftovers.describe(swept))
        if removed:
            logger.info(
                "study over (%s): %d queued trials that never started are removed",
                over,
                len(removed),
            )
        return StudyEnd.OVER
