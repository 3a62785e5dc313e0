"""Self-fencing: a worker cut off from the database stops its trial before anyone may take it over.

Another worker may queue this worker's trial again (`search.db.liveness.reap`) once the database
has seen no heartbeat from it for its grace period. A heartbeat is stamped with the database's
clock when it commits, which is after this process sent it: counted from the moment a heartbeat
that committed was *sent*, nobody may take the trial over before `sent + grace_s`. The watchdog
stops the running trial at `sent + FENCE_AT * grace_s`, which leaves the rest of the grace period
for the trainer to reach its next optimizer step (where it stops, checkpointing if it can). So a
worker that lost the database never trains a trial alongside the worker that took it over, even
if the network heals later. When the database answers again and nobody took the trial (a short
cut, or a restarted server, which gives every worker a fresh grace period), the worker goes on
with it from its last checkpoint, under the same lease.

The trainer also asks at every step (`expire_if_due`, through the trial's `FencedStop`), on its own
thread: a process stalled past the fence (an overloaded machine, swapping, a debugger) takes no
step after it wakes up, whether or not the watchdog's thread has run yet.

    watchdog = LeaseWatchdog(grace_s, on_expired=stop_the_trial)
    watchdog.start()
    watchdog.renewed(sent_at)   # after each heartbeat that committed
    watchdog.expire_if_due()    # from any thread: fire now if the fence is due
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["FENCE_AT", "FencedStop", "LeaseWatchdog"]

FENCE_AT = 0.7
"""Fraction of the grace period, counted from the last heartbeat that reached the database,
after which a worker stops its own trial. With the default 60 s grace and a heartbeat every
10 s, three heartbeats in a row must fail (42 s); 18 s remain to stop at the next step."""


class LeaseWatchdog:
    """Calls `on_expired(silent_s)` once each time `fence_after_s` pass without a renewal."""

    def __init__(self, grace_s: float, on_expired: Callable[[float], None]) -> None:
        self.fence_after_s = FENCE_AT * grace_s
        self._on_expired = on_expired
        self._renewed_at = time.monotonic()
        self._fired = False
        self._lock = threading.Lock()
        self._changed = threading.Event()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="lease-watchdog", daemon=True)

    @property
    def renewed_at(self) -> float:
        """`time.monotonic()` when the last heartbeat that reached the database was sent."""
        return self._renewed_at

    def renewed(self, sent_at: float) -> None:
        """A heartbeat sent at `sent_at` (`time.monotonic()`) committed."""
        with self._lock:
            if sent_at > self._renewed_at:
                self._renewed_at, self._fired = sent_at, False
        self._changed.set()

    def expire_if_due(self) -> bool:
        """Call `on_expired` now, on the calling thread, if the fence is due and it has not
        fired since the last renewal; whether it fired."""
        now = time.monotonic()
        if self._fired or now < self._renewed_at + self.fence_after_s:  # no lock: the hot path
            return False
        with self._lock:
            if self._fired or now < self._renewed_at + self.fence_after_s:
                return False
            self._fired = True
            silent_s = now - self._renewed_at
        self._on_expired(silent_s)
        return True

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._changed.set()
        self._thread.join(timeout=5)

    def _watch(self) -> None:
        while not self._done.is_set():
            if self.expire_if_due():
                continue
            with self._lock:
                due = self._renewed_at + self.fence_after_s
                fired = self._fired
            self._changed.wait(None if fired else max(0.0, due - time.monotonic()))
            self._changed.clear()


class FencedStop(threading.Event):
    """A trial's stop event that is also set once the lease's fence is due: `is_set()` asks
    `fence_due` (`LeaseWatchdog.expire_if_due`, whose alarm sets this event) before it answers,
    so the trainer's check before each step needs no other thread to have run."""

    def __init__(self, fence_due: Callable[[], bool] | None = None) -> None:
        super().__init__()
        self._fence_due = fence_due

    def is_set(self) -> bool:
        if self._fence_due is not None and not super().is_set():
            self._fence_due()
        return super().is_set()
