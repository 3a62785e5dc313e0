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

One trial's way through the worker, one module a step:

    claiming.Claimer.next()          the next trial, or the study's end (StudyOver)
    trial_start.TrialStarter.start() its params, its TrialRun and its reporter
    the trial function               run.report(epoch, value) -> stop
      decisions.TrialReporter        pruner, budget, promotion; why it stopped (StopReason)
    recording.TrialRecorder.record() one `match` on the StopReason: end, pause or hand back

Beside them: `health.DatabaseHealth` (every part reports the database's errors and a trial
taken over to it), `heartbeat.Heartbeat` (and the lease watchdog), `signals.StopSignals`,
`progress.Progress` (the terminal line, the budget on the dashboard).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import time
import uuid

from search.db import liveness
from search.db.gone import gone_reason
from search.db.leases import Claim, LeaseLost
from search.db.storage import Storage
from search.errors import RuntimeFailure
from search.sampling.sample_ahead import TrialSampler
from search.study.studies import StudyRef
from search.worker.artifacts import ArtifactStore
from search.worker.claiming import Claimer, StudyOver
from search.worker.decisions import StudyRules, TrialReporter
from search.worker.health import DatabaseHealth, HeldTrial
from search.worker.heartbeat import Heartbeat
from search.worker.progress import Progress
from search.worker.provenance import launched_by
from search.worker.recording import Ending, TrialRecorder
from search.worker.report_writer import ReportWriter
from search.worker.signals import StopSignals
from search.worker.tracked import TrialTracking
from search.worker.training import run_training
from search.worker.trial import TrialFunction, TrialOutcome, TrialRun
from search.worker.trial_start import TrialStarter

__all__ = ["DEFAULT_GRACE_S", "Worker"]

logger = logging.getLogger("search.worker.loop")

DEFAULT_GRACE_S = 60.0
"""Seconds of silence after which a worker counts as dead and its trial is resumed elsewhere.

Heartbeats go out every grace/6 seconds. 60 s rides out garbage-collection pauses and brief
network trouble; a preempted machine's trial restarts elsewhere within about a minute.
"""


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
        self.storage, self.study = storage, study
        hostname = socket.gethostname()
        worker_id = f"{hostname[:40]}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.me = liveness.WorkerInfo(
            worker_id=worker_id,
            study_id=study.study_id,
            hostname=hostname,
            pid=os.getpid(),
            device=device,
            grace_s=grace_s,
            launched_by=launched_by(),
        )
        """This worker as its row in the workers table says."""
        self._run_trial = run_trial or run_training
        # Every part reports the database's errors, and the trial taken over, to one place.
        self._health = health = DatabaseHealth(storage, study, grace_s)
        self._rules = rules = StudyRules(storage, study)
        sampler = TrialSampler(storage, study, worker_id)
        tracking = TrialTracking(study, worker_id=worker_id, device=device)
        self._claimer = Claimer(
            storage,
            study,
            worker_id,
            rules=rules,
            health=health,
            sampler=sampler,
            tracking=tracking,
            artifacts=None if keep_checkpoints else artifacts,
        )
        self._heartbeat = Heartbeat(storage, study, worker_id, health, grace_s)
        self._reports = ReportWriter(
            storage, on_lost=health.lost, on_error=health.down, on_success=health.back
        )
        self._progress = Progress(
            storage, study, worker_id, rules=rules, health=health, live=progress
        )
        self._starter = TrialStarter(
            storage,
            study,
            worker_id,
            device,
            hostname,
            rules=rules,
            health=health,
            sampler=sampler,
            writer=self._reports,
            tracking=tracking,
            progress=self._progress,
            artifacts=artifacts,
        )
        self._recorder = TrialRecorder(
            storage,
            study,
            worker_id,
            hostname,
            rules=rules,
            health=health,
            tracking=tracking,
            keep_checkpoints=keep_checkpoints,
        )

    @property
    def worker_id(self) -> str:
        return self.me.worker_id

    @property
    def trials_run(self) -> int:
        """Trials this worker ran to their recorded end."""
        return self._recorder.trials_run

    # -- the loop ---------------------------------------------------------------------------

    def prepare(self) -> None:
        """Load what every trial needs (Optuna, the study for pruning) before the first claim,
        so that start-up cost is not paid inside a trial."""
        self._rules.prepare(self._health)

    def run(self) -> int:
        """Pull trials until the study is done; returns the process exit code."""
        health, me = self._health, self.me
        self.prepare()
        signals = StopSignals(on_stop=health.stop_all)
        restore = signals.install()
        registering = time.monotonic()
        health.retry(lambda: liveness.register(self.storage, me), "register worker")
        self._heartbeat.start(registering)
        logger.info(
            "worker %s joined study %r on %s (device %s, grace %.0f s)",
            me.worker_id,
            self.study.name,
            self.storage.safe_url,
            me.device,
            me.grace_s,
        )
        reason = "done"
        try:
            while not isinstance(claim := self._claimer.next(), StudyOver):
                self._run_claim(claim)
            health.raise_if_gone()
            if health.stop.is_set():
                reason = signals.reason
        except BaseException as exc:
            reason = f"error: {type(exc).__name__}"
            gone = gone_reason(exc) if isinstance(exc, Exception) else None
            if gone is not None and not isinstance(exc, RuntimeFailure):
                health.give_up(gone)
                raise RuntimeFailure(health.gone or gone) from exc
            raise
        finally:
            health.stop.set()
            self._heartbeat.stop()
            self._reports.close()
            self._rules.close()
            self._claimer.close()
            self._progress.publish(now=True)
            self._leave(reason)
            restore()
            self._progress.close()
            self._recorder.tracking.close(
                study_done=reason == "done", hurry=signals.received is not None
            )
        why = "the study is done" if reason == "done" else reason
        logger.info(
            "worker %s leaves (%s); it trained %d trial run(s), %d of them to the trial's end",
            me.worker_id,
            why,
            self._recorder.runs,
            self.trials_run,
        )
        return signals.exit_code

    def _leave(self, reason: str) -> None:
        """This worker's row says it stopped, and why."""
        try:
            if self._health.gone is None:  # else there is nothing left to write to
                self._health.retry(
                    lambda: liveness.unregister(self.storage, self.me.worker_id, reason),
                    "unregister",
                    attempts=3,
                )
        except Exception:  # the reaper treats a silent worker the same way
            logger.warning("could not record this worker's exit; it will time out instead")

    # -- one trial: start, train, record its end --------------------------------------------

    def _run_claim(self, claim: Claim) -> None:
        held = self._health.hold(claim)
        try:
            try:
                self._heartbeat.beat_if_stale()  # e.g. right after an outage
                run, reporter = self._starter.start(held)
                started = time.monotonic()
                run, outcome = self._train(run, reporter, held)
            finally:
                # Values not written yet go with the trial's end, in one transaction; an epoch
                # reserved and not trained goes back before it (no worker may take the study's
                # budget for spent before it is).
                leftover = self._reports.end()
                self._rules.give_back_epoch(self._health)
            seconds = time.monotonic() - started
            ending = Ending(claim, run, outcome, reporter.ended_by(outcome), leftover, seconds)
            self._recorder.record(ending)
        except LeaseLost:
            held.lost = True
        finally:
            self._rules.end_trial()
            if held.lost:
                logger.warning(
                    "trial %d was taken over by another worker (this one was silent for longer "
                    "than the grace period); stopped it here, its new owner continues it",
                    claim.number,
                )
            self._health.release()
            self._progress.publish()

    def _train(
        self, run: TrialRun, reporter: TrialReporter, held: HeldTrial
    ) -> tuple[TrialRun, TrialOutcome]:
        """The trial function's outcome (and the run it was handed last); a trial stopped here
        for want of a heartbeat goes on here, from its checkpoint, if this worker still holds it
        once the database answers."""
        while True:
            try:
                outcome = self._run_trial(run)
            except Exception as exc:  # a bug in the trial function: record it, keep working
                logger.exception("trial %d failed", run.number)
                outcome = TrialOutcome(status="failed", reason=f"{type(exc).__name__}: {exc}")
            fenced = held.fenced and outcome.status == "preempted"
            if not (fenced and self._heartbeat.still_held(run.number)):
                return run, outcome
            run = dataclasses.replace(
                run,
                stop=held.go_on_after_fence(),
                reported=dict(reporter.values),
                previous_worker=self.me.worker_id,  # resumed from its own checkpoint
            )
