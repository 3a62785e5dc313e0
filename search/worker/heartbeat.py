"""A worker's heartbeat: a background thread that says it is alive, reaps dead workers' trials,
and notices when this worker's trial was taken over; with the lease watchdog that stops the
trial when no heartbeat got through for most of the grace period (`search.worker.self_fence`).

    heartbeat = Heartbeat(storage, study, worker_id, health, grace_s)
    heartbeat.start(registered_at)
    ...
    heartbeat.stop()
"""

from __future__ import annotations

import logging
import random
import threading
import time

from search.db import liveness
from search.db.gone import gone_reason
from search.db.storage import Storage, is_transient
from search.study.studies import StudyRef
from search.worker.health import DatabaseHealth
from search.worker.self_fence import LeaseWatchdog

__all__ = ["Heartbeat"]

logger = logging.getLogger("search.worker.heartbeat")


class Heartbeat:
    """Heartbeats every grace/6 seconds (and reaps); the watchdog fences the trial in hand."""

    def __init__(
        self,
        storage: Storage,
        study: StudyRef,
        worker_id: str,
        health: DatabaseHealth,
        grace_s: float,
    ) -> None:
        self.storage, self.study, self.worker_id, self.health = storage, study, worker_id, health
        self.period_s = max(0.2, grace_s / 6)
        self.watchdog = LeaseWatchdog(grace_s, on_expired=health.silent)
        health.fence_due = self.watchdog.expire_if_due
        self._thread = threading.Thread(target=self._loop, name="heartbeat", daemon=True)
        self._done = threading.Event()

    def start(self, registered_at: float) -> None:
        """After registering (sent at `registered_at`, `time.monotonic()`)."""
        self.watchdog.renewed(registered_at)
        self.watchdog.start()
        self._thread.start()

    def stop(self) -> None:
        """When the worker leaves: after its trial was recorded or handed back. Not when it is
        told to stop (a SIGTERM): the trial's checkpoint and hand-back may take longer than the
        grace period, and a silent worker's trial is taken over, as a failed attempt."""
        self._done.set()
        self.watchdog.stop()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def beat(self) -> bool:
        """One heartbeat; False if this worker no longer holds its trial."""
        held, sent = self.health.trial, time.monotonic()
        claim = None if held is None else held.claim
        holds = liveness.heartbeat(self.storage, self.worker_id, claim)
        self.watchdog.renewed(sent)
        if claim is not None and not holds:
            self.health.lost(claim)
        return holds

    def beat_if_stale(self) -> None:
        """Before a trial starts: a heartbeat now if the last one is old (e.g. after an outage)."""
        if time.monotonic() - self.watchdog.renewed_at > 2 * self.period_s:
            self._beat_until_answered()

    def still_held(self, number: int) -> bool:
        """After a self-fence: wait for the database; whether this worker still holds its trial
        (nobody reaped it meanwhile: a short outage, or a restarted server's fresh grace)."""
        stop = self.health.stop
        if stop.is_set():
            return False
        held = self._beat_until_answered()
        if held and not stop.is_set():
            logger.info(
                "trial %d: the database answers again and this worker still holds the trial: "
                "going on with it here, from its last checkpoint",
                number,
            )
            return True
        return False

    def _beat_until_answered(self) -> bool:
        """`beat()`, retried at the heartbeat's own pace (not the usual backoff, which grows to
        15 s): after an outage, a worker that waits longer than its grace period to beat again
        is taken for dead, and its trial is taken over."""
        return self.health.retry(self.beat, "heartbeat", max_delay_s=self.period_s)

    def _loop(self) -> None:
        while not self._done.wait(self.period_s * (0.8 + 0.4 * random.random())):
            try:
                self.beat()
                self.health.back()
                self._reap()
            except Exception as exc:
                if not is_transient(exc) and gone_reason(exc) is None:
                    logger.exception("heartbeat failed")
                self.health.down(exc, "heartbeat")

    def _reap(self) -> None:
        max_attempts = self.study.config.study.max_attempts
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
