"""Recording how a trial ended: one `match` on its `StopReason` (`search.worker.trial`).

Lost: nothing (its new owner records it). Paused at a rung: handed back paused, its checkpoint
kept. Interrupted: checkpointed and handed back, to resume elsewhere. Cut by the study's budget
in the middle of a rung (`BudgetSpent`): handed back as interrupted (``hpsearch:cut_at``, its
checkpoint kept): the study's end ends it PRUNED with its last value, and a raised budget
(`hpsearch extend`) queues it again, to go on from its checkpoint; epochs given back by other
trials before the end resume it like any queued trial. A machine fault: handed back untouched
(one failed attempt) and the worker stops; an attempt that died: handed back as
one failed attempt. Anything else is the trial's end: COMPLETE, PRUNED (by the pruner) or FAIL,
written with its last values in one fenced transaction (`search.db.fenced_writes`); the study's
end writes the end of what was left waiting (`hpsearch:ended_by`, `search.db.pauses`).

    recorder = TrialRecorder(storage, study, worker_id, hostname, rules=rules, health=health,
                             tracking=tracking, keep_checkpoints=False)
    recorder.record(Ending(claim, run, outcome, reporter.ended_by(outcome), leftover, seconds))
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from search.db import fenced_writes
from search.db.leases import Claim
from search.db.storage import Storage
from search.errors import RuntimeFailure
from search.study.studies import StudyRef
from search.worker import leftovers
from search.worker.decisions import StudyRules
from search.worker.health import DatabaseHealth
from search.worker.tracked import TrialTracking
from search.worker.trial import (
    BudgetSpent,
    Finished,
    Interrupted,
    Lost,
    Paused,
    StopReason,
    TrialOutcome,
    TrialRun,
    trial_end,
)

__all__ = ["Ending", "TrialRecorder"]

logger = logging.getLogger("search.worker.recording")


@dataclass(frozen=True)
class Ending:
    """A trial that ended here: what its function returned, why it stopped, the values not
    written yet (they go with its end, in one transaction) and how long it ran."""

    claim: Claim
    run: TrialRun
    outcome: TrialOutcome
    reason: StopReason
    leftover: dict[int, float]
    seconds: float


class TrialRecorder:
    """Writes each trial's end (or hand-back) for one worker."""

    def __init__(
        self,
        storage: Storage,
        study: StudyRef,
        worker_id: str,
        hostname: str,
        *,
        rules: StudyRules,
        health: DatabaseHealth,
        tracking: TrialTracking,
        keep_checkpoints: bool,
    ) -> None:
        self.storage, self.study, self.worker_id, self.hostname = (
            storage,
            study,
            worker_id,
            hostname,
        )
        self.rules, self.health, self.tracking = rules, health, tracking
        self.keep_checkpoints = keep_checkpoints
        self.trials_run = 0  # trials this worker recorded the end of
        self.runs = 0  # trial runs it trained, paused and handed back ones included

    def record(self, ending: Ending) -> None:
        self.health.raise_if_gone()
        if isinstance(ending.reason, Lost):
            return
        self.runs += 1
        waits = isinstance(ending.reason, (Paused, BudgetSpent))  # to go on later, maybe
        self.tracking.trial_ended(ending.run, ending.outcome, paused=waits)
        claim, status = ending.claim, ending.outcome.status
        if ending.outcome.user_attrs and (waits or status == "preempted"):
            # It may end without this worker (a study's end ends paused trials): say who ran it.
            attrs = {
                "worker_id": self.worker_id,
                "hostname": self.hostname,
                **ending.outcome.user_attrs,
            }
            self.health.retry(
                lambda: leftovers.record_provenance(self.storage, claim, attrs),
                "record the trial's provenance",
                attempts=5,
            )
        match ending.reason:
            case Paused(rung=rung, value=value):
                self._pause(claim, rung, value, ending.leftover)
            case Interrupted(fenced=fenced):
                self._hand_back(claim, ending.leftover, fenced=fenced)
            case BudgetSpent(epoch=epoch):
                self._cut(claim, epoch, ending.leftover)
            case Finished() if status == "machine_fault":
                # The fault is this machine's, and it would fail every trial the same way.
                reason = ending.outcome.reason or "the machine cannot train"
                then = self._hand_back_failed_attempt(ending)
                raise RuntimeFailure(f"this worker stops: {reason} (trial {claim.number} {then})")
            case Finished() if status == "attempt_failed":
                then = self._hand_back_failed_attempt(ending)
                logger.warning("trial %d: %s; %s", claim.number, ending.outcome.reason, then)
            case _:
                self._finish(ending)

    def _finish(self, ending: Ending) -> None:
        claim, run, outcome = ending.claim, ending.run, ending.outcome
        end = trial_end(outcome, run.reported)
        system_attrs = {"fail_reason": end.fail_reason} if end.fail_reason else {}
        user_attrs = {"worker_id": self.worker_id, "hostname": self.hostname, **outcome.user_attrs}
        if run.previous_worker is not None:
            # Resumed: this run's provenance replaces what the run before it recorded.
            self.health.retry(
                lambda: leftovers.record_provenance(self.storage, claim, user_attrs),
                "record the trial's provenance",
            )
        self.health.retry(
            lambda: fenced_writes.finish(
                self.storage, claim, end.state, end.value, user_attrs, system_attrs, ending.leftover
            ),
            "record the trial's result",
        )
        self.trials_run += 1
        if run.checkpoints is not None and not self.keep_checkpoints:
            try:  # deleted, unless it is the best trial's (`hpsearch best --weights`)
                leftovers.after_finish(self.storage, run.checkpoints, self.study)
            except Exception:  # an old checkpoint costs disk space, not correctness
                logger.warning("trial %d: could not delete its checkpoint", claim.number)
        metric = self.study.config.study.metric
        shown = "" if end.value is None else f" {metric} {end.value:.4g}"
        why = f" ({end.fail_reason})" if end.fail_reason else ""
        logger.info(
            "trial %d %s%s in %.1f s%s", claim.number, end.state.lower(), shown, ending.seconds, why
        )

    def _pause(self, claim: Claim, rung: int, value: float, leftover: dict[int, float]) -> None:
        """Hand the trial back paused at its rung, its checkpoint kept (promotion)."""
        promoter = self.rules.promoter
        assert promoter is not None
        self.health.retry(
            lambda: promoter.pause(claim, rung, value, leftover, self.worker_id),
            "pause the trial",
            attempts=5,
        )
        logger.info(
            "trial %d: paused at rung %d (%s %.4g), checkpoint kept; resumed once it ranks in "
            "the top 1/%d there",
            claim.number,
            rung,
            self.study.config.study.metric,
            value,
            promoter.eta,
        )

    def _cut(self, claim: Claim, epoch: int, leftover: dict[int, float]) -> None:
        """The study's budget allowed no epoch after `epoch`: handed back with its checkpoint,
        to end with the study (PRUNED) or go on with more budget."""
        attrs = {"hpsearch:handed_back_by": self.worker_id, "hpsearch:cut_at": epoch}
        self.health.retry(
            lambda: fenced_writes.hand_back(self.storage, claim, attrs, leftover),
            "hand the trial back",
            attempts=5,
        )
        logger.info(
            "trial %d: the study's budget is spent after epoch %d; checkpoint kept: it ends "
            "PRUNED with the study, or goes on if the budget is raised",
            claim.number,
            epoch,
        )

    def _hand_back(self, claim: Claim, leftover: dict[int, float], *, fenced: bool) -> None:
        self.health.retry(
            lambda: fenced_writes.hand_back(
                self.storage, claim, {"hpsearch:handed_back_by": self.worker_id}, leftover
            ),
            "hand the trial back",
            # Self-fenced: the database is away; hand it back when it answers (the lease
            # refuses it if another worker has taken the trial over meanwhile).
            attempts=None if fenced else 5,
        )
        logger.info("trial %d: checkpointed and handed back for another worker", claim.number)

    def _hand_back_failed_attempt(self, ending: Ending) -> str:
        """Queue the trial again, counting one failed attempt (FAIL after max_attempts);
        says which happened."""
        claim, max_attempts = ending.claim, self.study.config.study.max_attempts
        attempt = {
            "worker_id": self.worker_id,
            "generation": claim.generation,
            "hostname": self.hostname,
            "epoch": max(ending.run.reported, default=0),
            "how": ending.outcome.reason or "the attempt died",
        }
        failed = self.health.retry(
            lambda: fenced_writes.hand_back(
                self.storage,
                claim,
                {"hpsearch:handed_back_by": self.worker_id},
                ending.leftover,
                failed_attempt=attempt,
                max_attempts=max_attempts,
            ),
            "hand the trial back",
            attempts=5,
        )
        return (
            f"it ends FAIL, its worker having died {max_attempts} times"
            if failed
            else "handed back for another worker"
        )
