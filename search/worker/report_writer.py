"""Writing a trial's intermediate values without making training wait for the database.

Most epochs need no pruning decision (successive halving and Hyperband decide only at rungs), so
their values are written by a background thread while training goes on, at most one write per
half second (values of fast epochs share a statement). Before a decision, the
caller flushes: the values are in the database before the pruner is asked. Whatever is still
unwritten when the trial ends goes into the same transaction that records its end. While the
database is away, values wait here and are written once it answers again.

    writer = ReportWriter(storage, on_lost=..., on_error=..., on_success=...)
    writer.begin(claim)
    writer.add(3, 0.91)            # returns at once
    writer.flush()                 # before a pruning decision: raises LeaseLost or a DB error
    leftover = writer.end()        # values not yet written, for finish() / hand_back()
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from search.db.fenced_writes import report
from search.db.leases import Claim, LeaseLost
from search.db.storage import Storage, is_transient

__all__ = ["ReportWriter"]

logger = logging.getLogger("search.reports")


class ReportWriter:
    """One worker's background writer of intermediate values, one trial at a time."""

    def __init__(
        self,
        storage: Storage,
        *,
        on_lost: Callable[[Claim], None],
        on_error: Callable[[BaseException, str], None],
        on_success: Callable[[], None],
        retry_s: float = 1.0,
        coalesce_s: float = 0.5,
    ) -> None:
        self.storage = storage
        self._on_lost, self._on_error, self._on_success = on_lost, on_error, on_success
        self._retry_s, self._coalesce_s = retry_s, coalesce_s
        self._claim: Claim | None = None
        self._pending: dict[int, float] = {}
        self._state = threading.Lock()  # guards _claim and _pending
        self._writing = threading.Lock()  # one write at a time, from either thread
        self._wake = threading.Event()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="reports", daemon=True)
        self._thread.start()

    def begin(self, claim: Claim) -> None:
        with self._state:
            self._claim, self._pending = claim, {}

    def add(self, epoch: int, value: float) -> None:
        """Queue a value for writing; returns at once."""
        with self._state:
            self._pending[epoch] = value
        self._wake.set()

    def flush(self) -> None:
        """Write every queued value now, in the caller's thread.

        Raises LeaseLost if the trial was taken over, or the database's error if it is away
        (the values stay queued and are written later).
        """
        with self._writing:
            with self._state:
                claim, values = self._claim, dict(self._pending)
            if claim is None or not values:
                return
            report(self.storage, claim, values)
            with self._state:
                if self._claim == claim:
                    for epoch, value in values.items():
                        if self._pending.get(epoch) == value:
                            del self._pending[epoch]

    def end(self) -> dict[int, float]:
        """Stop writing for the current trial; returns the values not written yet."""
        with self._writing, self._state:
            leftover, self._claim, self._pending = self._pending, None, {}
        return leftover

    def close(self) -> None:
        self._closed = True
        self._wake.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        retry_in: float | None = None  # None: sleep until a value arrives
        while not self._closed:
            self._wake.wait(retry_in)
            self._wake.clear()
            if self._closed:
                return
            # Gather what arrives in the next moment into the same write (fast epochs); values
            # still waiting when the trial ends go with its end, in one transaction.
            if self._coalesce_s and retry_in is None:
                time.sleep(self._coalesce_s)
            retry_in = None
            with self._state:
                claim = self._claim
            try:
                self.flush()
                self._on_success()
            except LeaseLost:
                if claim is not None:
                    self._on_lost(claim)
            except Exception as exc:
                if is_transient(exc):
                    self._on_error(exc, "report")
                else:  # a bug, not an outage: the synchronous flush at the trial's end raises it
                    logger.exception("writing intermediate values failed")
                retry_in = self._retry_s  # try again in a while; new values also wake us
