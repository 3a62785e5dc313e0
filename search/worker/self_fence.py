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

    watchdog = LeaseWatchdog(grace_s, on_expired=stop_the_trial)
    watchdog.start()
    watchdog.renewed(sent_at)   # after each heartbeat that committed
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["FENCE_AT", "LeaseWatchdog"]

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

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._changed.set()
        self._thread.join(timeout=5)

    def _watch(self) -> None:
        while not self._done.is_set():
            with self._lock:
                due = self._renewed_at + self.fence_after_s
                fired = self._fired
            now = time.monotonic()
            if not fired and now >= due:
                with self._lock:
                    self._fired = True
                self._on_expired(now - self._renewed_at)
                continue
            self._changed.wait(None if fired else due - now)
            self._changed.clear()
