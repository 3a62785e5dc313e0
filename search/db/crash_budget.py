"""The crash budget: a trial that takes its worker down `max_attempts` times ends FAIL.

A trial that kills its worker (the process is OOM-killed, segfaults, a CUDA error aborts it)
would otherwise go to the next worker after the grace period, and the next, for ever, taking
the fleet down one worker at a time. Each failed attempt (a worker declared dead while it held
the trial, or one that stopped on a machine fault) is appended to the trial's system attribute
`ATTEMPTS_ATTR`, with the worker, its host, the last epoch it reported and how it ended. At
``[study] max_attempts`` the trial ends FAIL with those attempts as its reason, instead of being
queued again. A trial handed back on SIGTERM or Ctrl-C spends no attempt.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from search.db.claims import utcnow_naive
from search.db.leases import release
from search.db.statements import read_system_attr, upsert_attributes
from search.db.tables import trial_leases, trial_system_attributes, trials

__all__ = ["ATTEMPTS_ATTR", "FAIL_REASON_ATTR", "record_failed_attempt"]

ATTEMPTS_ATTR = "hpsearch:failed_attempts"
"""Trial system attribute: the list of failed attempts, oldest first."""
FAIL_REASON_ATTR = "fail_reason"
"""Trial system attribute: why a trial ended FAIL, one line."""


def record_failed_attempt(
    conn: Connection,
    trial_id: int,
    attempt: dict[str, Any],
    max_attempts: int,
    *,
    keep_holder: bool = False,
) -> bool:
    """Count a failed attempt at a RUNNING trial; end it FAIL if that was its last (True),
    else queue it again (False).

    `attempt` names its "worker_id" and "generation" (the lease it held): recording the same
    attempt twice (a retry after a commit lost with the connection) counts it once.
    """
    a = trial_system_attributes
    attempts: list[dict[str, Any]] = read_system_attr(conn, trial_id, ATTEMPTS_ATTR) or []
    same = [
        x
        for x in attempts
        if (x.get("worker_id"), x.get("generation"))
        == (attempt["worker_id"], attempt["generation"])
    ]
    if not same:
        attempts.append(attempt)
        upsert_attributes(conn, a, trial_id, {ATTEMPTS_ATTR: attempts})
    if len(attempts) < max_attempts:
        release(conn, trial_id, keep_holder=keep_holder)
        return False
    upsert_attributes(conn, a, trial_id, {FAIL_REASON_ATTR: fail_reason(attempts, max_attempts)})
    conn.execute(
        sa.update(trials)
        .where(trials.c.trial_id == trial_id, trials.c.state == "RUNNING")
        .values(state="FAIL", datetime_complete=utcnow_naive())
    )
    if not keep_holder:
        conn.execute(
            sa.update(trial_leases)
            .where(trial_leases.c.trial_id == trial_id)
            .values(last_worker_id=trial_leases.c.worker_id, worker_id=None)
        )
    return True


def fail_reason(attempts: list[dict[str, Any]], max_attempts: int) -> str:
    """One line: how many attempts failed, and where and when each died."""
    each = "; ".join(
        f"{x.get('hostname') or x.get('worker_id')} at epoch {x.get('epoch', 0)} ({x.get('how')})"
        for x in attempts
    )
    return f"its worker died {len(attempts)} times (max_attempts = {max_attempts}): {each}"
