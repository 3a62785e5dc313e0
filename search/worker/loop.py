"""A worker: pulls trials of one study until the study is done, one trial at a time.

    worker = Worker(storage, study, device="cuda:0")
    exit_code = worker.run()

The loop: claim the next WAITING trial (sampling a few ahead when the queue runs low and this
worker wins the sampling lock), run it, record its end; when nothing is waiting, help reap the
trials of dead workers and wait. A background thread heartbeats, reaps, and notices when this
worker's trial was taken over (after a network cut longer than the grace period), so that the
trial stops cleanly instead of racing its new owner.

Database outages: every statement is retried with backoff. While the database is away training
goes on; reports are kept and written when it is back (pruning decisions resume then), and a
trial's end is written once the database answers. A worker declared dead during the outage loses
nothing: the trial's new owner resumes from the latest checkpoint, and this worker's writes are
refused by the lease (fencing), so no trial is recorded twice. A worker that has not reached the
database for most of its grace period stops its trial itself before anyone may take it over
(`search.worker.self_fence`), and goes on with it if it still holds it once the database
answers (else the worker that took it over resumes it); one whose database
or study is gone for good (dropped, renamed, deleted) stops with one line, exit 1.

Signals: SIGTERM (a spot instance's notice) and Ctrl-C checkpoint the running trial at its next
step, hand it back to the queue as resumable, and exit (0 for SIGTERM, 130 for Ctrl-C). A second
Ctrl-C exits at once; the trial is then handed back by the reaper after the grace period.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import os
import random
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from optuna.distributions import json_to_distribution

from search.db import claims, fenced_writes, liveness, pauses, trial_rows
from search.db.gone import gone_reason
from search.db.leases import Claim, LeaseLost
from search.db.status import best_trial
from search.db.storage import Storage, is_transient, retry
from search.db.tables import stored_float
from search.errors import RuntimeFailure, first_line
from search.pruning.pruners import rung_steps
from search.pruning.view import Pruner
from search.sampling.sample_ahead import TrialSampler
from search.sampling.samplers import LEARNS_FROM_RESULTS, derived_seed
from search.study.studies import StudyRef
from search.terminal import StatusLine
from search.worker import leftovers
from search.worker.artifacts import ArtifactStore, TrialCheckpoints
from search.worker.cpu_share import share_cpu_threads
from search.worker.pause import (
    PUBLISH_EVERY_S,
    Promoter,
    StudyLimits,
    publish_progress,
)
from search.worker.provenance import launched_by
from search.worker.report_writer import ReportWriter
from search.worker.self_fence import LeaseWatchdog
from search.worker.tracked import TrialTracking
from search.worker.training import run_training
from search.worker.trial_run import TrialFunction, TrialOutcome, TrialRun, trial_end
from trainer import CheckpointStore

__all__ = ["DEFAULT_GRACE_S", "Worker"]

logger = logging.getLogger("search.worker.loop")

DEFAULT_GRACE_S = 60.0
"""Seconds of silence after which a worker counts as dead and its trial is resumed elsewhere.

Heartbeats go out every grace/6 seconds. 60 s rides out garbage-collection pauses and brief
network trouble; a preempted machine's trial restarts elsewhere within about a minute.
"""

IDLE_POLL_MAX_S = 1.0
"""Longest wait between two looks for work when nothing is queued."""
SAMPLING_POLL_S = 0.1
"""Wait between looks for work while another worker samples the next trials."""
PRUNING_REFRESH_S = 1.0
"""Longest a running trial's view of the other trials' rung values may lag (it is refreshed in
the background after each decision, and at least this often)."""
SAMPLER_JOIN_S = 60.0
"""How long a worker that ends the study (or leaves) waits for its sampler thread's insert."""
SAMPLE_AHEAD_BELOW = 16
"""Samplers that do not learn from results (random, grid, QMC) refill the queue once fewer
trials than this are left after a claim, in one batch, instead of one trial per claim."""

T = TypeVar("T")


class Worker:
    """Runs trials of one study until it is done."""

    def __init__(
        self,
        storage: Storage,
        study: StudyRef,
        *,
        device: str = "cpu",
        run_trial: TrialFunction | None = None,
        grace_s: float = DEFAULT_GRACE_S,
        progress: bool | None = None,
        artifacts: ArtifactStore | None = None,
        keep_checkpoints: bool = False,
    ) -> None:
        self.storage = storage
        self.study = study
        self.config = study.config
        self.device = device
        self.grace_s = grace_s
        self.hostname = socket.gethostname()
        self.worker_id = f"{self.hostname[:40]}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.sampler = TrialSampler(storage, study, self.worker_id)
        self.artifacts = artifacts
        self.keep_checkpoints = keep_checkpoints
        self._run_trial = run_trial or run_training
        if progress is None:  # a live line on a terminal, unless a parent process draws one
            progress = sys.stderr.isatty() and os.environ.get("HPSEARCH_PROGRESS") != "0"
        self._progress = progress
        self._line = StatusLine(plain=False)
        self._best = ""
        self._stop = threading.Event()  # the whole worker must stop
        self._stop_signal: int | None = None
        self._trial_stop = threading.Event()  # the running trial must stop
        self._claim: Claim | None = None
        self._lost = False  # the running trial was taken over
        self._pruner: Pruner | None = None
        self._sampler_thread: threading.Thread | None = None
        self._sampling_over = False  # the study is ending: sample nothing more ahead
        self._db_down_since: float | None = None
        self._heartbeat_s = max(0.2, grace_s / 6)
        self._fenced = False  # the running trial was stopped here: no heartbeat got through
        self._gone: str | None = None  # the database or the study is gone for good
        self._watchdog = LeaseWatchdog(grace_s, on_expired=self._self_fence)
        self._rungs = rung_steps(self.config.pruner, self.config.task.epochs)
        # Budgets and promotion-based ASHA (search/worker/pause.py); None: not configured.
        self._limits = StudyLimits(storage, study) if self.config.study.has_budget else None
        self._promoter = Promoter(storage, study) if self.config.pruner.pauses else None
        self._published_at = -math.inf
        self._stop_reason: str | None = None  # why report() last said stop
        self._paused_at: tuple[int, float] | None = None  # (rung, value) where it pauses
        # Epochs reserved with a claim: a new trial's first, up to its first decision (any
        # reserved beyond what the trial needs goes back when it stops).
        self._first_chunk = (
            self.config.pruner.min_resource
            if self._promoter is not None
            else min(self._rungs or [self.config.task.epochs])
            if self._rungs is not None
            else 1
        )
        self._run_now: TrialRun | None = None
        self._reports = ReportWriter(
            storage, on_lost=self._trial_lost, on_error=self._db_down, on_success=self._db_back
        )
        self.trials_run = 0
        self._tracking = TrialTracking(study, worker_id=self.worker_id, device=device)
        self._threads: int | None = None  # CPU threads of this worker's share of the machine

    # -- the loop ---------------------------------------------------------------------------

    def prepare(self) -> None:
        """Load what every trial needs (Optuna, the study for pruning) before the first claim,
        so that start-up cost is not paid inside a trial."""
        if self._limits is not None:
            self._retry(self._limits.prepare, "prepare the budget")
        if self._rungs == []:
            return  # no pruner: nothing to load
        self._retry(lambda: self._load_pruner().view.refresh(), "load")

    def run(self) -> int:
        """Pull trials until the study is done; returns the process exit code."""
        self.prepare()
        restore = self._install_signal_handlers()
        me = liveness.WorkerInfo(
            worker_id=self.worker_id,
            study_id=self.study.study_id,
            hostname=self.hostname,
            pid=os.getpid(),
            device=self.device,
            grace_s=self.grace_s,
            launched_by=launched_by(),
        )
        registering = time.monotonic()
        self._retry(lambda: liveness.register(self.storage, me), "register worker")
        self._watchdog.renewed(registering)
        self._watchdog.start()
        logger.info(
            "worker %s joined study %r on %s (device %s, grace %.0f s)",
            self.worker_id,
            self.study.name,
            self.storage.safe_url,
            self.device,
            self.grace_s,
        )
        beat = threading.Thread(target=self._heartbeat_loop, name="heartbeat", daemon=True)
        beat.start()
        reason = "done"
        try:
            while not self._stop.is_set():
                claim = self._next_claim()
                if claim is None:
                    break
                self._run_claim(claim)
            if self._gone is not None:
                raise RuntimeFailure(self._gone)
            if self._stop.is_set():
                reason = "SIGTERM" if self._stop_signal == signal.SIGTERM else "interrupted"
        except BaseException as exc:
            reason = f"error: {type(exc).__name__}"
            gone = gone_reason(exc) if isinstance(exc, Exception) else None
            if gone is not None and not isinstance(exc, RuntimeFailure):
                self._give_up(gone)
                raise RuntimeFailure(self._gone or gone) from exc
            raise
        finally:
            self._stop.set()
            self._watchdog.stop()
            beat.join(timeout=5)
            self._reports.close()
            if self._pruner is not None:
                self._pruner.close()
            self._join_sampler()
            self._publish_progress(now=True)
            try:
                if self._gone is None:  # else there is nothing left to write to
                    self._retry(
                        lambda: liveness.unregister(self.storage, self.worker_id, reason),
                        "unregister",
                        attempts=3,
                    )
            except Exception:  # the reaper treats a silent worker the same way
                logger.warning("could not record this worker's exit; it will time out instead")
            restore()
            self._end_progress()
            self._tracking.close(study_done=reason == "done", hurry=self._stop_signal is not None)
        logger.info(
            "worker %s leaves (%s) after %d trials", self.worker_id, reason, self.trials_run
        )
        if self._stop_signal == signal.SIGINT:
            return 130
        return 0

    def _next_claim(self) -> Claim | None:
        """The next trial to run, or None when the study is done (or the worker must stop)."""
        n_trials = self.config.study.max_trials
        idle_s = 0.05
        while not self._stop.is_set():
            claim = self._claim_once()
            if claim is not None:
                return claim
            counts = self._retry(
                lambda: trial_rows.count_trials(self.storage, self.study.study_id), "count trials"
            )
            if self._limits is not None or self._promoter is not None:
                verdict = self._retry(
                    functools.partial(self._study_end, counts), "check the study's end"
                )
                if verdict == "done":
                    return None
                if verdict == "drain":
                    claim = self._with_epoch(self._promote_draining)
                    if claim is not None:
                        return claim
                if verdict != "sample":
                    self._stop.wait(idle_s * (0.5 + random.random()))
                    idle_s = min(idle_s * 2, IDLE_POLL_MAX_S)
                    continue
            elif counts.total >= n_trials and counts.waiting == 0 and counts.running == 0:
                return None
            if counts.total < n_trials:
                if not self._retry(self._top_up, "sample trials"):
                    # Another worker is sampling: its trials appear within moments.
                    self._stop.wait(SAMPLING_POLL_S * (0.5 + random.random()))
                continue
            # Everything is created and taken: wait for a trial to free up (a dead worker's,
            # reaped by the heartbeat thread) or for the study to end.
            self._stop.wait(idle_s * (0.5 + random.random()))
            # At most a second: the last trials' end (and the study's) is noticed quickly, at
            # the cost of one small query per idle worker and second.
            idle_s = min(idle_s * 2, IDLE_POLL_MAX_S)
        return None

    def _claim_once(self) -> Claim | None:
        failed = False

        def attempt() -> Claim | None:
            nonlocal failed
            if failed:
                # The connection broke around a commit: the claim may have gone through.
                held = claims.held_claims(self.storage, self.worker_id)
                if held:
                    return held[0]
            try:
                if self._promoter is not None:
                    promoted = self._promoter.resume_next(self.worker_id)
                    if promoted is not None:
                        return promoted
                return claims.claim_next_trial(
                    self.storage,
                    self.study.study_id,
                    self.worker_id,
                    skip_paused=self._promoter is not None,
                )
            except Exception:
                failed = True
                raise

        claim = self._with_epoch(lambda: self._retry(attempt, "claim a trial"))
        if claim is not None and (claim.waiting is None or claim.waiting < self._sample_below()):
            self._maybe_sample_ahead()
        return claim

    def _with_epoch(self, claim_one: Callable[[], Claim | None]) -> Claim | None:
        """`claim_one()`, with one epoch of the study's budget reserved first (and given back
        if there is no trial to claim); None without claiming when the budget is spent."""
        limits = self._limits
        if limits is None:
            return claim_one()
        if not self._retry(lambda: limits.reserve(self._first_chunk), "reserve an epoch"):
            return None
        claim = claim_one()
        if claim is None:
            self._retry(limits.give_back, "return an epoch")
        return claim

    def _promote_draining(self) -> Claim | None:
        promoter = self._promoter
        assert promoter is not None
        return self._retry(
            lambda: promoter.resume_next(self.worker_id, draining=True), "promote a trial"
        )

    def _study_end(self, counts: trial_rows.Counts) -> str:
        """With a budget or promotion, when nothing was claimed: "sample" (new trials may
        start), "drain" (none may: promote paused trials with the looser rule), "wait" (for
        running trials), or "done" (the study is over: what is left queued or paused has been
        ended PRUNED with its last value)."""
        limits, promoter = self._limits, self._promoter
        if limits is not None and limits.spent():  # read after the running trials' count
            if counts.running > 0:
                return "wait"  # they give back what they do not train, or end
            return self._end_waiting("budget")
        if counts.total < self.config.study.max_trials:
            return "sample"
        if promoter is None:
            done = counts.waiting == 0 and counts.running == 0
            return "done" if done else "wait"
        if counts.queued > 0:
            return "wait"  # queued trials (handed back): the next claim takes them
        if counts.paused == 0:
            return "done" if counts.running == 0 else "wait"
        if counts.running > 0:
            return "drain"
        if promoter.can_resume(draining=True):
            return "drain"
        return self._end_waiting("n_trials")

    def _end_waiting(self, why: str) -> str:
        # This worker's sampler thread may still be inserting trials it sampled ahead: they
        # must be in before the cleanup below, which removes them, not after it, where they
        # would stay WAITING for ever (no worker is left to claim them).
        self._sampling_over = True
        self._join_sampler()
        ended, removed = pauses.end_waiting(self.storage, self.study.study_id, why)
        self._tracking.ended_by_study_end(ended)
        over = "budget spent" if why == "budget" else "no trial left to start or promote"
        if ended:
            logger.info(
                "study over (%s): %d paused or queued trial(s) end PRUNED with their last value",
                over,
                len(ended),
            )
        if self.artifacts is not None and not self.keep_checkpoints:
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
        return "done"

    def _sample_below(self) -> float:
        """Claims that leave fewer trials queued than this top the queue up."""
        if self.config.study.sampler not in LEARNS_FROM_RESULTS:
            return SAMPLE_AHEAD_BELOW
        # Samplers that learn keep a short queue of the latest knowledge: every claim that
        # leaves it short refills it (unknown until this process has looked: always).
        depth = self.sampler.depth
        return float("inf") if depth is None else depth

    def _run_claim(self, claim: Claim) -> None:
        self._claim, self._lost, self._fenced = claim, False, False
        self._stop_reason, self._paused_at, self._run_now = None, None, None
        self._trial_stop = threading.Event()
        if self._stop.is_set():
            self._trial_stop.set()
        try:
            if time.monotonic() - self._watchdog.renewed_at > 2 * self._heartbeat_s:
                self._retry(self._beat, "heartbeat")  # e.g. right after an outage
            self._share_cores()
            params, reported, previous = self._retry(lambda: self._load_trial(claim), "read")
            if self._rungs != []:
                self._retry(
                    lambda: self._load_pruner().begin_trial(
                        claim.trial_id, claim.number, resumed=bool(reported)
                    ),
                    "read",
                )
            run = TrialRun(
                number=claim.number,
                trial_id=claim.trial_id,
                params=params,
                config=self.config,
                seed=derived_seed(self.config.study.seed, claim.number, "train"),
                device=self.device,
                report=self._tracking.reporting(claim.number, self._reporter(claim, reported)),
                stop=self._trial_stop,
                checkpoints=self._checkpoint_store(claim),
                reported=dict(reported),
                previous_worker=previous,
            )
            self._run_now = run
            self._tracking.trial_started(run)
            if previous:
                logger.info(
                    "trial %d: resuming the work of %s (epochs reported: %d; params %s)",
                    claim.number,
                    previous,
                    max(reported, default=0),
                    _fmt_params(params),
                )
            else:
                logger.info("trial %d: starting (params %s)", claim.number, _fmt_params(params))
            started = time.monotonic()
            if self._progress:
                self._best = self._best_so_far()
            self._show(claim.number, None, None)
            while True:
                try:
                    outcome = self._run_trial(run)
                except Exception as exc:  # a bug in the trial function: record it, keep working
                    logger.exception("trial %d failed", claim.number)
                    outcome = TrialOutcome(status="failed", reason=f"{type(exc).__name__}: {exc}")
                if not (self._fenced and outcome.status == "preempted" and self._still_held(claim)):
                    break
                # Fenced, and nobody took the trial meanwhile: go on with it here.
                self._fenced, self._trial_stop = False, threading.Event()
                run = dataclasses.replace(
                    run,
                    stop=self._trial_stop,
                    reported=dict(reported),
                    previous_worker=self.worker_id,  # resumed from its own checkpoint
                )
            self._record(claim, run, outcome, time.monotonic() - started)
        except LeaseLost:
            self._lost = True
        finally:
            self._reports.end()
            self._give_back_epoch()
            if self._pruner is not None:
                self._pruner.end_trial()
            if self._lost:
                logger.warning(
                    "trial %d was taken over by another worker (this one was silent for longer "
                    "than the grace period); stopped it here, its new owner continues it",
                    claim.number,
                )
            self._claim = None
            self._publish_progress()

    def _publish_progress(self, *, now: bool = False) -> None:
        """The budget used and left, and the paused trials, for the dashboard (the study's user
        attributes): after a trial, at most every PUBLISH_EVERY_S; `now` when leaving. A
        display: a failure to write it is logged, never a fault of the trial or the worker."""
        if (self._limits is None and self._promoter is None) or self._gone is not None:
            return
        if not now and time.monotonic() - self._published_at < PUBLISH_EVERY_S:
            return
        self._published_at = time.monotonic()
        try:
            if now:  # the last word of this worker: worth waiting a moment for the database
                self._retry(
                    lambda: publish_progress(self.storage, self.study),
                    "write the study's budget for the dashboard",
                    attempts=3,
                )
            else:
                publish_progress(self.storage, self.study)
        except Exception as exc:
            log = logger.warning if now else logger.debug
            log("could not write the study's budget for the dashboard: %s", first_line(exc))

    def _record(self, claim: Claim, run: TrialRun, outcome: TrialOutcome, seconds: float) -> None:
        leftover = self._reports.end()  # written with the trial's end, in one transaction
        if self._gone is not None:
            raise RuntimeFailure(self._gone)
        # An epoch reserved and not trained goes back while the trial still runs: no worker
        # takes the study's budget for spent before it is.
        self._give_back_epoch()
        if self._lost:
            return
        self._tracking.trial_ended(run, outcome, paused=self._stop_reason == "paused")
        if outcome.user_attrs and (self._stop_reason == "paused" or outcome.status == "preempted"):
            # It may end without this worker (a study's end ends paused trials): say who ran it.
            attrs = {"worker_id": self.worker_id, "hostname": self.hostname, **outcome.user_attrs}
            self._retry(
                lambda: leftovers.record_provenance(self.storage, claim, attrs),
                "record the trial's provenance",
                attempts=5,
            )
        if outcome.status == "pruned" and self._stop_reason == "paused":
            self._pause(claim, leftover)
            return
        if outcome.status == "machine_fault":
            self._stop_for_machine_fault(claim, run, outcome, leftover)
        if outcome.status == "attempt_failed":
            then = self._hand_back_failed_attempt(claim, run, outcome, leftover)
            logger.warning("trial %d: %s; %s", claim.number, outcome.reason, then)
            return
        if outcome.status == "preempted":
            self._retry(
                lambda: fenced_writes.hand_back(
                    self.storage, claim, {"hpsearch:handed_back_by": self.worker_id}, leftover
                ),
                "hand the trial back",
                # Self-fenced: the database is away; hand it back when it answers (the lease
                # refuses it if another worker has taken the trial over meanwhile).
                attempts=None if self._fenced else 5,
            )
            logger.info("trial %d: checkpointed and handed back for another worker", claim.number)
            return
        end = trial_end(outcome, run.reported)
        system_attrs = {"fail_reason": end.fail_reason} if end.fail_reason else {}
        if outcome.status == "pruned" and self._stop_reason == "budget":
            system_attrs["hpsearch:ended_by"] = "budget"
        user_attrs = {"worker_id": self.worker_id, "hostname": self.hostname, **outcome.user_attrs}
        self._retry(
            lambda: fenced_writes.finish(
                self.storage, claim, end.state, end.value, user_attrs, system_attrs, leftover
            ),
            "record the trial's result",
        )
        self.trials_run += 1
        if run.checkpoints is not None and not self.keep_checkpoints:
            try:  # deleted, unless it is the best trial's (`hpsearch best --weights`)
                leftovers.after_finish(self.storage, run.checkpoints, self.study)
            except Exception:  # an old checkpoint costs disk space, not correctness
                logger.warning("trial %d: could not delete its checkpoint", claim.number)
        shown = "" if end.value is None else f" {self.config.study.metric} {end.value:.4g}"
        why = f" ({end.fail_reason})" if end.fail_reason else ""
        logger.info(
            "trial %d %s%s in %.1f s%s", claim.number, end.state.lower(), shown, seconds, why
        )

    def _give_back_epoch(self) -> None:
        if self._limits is not None and self._limits.holds_epoch:
            self._retry(self._limits.give_back, "return an epoch", attempts=5)

    def _pause(self, claim: Claim, leftover: dict[int, float]) -> None:
        """Hand the trial back paused at its rung, its checkpoint kept (promotion)."""
        assert self._promoter is not None and self._paused_at is not None
        epoch, value = self._paused_at
        promoter = self._promoter
        self._retry(
            lambda: promoter.pause(claim, epoch, value, leftover, self.worker_id),
            "pause the trial",
            attempts=5,
        )
        logger.info(
            "trial %d: paused at rung %d (%s %.4g), checkpoint kept; resumed once it ranks in "
            "the top 1/%d there",
            claim.number,
            epoch,
            self.config.study.metric,
            value,
            promoter.eta,
        )

    def _stop_for_machine_fault(
        self, claim: Claim, run: TrialRun, outcome: TrialOutcome, leftover: dict[int, float]
    ) -> None:
        """Hand the trial back untouched (one failed attempt, not a FAIL) and stop this worker:
        the fault is this machine's, and it would fail every trial the same way."""
        reason = outcome.reason or "the machine cannot train"
        then = self._hand_back_failed_attempt(claim, run, outcome, leftover)
        raise RuntimeFailure(f"this worker stops: {reason} (trial {claim.number} {then})")

    def _hand_back_failed_attempt(
        self, claim: Claim, run: TrialRun, outcome: TrialOutcome, leftover: dict[int, float]
    ) -> str:
        """Queue the trial again, counting one failed attempt (FAIL after max_attempts);
        says which happened."""
        reason = outcome.reason or "the attempt died"
        attempt = {
            "worker_id": self.worker_id,
            "generation": claim.generation,
            "hostname": self.hostname,
            "epoch": max(run.reported, default=0),
            "how": reason,
        }
        failed = self._retry(
            lambda: fenced_writes.hand_back(
                self.storage,
                claim,
                {"hpsearch:handed_back_by": self.worker_id},
                leftover,
                failed_attempt=attempt,
                max_attempts=self.config.study.max_attempts,
            ),
            "hand the trial back",
            attempts=5,
        )
        return (
            f"it ends FAIL, its worker having died {self.config.study.max_attempts} times"
            if failed
            else "handed back for another worker"
        )

    # -- reporting and pruning --------------------------------------------------------------

    def _reporter(self, claim: Claim, reported: dict[int, float]) -> Callable[[int, float], bool]:
        """The trial's report callback: values go to the background writer; at epochs where
        the pruner can decide, they are flushed first and the pruner is asked."""
        self._reports.begin(claim)
        last_pruned_check = max(reported, default=0)

        def report(epoch: int, value: float) -> bool:
            nonlocal last_pruned_check
            if self._lost:
                return True
            self._show(claim.number, epoch, value)
            self._reports.add(epoch, value)
            reported[epoch] = value
            # After the last epoch there is nothing left to save: the trial completes.
            needs_check = epoch < self.config.task.epochs and (
                self._rungs is None or any(last_pruned_check < s <= epoch for s in self._rungs)
            )
            if not needs_check:
                return False
            try:
                # The values need not be stored first: pruners compare the other trials' rung
                # attributes with this trial's values, which the pruner is handed here.
                decision = self._should_prune(claim, reported)
                self._db_back()
            except LeaseLost:
                self._lost = True
                return True
            except Exception as exc:
                if not is_transient(exc):
                    raise
                # Keep training: the values are written when the database is back, and the
                # pruner is asked at the next rung.
                self._db_down(exc, "report")
                return False
            last_pruned_check = epoch
            return decision

        if self._limits is None and self._promoter is None:
            return report
        return self._limited_reporter(claim, max(reported, default=0), report)

    def _limited_reporter(
        self, claim: Claim, resumed_from: int, report: Callable[[int, float], bool]
    ) -> Callable[[int, float], bool]:
        """`report`, for a study with a budget or promotion: every new epoch uses the epoch
        reserved for it and reserves the next (no reservation: stop, "budget"); at a rung,
        the trial goes on if it ranks in the top 1/eta there, else it stops to pause."""
        limits, promoter, epochs = self._limits, self._promoter, self.config.task.epochs
        high = resumed_from  # epochs up to here were trained before (a resumed trial re-reports)

        def limited(epoch: int, value: float) -> bool:
            nonlocal high
            stop = report(epoch, value)
            if epoch <= high:
                return stop
            high = epoch
            if limits is not None:
                limits.trained()
            if stop:
                self._say_stop("lost" if self._lost else "pruned")
                return True
            if epoch >= epochs:
                return False
            if promoter is not None and promoter.pauses_at(claim.number, epoch):
                try:
                    goes_on = promoter.goes_on(claim, epoch, value)
                    self._db_back()
                except Exception as exc:
                    if not is_transient(exc):
                        raise
                    self._db_down(exc, "report")
                    goes_on = True  # no decision without the database: train on
                if not goes_on:
                    self._paused_at = (epoch, value)
                    self._say_stop("paused")
                    return True
            if limits is not None:
                ahead = self._epochs_to_next_decision(claim, epoch)
                if not self._retry(lambda: limits.reserve(ahead), "reserve an epoch"):
                    self._say_stop("budget")
                    return True
            return False

        return limited

    def _epochs_to_next_decision(self, claim: Claim, epoch: int) -> int:
        """Epochs from `epoch` to the next one where the trial may stop (a rung; the end):
        reserved at once from the budget."""
        epochs = self.config.task.epochs
        if self._promoter is not None:
            bracket = self._promoter.bracket(claim.number)
            return self._promoter.rungs.next_level(bracket, epoch) - epoch
        if self._rungs is None:  # the median pruner decides at every epoch
            return 1
        return min([s for s in self._rungs if s > epoch] or [epochs]) - epoch

    def _say_stop(self, reason: str) -> None:
        self._stop_reason = reason
        if self._run_now is not None:
            self._run_now.stop_reason = reason

    def _should_prune(self, claim: Claim, reported: dict[int, float]) -> bool:
        return self._load_pruner().should_prune(claim.trial_id, reported)

    def _load_pruner(self) -> Pruner:
        if self._pruner is None:
            self._pruner = Pruner(self.storage, self.study, refresh_s=PRUNING_REFRESH_S)
        return self._pruner

    # -- sampling ahead ---------------------------------------------------------------------

    def _maybe_sample_ahead(self) -> None:
        """After a claim: if the queue is running low, refill it in the background."""
        if self._sampling_over:
            return  # the study is ending: nothing sampled now would be claimed
        if self._sampler_thread is not None and self._sampler_thread.is_alive():
            return
        thread = threading.Thread(target=self._sample_ahead_quietly, name="sampler", daemon=True)
        self._sampler_thread = thread
        thread.start()

    def _join_sampler(self) -> None:
        thread = self._sampler_thread
        if thread is not None and thread.is_alive():
            thread.join(timeout=SAMPLER_JOIN_S)
            if thread.is_alive():
                logger.warning("sampling ahead still runs after %.0f s", SAMPLER_JOIN_S)

    def _sample_ahead_quietly(self) -> None:
        try:
            self._top_up()
        except Exception as exc:  # the loop samples synchronously when it finds nothing queued
            if not is_transient(exc):
                logger.warning("sampling ahead failed: %s", first_line(exc))

    def _top_up(self) -> bool:
        return self.sampler.top_up(stop=self._stop)

    # -- trial state ------------------------------------------------------------------------

    def _load_trial(self, claim: Claim) -> tuple[dict[str, Any], dict[int, float], str | None]:
        """The trial's params (sampling any that are missing), the values it already has, and
        the worker that ran it before (if it is resumed)."""
        data = claim.loaded or claims.read_trial_data(self.storage, claim.trial_id)
        params = {
            name: json_to_distribution(dist).to_external_repr(value)
            for name, value, dist in data.params
        }
        missing = [p for p in self.config.space if p.name not in params]
        if missing:
            # Enqueued with fixed params only (optuna's enqueue_trial), or its sampler died.
            try:
                params.update(self.sampler.sample_params(claim.trial_id, claim.number, missing))
            except Exception as exc:
                if is_transient(exc):
                    raise
                self._retry(
                    lambda: fenced_writes.hand_back(self.storage, claim), "hand back", attempts=5
                )
                raise RuntimeFailure(
                    f"sampling the missing params of trial {claim.number} with the "
                    f"{self.config.study.sampler} sampler failed: {type(exc).__name__}: "
                    f"{first_line(exc)} (the trial is queued again)"
                ) from exc
        reported = {int(step): stored_float(v, kind) for step, v, kind in data.steps}
        return params, reported, data.previous_worker

    def _checkpoint_store(self, claim: Claim) -> CheckpointStore | None:
        if self.artifacts is None:
            return None

        def flush_reports() -> None:
            try:
                self._reports.flush()
            except LeaseLost:
                self._trial_lost(claim)
                raise

        return _WatchedCheckpoints(
            self.artifacts,
            self.storage,
            claim,
            self.study,
            before_publish=flush_reports,
            on_error=self._db_down,
        )

    # -- liveness ---------------------------------------------------------------------------

    def _beat(self) -> bool:
        """One heartbeat; False if this worker no longer holds its trial."""
        claim, sent = self._claim, time.monotonic()
        holds = liveness.heartbeat(self.storage, self.worker_id, claim)
        self._watchdog.renewed(sent)
        if claim is not None and not holds:
            self._trial_lost(claim)
        return holds

    def _heartbeat_loop(self) -> None:
        while not self._stop.wait(self._heartbeat_s * (0.8 + 0.4 * random.random())):
            try:
                self._beat()
                self._db_back()
                max_attempts = self.config.study.max_attempts
                for reaped in liveness.reap(self.storage, self.study.study_id, max_attempts):
                    if reaped.failed:
                        logger.warning(
                            "worker %s went silent for longer than its grace period: trial %d "
                            "has now taken down %d workers and ends FAIL (max_attempts)",
                            reaped.worker_id,
                            reaped.number,
                            max_attempts,
                        )
                        continue
                    logger.warning(
                        "worker %s went silent for longer than its grace period: trial %d is "
                        "queued again and will resume from its last checkpoint",
                        reaped.worker_id,
                        reaped.number,
                    )
            except Exception as exc:
                if not is_transient(exc) and gone_reason(exc) is None:
                    logger.exception("heartbeat failed")
                self._db_down(exc, "heartbeat")

    def _share_cores(self) -> None:
        """This worker's share of the machine's CPU threads (`search.worker.cpu_share`)."""
        try:
            threads = share_cpu_threads(self.storage, self.hostname)
        except Exception as exc:  # the share is looked at again before the next trial
            if not is_transient(exc):
                raise
            return
        if threads is not None and threads != self._threads:
            logger.info(
                "%d CPU thread(s) per trial: this worker's share of the cores of %s among its "
                "live workers",
                threads,
                self.hostname,
            )
        self._threads = threads

    def _still_held(self, claim: Claim) -> bool:
        """After a self-fence: wait for the database; whether this worker still holds `claim`
        (nobody reaped it meanwhile: a short outage, or a restarted server's fresh grace)."""
        if self._stop.is_set():
            return False
        held = self._retry(self._beat, "heartbeat")
        if held and not self._stop.is_set():
            logger.info(
                "trial %d: the database answers again and this worker still holds the trial: "
                "going on with it here, from its last checkpoint",
                claim.number,
            )
            return True
        return False

    def _self_fence(self, silent_s: float) -> None:
        """The lease watchdog's alarm: stop the running trial before anyone may take it over."""
        claim = self._claim
        if claim is None or self._lost or self._gone is not None:
            return
        self._fenced = True
        logger.warning(
            "trial %d: no heartbeat has reached the database for %.0f s (grace period %.0f s): "
            "stopping the trial here before another worker may take it over; it goes on here "
            "if this worker still holds it when the database answers, else elsewhere from "
            "its last checkpoint",
            claim.number,
            silent_s,
            self.grace_s,
        )
        self._trial_stop.set()

    def _trial_lost(self, claim: Claim) -> None:
        """Another worker holds `claim` now: stop it here, if it is still the one running."""
        if claim == self._claim:
            self._lost = True
            self._trial_stop.set()

    def _db_down(self, exc: BaseException, what: str) -> None:
        gone = gone_reason(exc)
        if gone is not None:
            self._give_up(gone)
            return
        if self._db_down_since is None:
            self._db_down_since = time.monotonic()
            logger.warning(
                "database unreachable (%s: %s); training continues, retrying",
                what,
                first_line(exc),
            )

    def _db_back(self) -> None:
        if self._db_down_since is not None and self._gone is None:
            logger.warning(
                "database reachable again after %.0f s", time.monotonic() - self._db_down_since
            )
            self._db_down_since = None

    def _give_up(self, gone: str) -> None:
        """The database or the study is gone for good: stop the trial and the worker."""
        if self._gone is None:
            self._gone = (
                f"study {self.study.name!r} on {self.storage.safe_url}: {gone}; this worker stops"
            )
        self._stop.set()
        self._trial_stop.set()

    def _retry_error(self, exc: BaseException, what: str) -> None:
        self._db_down(exc, what)
        if self._gone is not None:
            raise RuntimeFailure(self._gone) from exc

    def _retry(self, fn: Callable[[], T], what: str, *, attempts: int | None = None) -> T:
        return retry(
            fn, what, attempts=attempts, on_error=self._retry_error, on_success=self._db_back
        )

    # -- signals and progress ---------------------------------------------------------------

    def _install_signal_handlers(self) -> Callable[[], None]:
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}

        def on_signal(signum: int, _frame: Any) -> None:
            if signum == signal.SIGINT and self._stop_signal == signal.SIGINT:
                raise KeyboardInterrupt  # second Ctrl-C: stop now
            self._stop_signal = signum
            name = "SIGTERM" if signum == signal.SIGTERM else "Ctrl-C"
            logger.warning("%s: checkpointing the running trial and handing it back", name)
            self._stop.set()
            self._trial_stop.set()

        for s in previous:
            signal.signal(s, on_signal)

        def restore() -> None:
            for s, handler in previous.items():
                signal.signal(s, handler)

        return restore

    def _show(self, number: int, epoch: int | None, value: float | None) -> None:
        if not self._progress:
            return
        epochs = self.config.task.epochs
        where = (
            f"epoch {epoch}/{epochs} {self.config.study.metric} {value:.4f}"
            if epoch
            else "starting"
        )
        self._line.show(f"[{self.worker_id}] trial {number}: {where}{self._best}")

    def _best_so_far(self) -> str:
        try:
            study = self.study
            best = best_trial(self.storage, study.study_id, study.config.study.direction)
        except Exception:  # the progress line can do without it this time
            return self._best
        if best is None:
            return ""
        return f" | best {best[1]:.4g} (trial {best[0]})"

    def _end_progress(self) -> None:
        if self._progress:
            self._line.clear()


class _WatchedCheckpoints(TrialCheckpoints):
    """TrialCheckpoints whose failed writes tell the worker about the database: a checkpoint
    that finds the database gone stops the trial at once, not epochs later."""

    def __init__(
        self, *args: Any, on_error: Callable[[BaseException, str], None], **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self._on_error = on_error

    def write(self, data: Any) -> None:
        try:
            super().write(data)
        except Exception as exc:
            if is_transient(exc) or gone_reason(exc) is not None:
                self._on_error(exc, "checkpoint")
            raise


def _fmt_params(params: dict[str, Any]) -> str:
    return ", ".join(
        f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items()
    )
