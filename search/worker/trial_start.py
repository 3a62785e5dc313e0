"""Starting a claimed trial: what its function is handed (`TrialRun`) and its reporter.

Before each trial the worker takes its share of the machine's CPU threads
(`search.worker.cpu_share`), reads the trial's params (sampling any that are missing: enqueued
with fixed params only, or its sampler died) and the values it already has (it is resumed), tells
the pruner, the report writer and the trackers that it starts, and builds its report callback
(`search.worker.decisions.TrialReporter`) and its checkpoint store.

    starter = TrialStarter(storage, study, worker_id, device, hostname, rules=..., ...)
    run, reporter = starter.start(held)
"""

from __future__ import annotations

import logging
from typing import Any

from search.db import claims, fenced_writes
from search.db.gone import gone_reason
from search.db.leases import Claim, LeaseLost
from search.db.storage import Storage, is_transient
from search.db.tables import stored_float
from search.db.trial_changes import param_value
from search.errors import RuntimeFailure, first_line
from search.sampling.hedge import describe
from search.sampling.sample_ahead import TrialSampler
from search.sampling.samplers import derived_seed
from search.study.studies import StudyRef
from search.worker.artifacts import ArtifactStore, TrialCheckpoints
from search.worker.cpu_share import CoreShare
from search.worker.decisions import StudyRules, TrialReporter
from search.worker.health import DatabaseHealth, HeldTrial
from search.worker.progress import Progress
from search.worker.report_writer import ReportWriter
from search.worker.tracked import TrialTracking
from search.worker.trial import TrialRun
from trainer import CheckpointStore

__all__ = ["TrialData", "TrialStarter", "load_trial"]

logger = logging.getLogger("search.worker.trial_start")

TrialData = tuple[dict[str, Any], dict[int, float], str | None]
"""A claimed trial's params, the values it already has, and the worker that ran it before."""


class TrialStarter:
    """Builds each claimed trial's `TrialRun` and reporter, for one worker."""

    def __init__(
        self,
        storage: Storage,
        study: StudyRef,
        worker_id: str,
        device: str,
        hostname: str,
        *,
        rules: StudyRules,
        health: DatabaseHealth,
        sampler: TrialSampler,
        writer: ReportWriter,
        tracking: TrialTracking,
        progress: Progress,
        artifacts: ArtifactStore | None,
    ) -> None:
        self.storage, self.study, self.worker_id, self.device = storage, study, worker_id, device
        self.hostname = hostname
        self.rules, self.health, self.sampler, self.writer = rules, health, sampler, writer
        self.tracking, self.progress, self.artifacts = tracking, progress, artifacts
        self._threads: int | None = None  # CPU threads of this worker's share of the machine
        self._core_share = CoreShare(storage, hostname)

    def start(self, held: HeldTrial) -> tuple[TrialRun, TrialReporter]:
        claim, config = held.claim, self.study.config
        self._share_cores()
        params, reported, previous = self.health.retry(
            lambda: load_trial(self.storage, self.sampler, self.study, claim, self.health),
            "read",
        )
        self.rules.begin_trial(claim, self.health, resumed=bool(reported))
        self.writer.begin(claim)
        reporter = TrialReporter(
            claim,
            reported,
            rules=self.rules,
            writer=self.writer,
            health=self.health,
            held=held,
            show=self.progress.show,
        )
        run = TrialRun(
            number=claim.number,
            trial_id=claim.trial_id,
            params=params,
            config=config,
            seed=derived_seed(config.study.seed, claim.number, "train"),
            device=self.device,
            report=self.tracking.reporting(claim.number, reporter),
            stop=held.stop,
            checkpoints=self._checkpoint_store(claim),
            reported=dict(reported),
            previous_worker=previous,
            why_stopped=lambda: reporter.stopped,
        )
        self.tracking.trial_started(run)
        if previous:
            logger.info(
                "trial %d: resuming the work of %s (epochs reported: %d; params %s)",
                claim.number,
                previous,
                max(reported, default=0),
                _fmt_params(params),
            )
        else:
            promoter, level = self.rules.promoter, None
            if promoter is not None and promoter.hedge_level is not None:
                # Read once per trial: the promoter keeps it for the trial's first rungs.
                level = self.health.retry(lambda: promoter.hedged_at(claim.trial_id), "read")
            hedge = None if level is None else describe(level)
            logger.info(
                "trial %d: starting (params %s)%s",
                claim.number,
                _fmt_params(params),
                f"; {hedge}" if hedge else "",
            )
        self.progress.starting(claim.number)
        return run, reporter

    def _share_cores(self) -> None:
        """This worker's share of the machine's CPU threads (`search.worker.cpu_share`)."""
        try:
            threads = self._core_share.apply()
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

    def _checkpoint_store(self, claim: Claim) -> CheckpointStore | None:
        if self.artifacts is None:
            return None

        def flush_reports() -> None:
            try:
                self.writer.flush()
            except LeaseLost:
                self.health.lost(claim)
                raise

        return _WatchedCheckpoints(
            self.artifacts,
            self.storage,
            claim,
            self.study,
            before_publish=flush_reports,
            health=self.health,
        )


def load_trial(
    storage: Storage,
    sampler: TrialSampler,
    study: StudyRef,
    claim: Claim,
    health: DatabaseHealth,
) -> TrialData:
    """The trial's params (sampling any that are missing), the values it already has, and the
    worker that ran it before (if it is resumed)."""
    data = claim.loaded or claims.read_trial_data(storage, claim.trial_id)
    params = {name: param_value(value, dist) for name, value, dist in data.params}
    missing = [p for p in study.config.space if p.name not in params]
    if missing:
        # Enqueued with fixed params only (optuna's enqueue_trial), or its sampler died.
        try:
            params.update(sampler.sample_params(claim.trial_id, claim.number, missing))
        except Exception as exc:
            if is_transient(exc):
                raise
            health.retry(lambda: fenced_writes.hand_back(storage, claim), "hand back", attempts=5)
            raise RuntimeFailure(
                f"sampling the missing params of trial {claim.number} with the "
                f"{study.config.study.sampler} sampler failed: {type(exc).__name__}: "
                f"{first_line(exc)} (the trial is queued again)"
            ) from exc
    reported = {int(step): stored_float(v, kind) for step, v, kind in data.steps}
    return params, reported, data.previous_worker


class _WatchedCheckpoints(TrialCheckpoints):
    """TrialCheckpoints whose failed writes tell the database's health: a checkpoint that
    finds the database gone stops the trial at once, not epochs later."""

    def __init__(self, *args: Any, health: DatabaseHealth, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._health = health

    def write(self, data: Any) -> None:
        try:
            super().write(data)
        except Exception as exc:
            if is_transient(exc) or gone_reason(exc) is not None:
                self._health.down(exc, "checkpoint")
            raise


def _fmt_params(params: dict[str, Any]) -> str:
    return ", ".join(
        f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items()
    )
