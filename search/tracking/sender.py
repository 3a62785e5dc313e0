"""Tracker calls off the training thread: a bounded queue and one background thread.

A worker's trial never waits for its tracker. Each update is queued (a deque append); the
sender thread sends them in order. While the tracker is unreachable the update at the head is
retried with backoff (up to `RETRY_MAX_S` apart) and the others wait behind it, up to
`MAX_QUEUED`; more are dropped. Refusals that would be the same next time are dropped at once.
The worker's log says that the tracker is unreachable once, when it first is, and, when the
worker leaves, once how many updates could not be sent, with the command that writes them
later (`hpsearch export`).
"""

from __future__ import annotations

import collections
import functools
import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from search.errors import first_line
from search.tracking.base import Tracker

__all__ = ["CLOSE_MAX_S", "MAX_QUEUED", "RETRY_MAX_S", "Sender"]

logger = logging.getLogger("search.tracking")

MAX_QUEUED = 10_000
"""Updates waiting for the tracker, at most (about 1 MB): a day of epochs of a fast study."""
RETRY_MAX_S = 10.0
"""Longest wait between two tries while the tracker is unreachable."""
DOWN_AT_CLOSE_S = 2.0
"""How long a leaving worker waits for a tracker that is unreachable at that moment."""
MAX_BATCH = 1000
"""Most epoch values sent in one call (MLflow takes 1000 metrics per batch)."""
CLOSE_MAX_S = 120.0
"""Longest a leaving worker sends its queued updates, even while they go through."""


class Sender:
    """Sends one tracker's updates, in order, from its own thread."""

    def __init__(self, tracker: Tracker, *, export_hint: str = "") -> None:
        self.tracker = tracker
        self.export_hint = export_hint
        self.sent = 0
        # (what, call) or, for an epoch's value, (what, (trial number, (epoch, value, when))):
        # the values of one trial that wait together go out in one call.
        self._queue: collections.deque[tuple[str, Any]] = collections.deque()
        self._wake = threading.Condition()
        self._closing = False
        self._give_up = threading.Event()
        self._dropped = 0
        self._refused = 0
        self._first_refusal: str | None = None
        self._down_since: float | None = None
        self._said_down = False
        self._last_progress = time.monotonic()
        self._thread = threading.Thread(
            target=self._run, name=f"tracker-{tracker.name}", daemon=True
        )
        self._thread.start()

    def submit(self, what: str, call: Callable[[], None]) -> None:
        """Queue one update (never blocks; dropped when the queue is full)."""
        self._put(what, call)

    def submit_epoch(self, number: int, epoch: int, value: float, at: float) -> None:
        """Queue a trial's value at one epoch (sent with the others of that trial queued)."""
        self._put(f"trial {number} epoch {epoch}", (number, (epoch, value, at)))

    def _put(self, what: str, item: Any) -> None:
        with self._wake:
            if self._closing or len(self._queue) >= MAX_QUEUED:
                self._dropped += 1
                return
            self._queue.append((what, item))
            self._wake.notify()

    def close(self, idle_s: float, max_s: float = CLOSE_MAX_S) -> int:
        """Send what is queued while updates go through (giving up after `idle_s` without
        one, or `max_s` in all), then stop; returns the number of updates that could not be
        sent (said once in the log)."""
        with self._wake:
            self._closing = True
            self._wake.notify()
        deadline = time.monotonic() + max_s
        self._last_progress = time.monotonic()
        if self._down_since is not None:  # unreachable now: one more try or two, not more
            idle_s = min(idle_s, DOWN_AT_CLOSE_S)
        while self._thread.is_alive() and time.monotonic() < deadline:
            self._thread.join(0.1)
            if time.monotonic() - self._last_progress > idle_s:
                break
        self._give_up.set()
        with self._wake:
            self._wake.notify()
        self._thread.join(1.0)
        with self._wake:
            unsent = len(self._queue) + self._dropped + self._refused
        if unsent:
            reasons = []
            if self._down_since is not None:
                down_s = time.monotonic() - self._down_since
                reasons.append(f"unreachable for the last {down_s:.0f} s")
            if self._refused:
                reasons.append(f"{self._refused} refused, the first: {self._first_refusal}")
            if self._dropped:
                reasons.append(f"{self._dropped} dropped, the queue being full")
            logger.warning(
                "%d tracker update(s) could not be sent to %s %s (%s); %s",
                unsent,
                self.tracker.name,
                self.tracker.where,
                "; ".join(reasons) or "not sent in time",
                self.export_hint or "the trials' results are safe in the study",
            )
        if self._thread.is_alive():
            return unsent  # still inside a call: the tracker is not closed under it
        try:
            self.tracker.close()
        except Exception as exc:  # what was sent stays sent; nothing more to do
            logger.debug("closing the %s tracker: %s", self.tracker.name, first_line(exc))
        return unsent

    def _run(self) -> None:
        backoff = 0.5
        while True:
            with self._wake:
                while not self._queue and not self._closing:
                    self._wake.wait()
                if not self._queue or self._give_up.is_set():
                    return
                what, call, taken = self._head()
            try:
                call()
            except Exception as exc:
                if self.tracker.is_transient(exc):
                    self._unreachable(exc, what)
                    with self._wake:
                        if not self._give_up.is_set():
                            self._wake.wait(backoff)
                    backoff = min(backoff * 2, RETRY_MAX_S)
                    continue
                # Refused (a param changed its value, a run deleted by hand): the same next time.
                with self._wake:
                    for _ in range(taken):
                        self._queue.popleft()
                    self._refused += taken
                if self._first_refusal is None:
                    self._first_refusal = f"{what}: {first_line(exc)}"
                    logger.warning(
                        "%s %s refused %s: %s",
                        self.tracker.name,
                        self.tracker.where,
                        what,
                        first_line(exc),
                    )
                continue
            with self._wake:
                for _ in range(taken):
                    self._queue.popleft()
            self.sent += taken
            self._last_progress = time.monotonic()
            backoff = 0.5
            if self._down_since is not None:
                logger.info(
                    "%s %s reachable again after %.0f s; sending the %d queued update(s)",
                    self.tracker.name,
                    self.tracker.where,
                    time.monotonic() - self._down_since,
                    len(self._queue),
                )
                self._down_since = None

    def _head(self) -> tuple[str, Callable[[], None], int]:
        """The next call to make and how many queued updates it sends (under the lock)."""
        what, item = self._queue[0]
        if callable(item):
            return what, item, 1
        number, points = item[0], [item[1]]
        for _what, later in itertools.islice(self._queue, 1, MAX_BATCH):
            if callable(later) or later[0] != number:
                break
            points.append(later[1])
        if len(points) > 1:
            what = f"trial {number} epochs {points[0][0]}-{points[-1][0]}"
        return what, functools.partial(self.tracker.log_epochs, number, points), len(points)

    def _unreachable(self, exc: BaseException, what: str) -> None:
        if self._down_since is None:
            self._down_since = time.monotonic()
        if not self._said_down:
            self._said_down = True
            logger.warning(
                "%s %s unreachable (%s: %s); training goes on, its updates are queued and "
                "retried in the background",
                self.tracker.name,
                self.tracker.where,
                what,
                first_line(exc),
            )
