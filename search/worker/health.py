"""Database health: the one place every part of a worker reports the database's errors to.

The report writer, the heartbeat, the lease watchdog, checkpoint writes and every retried
statement tell `DatabaseHealth` what they saw: an error (`down`), an answer (`back`), the trial
taken over by another worker (`lost`), no heartbeat through for most of the grace period
(`silent`: the trial stops itself, `search.worker.self_fence`), or the database or study gone for
good (a line, then the worker stops). It holds what these decide about: the worker's stop
event and the trial in hand (`HeldTrial`).

    health = DatabaseHealth(storage, study, grace_s)
    held = health.hold(claim)          # the trial this worker runs now
    value = health.retry(fn, "read")   # retried with backoff; RuntimeFailure once gone
    health.release()
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from search.db.gone import gone_reason
from search.db.leases import Claim
from search.db.storage import Storage, conflict_kind, retry
from search.errors import RuntimeFailure, first_line
from search.study.studies import StudyRef
from search.worker.self_fence import FencedStop

__all__ = ["DatabaseHealth", "HeldTrial"]

logger = logging.getLogger("search.worker.health")

T = TypeVar("T")


@dataclass(eq=False)
class HeldTrial:
    """The trial a worker runs now: its claim, the event that stops it, and what happened to
    it on the way (taken over; stopped here for want of a heartbeat)."""

    claim: Claim
    fence_due: Callable[[], bool] | None = None
    """The lease watchdog's `expire_if_due`: the stop events ask it (`FencedStop`)."""
    stop: threading.Event = field(init=False)
    lost: bool = False
    """Another worker holds it now: stop it here, record nothing."""
    fenced: bool = False
    """Stopped here because no heartbeat got through (it may go on once one does)."""

    def go_on_after_fence(self) -> threading.Event:
        """The database answers and this worker still holds the trial: a fresh stop event for
        the attempt that resumes it."""
        self.fenced, self.stop = False, FencedStop(self.fence_due)
        return self.stop

    def __post_init__(self) -> None:
        self.stop = FencedStop(self.fence_due)


class DatabaseHealth:
    """One worker's view of its database, and the trial and worker it stops when needed."""

    def __init__(self, storage: Storage, study: StudyRef, grace_s: float) -> None:
        self.storage, self.study, self.grace_s = storage, study, grace_s
        self.stop = threading.Event()
        """Set when the whole worker must stop (a signal, or the database gone)."""
        self.gone: str | None = None
        """Why the database or the study is gone for good (the worker's last line), if it is."""
        self.trial: HeldTrial | None = None
        self.fence_due: Callable[[], bool] | None = None
        """Set by the heartbeat: its lease watchdog's `expire_if_due`."""
        self._down_since: float | None = None

    # -- the trial in hand ------------------------------------------------------------------

    def hold(self, claim: Claim) -> HeldTrial:
        held = HeldTrial(claim, self.fence_due)
        if self.stop.is_set():
            held.stop.set()
        self.trial = held
        return held

    def release(self) -> None:
        self.trial = None

    def stop_all(self) -> None:
        """Stop the worker, and its trial at its next step."""
        self.stop.set()
        held = self.trial
        if held is not None:
            held.stop.set()

    # -- what the others report -------------------------------------------------------------

    def down(self, exc: BaseException, what: str) -> None:
        """`what` failed with `exc`: an outage (logged once), or the database gone for good."""
        gone = gone_reason(exc)
        if gone is not None:
            self.give_up(gone)
            return
        conflict = conflict_kind(exc)
        if conflict is not None:
            # The server answered: it aborted this transaction for a concurrent one's sake.
            logger.warning("database %s (%s): retrying", conflict, what)
            return
        if self._down_since is None:
            self._down_since = time.monotonic()
            logger.warning(
                "database unreachable (%s: %s); training continues, retrying",
                what,
                first_line(exc),
            )

    def back(self) -> None:
        """A statement got through."""
        if self._down_since is not None and self.gone is None:
            logger.warning(
                "database reachable again after %.0f s", time.monotonic() - self._down_since
            )
            self._down_since = None

    def lost(self, claim: Claim) -> None:
        """Another worker holds `claim` now: stop it here, if it is still the one running."""
        held = self.trial
        if held is not None and held.claim == claim:
            held.lost = True
            held.stop.set()

    def silent(self, silent_s: float) -> None:
        """The lease watchdog's alarm: stop the running trial before anyone may take it over."""
        held = self.trial
        if held is None or held.lost or self.gone is not None:
            return
        held.fenced = True
        logger.warning(
            "trial %d: no heartbeat has reached the database for %.0f s (grace period %.0f s): "
            "stopping the trial here before another worker may take it over; it goes on here "
            "if this worker still holds it when the database answers, else elsewhere from "
            "its last checkpoint",
            held.claim.number,
            silent_s,
            self.grace_s,
        )
        held.stop.set()

    def give_up(self, gone: str) -> None:
        """The database or the study is gone for good: stop the trial and the worker."""
        if self.gone is None:
            self.gone = (
                f"study {self.study.name!r} on {self.storage.safe_url}: {gone}; this worker stops"
            )
        self.stop_all()

    def raise_if_gone(self) -> None:
        if self.gone is not None:
            raise RuntimeFailure(self.gone)

    # -- statements -------------------------------------------------------------------------

    def retry(
        self,
        fn: Callable[[], T],
        what: str,
        *,
        attempts: int | None = None,
        max_delay_s: float | None = None,
    ) -> T:
        """`fn()`, retried with backoff through outages (`search.db.storage.retry`; at most
        `max_delay_s` between two tries, if given); raises RuntimeFailure once the database or
        the study is gone."""
        return retry(
            fn,
            what,
            attempts=attempts,
            on_error=self._retry_error,
            on_success=self.back,
            **({} if max_delay_s is None else {"max_delay_s": max_delay_s}),
        )

    def _retry_error(self, exc: BaseException, what: str) -> None:
        self.down(exc, what)
        if self.gone is not None:
            raise RuntimeFailure(self.gone) from exc
