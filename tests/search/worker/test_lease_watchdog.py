"""The lease watchdog's fence needs no thread of its own to have run: the trainer's check before
each step fires it (a process stalled past the fence takes no step after it wakes up)."""

from __future__ import annotations

import time

from search.db.leases import Claim
from search.worker.health import DatabaseHealth
from search.worker.self_fence import FENCE_AT, LeaseWatchdog

GRACE_S = 0.5


def test_the_trial_s_stop_is_set_once_the_fence_is_due_even_if_the_watchdog_thread_never_ran() -> (
    None
):
    health = DatabaseHealth(None, None, GRACE_S)  # type: ignore[arg-type]
    fired: list[float] = []
    watchdog = LeaseWatchdog(GRACE_S, on_expired=lambda s: (fired.append(s), health.silent(s)))
    health.fence_due = watchdog.expire_if_due  # as the heartbeat does; its thread not started
    held = health.hold(Claim(trial_id=1, number=0, study_id=1, worker_id="w", generation=1))
    watchdog.renewed(time.monotonic())
    assert not held.stop.is_set() and not held.fenced
    time.sleep(FENCE_AT * GRACE_S + 0.05)
    assert held.stop.is_set() and held.fenced  # asked at the next step: fenced there
    assert len(fired) == 1 and fired[0] >= FENCE_AT * GRACE_S

    # Still held once the database answers: the resumed attempt's stop is clear, and the fence
    # fires again only after the next renewal's own fence time.
    resumed = held.go_on_after_fence()
    assert not resumed.is_set() and len(fired) == 1
    watchdog.renewed(time.monotonic())
    assert not resumed.is_set()
    time.sleep(FENCE_AT * GRACE_S + 0.05)
    assert resumed.is_set() and held.fenced and len(fired) == 2


def test_the_watchdog_thread_fires_once_per_silence_while_nobody_asks() -> None:
    fired: list[float] = []
    watchdog = LeaseWatchdog(GRACE_S, on_expired=fired.append)
    watchdog.renewed(time.monotonic())
    watchdog.start()
    try:
        time.sleep(FENCE_AT * GRACE_S * 3)
        assert len(fired) == 1  # once, not at every wake-up
        assert not watchdog.expire_if_due()  # already fired for this silence
        watchdog.renewed(time.monotonic())
        time.sleep(FENCE_AT * GRACE_S + 0.2)
        assert len(fired) == 2
    finally:
        watchdog.stop()
