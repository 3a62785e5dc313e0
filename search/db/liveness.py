"""Worker liveness: who is alive, and queuing again the trials of workers that went silent.

Workers register in ``workers`` and heartbeat there (every grace/6 seconds, see
`search.worker.loop`). A trial whose worker has been silent for longer than the grace period *that
worker declared* is handed back (WAITING) by any other worker, in `reap`; its params,
intermediate values and checkpoint stay, so the next worker resumes it where it was. After a
PostgreSQL restart every worker gets a fresh grace period (silence is counted from the server's
start at the latest), so an outage never makes live workers look dead.

All times are the database's clock (`db_now`): machines' clocks need not agree.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass

import sqlalchemy as sa

from search.db.crash_budget import record_failed_attempt
from search.db.gone import StudyGone
from search.db.leases import Claim, holds, release
from search.db.statements import db_now
from search.db.storage import Storage
from search.db.tables import trial_leases, trials, workers

__all__ = [
    "Reaped",
    "WorkerInfo",
    "heartbeat",
    "live_workers",
    "live_workers_clause",
    "live_workers_on_host",
    "reap",
    "register",
    "unregister",
]


@dataclass(frozen=True)
class WorkerInfo:
    """A worker process as it registers."""

    worker_id: str
    study_id: int
    hostname: str
    pid: int
    device: str
    grace_s: float
    """Seconds of silence after which this worker counts as dead."""
    launched_by: dict[str, str] | None = None
    """The scheduler that started it (`search.worker.provenance.launched_by`), if any."""


def register(storage: Storage, worker: WorkerInfo) -> None:
    with storage.transaction() as conn:
        now = db_now(conn.dialect.name)
        conn.execute(
            sa.insert(workers).values(
                worker_id=worker.worker_id,
                study_id=worker.study_id,
                hostname=worker.hostname[:255],
                pid=worker.pid,
                device=worker.device[:255],
                started_at=now,
                heartbeat_at=now,
                grace_s=worker.grace_s,
                launched_by=None if worker.launched_by is None else json.dumps(worker.launched_by),
            )
        )


def heartbeat(storage: Storage, worker_id: str, claim: Claim | None) -> bool:
    """Record that the worker is alive; False if it no longer holds `claim`.

    Raises `StudyGone` when the worker's row is gone: its study was deleted (which deletes
    the study's workers, `search.monitor.workers.delete_study` and migration 0004).
    """
    with storage.transaction() as conn:
        beat = conn.execute(_heartbeat_statement(conn.dialect.name), {"beating": worker_id})
        if beat.rowcount == 0:
            raise StudyGone("the study was deleted from the storage")
        return claim is None or holds(conn, claim)


def unregister(storage: Storage, worker_id: str, reason: str) -> None:
    with storage.transaction() as conn:
        conn.execute(
            sa.update(workers)
            .where(workers.c.worker_id == worker_id)
            .values(stopped_at=db_now(conn.dialect.name), stop_reason=reason[:255])
        )


@dataclass(frozen=True)
class Reaped:
    """A trial whose worker went silent, handed back (or failed: its crash budget is spent)."""

    number: int
    worker_id: str
    failed: bool


def reap(storage: Storage, study_id: int, max_attempts: int) -> list[Reaped]:
    """Queue again the trials of the study's workers silent for longer than their grace period.

    Each is a failed attempt (`search.db.crash_budget`): the trial's last one ends it FAIL. A
    trial that was being sampled (never claimed: generation 0) is only queued again.
    """
    reaped = []
    with storage.transaction() as conn:
        rows = conn.execute(_silent_holders_statement(conn.dialect.name), {"study": study_id})
        for row in rows.all():
            failed = False
            if row.generation == 0:
                release(conn, row.trial_id)
            else:
                attempt = {
                    "worker_id": row.worker_id,
                    "generation": row.generation,
                    "hostname": row.hostname,
                    "epoch": row.epoch,
                    "how": f"silent for more than its {row.grace_s:g} s grace period",
                }
                failed = record_failed_attempt(conn, row.trial_id, attempt, max_attempts)
            reaped.append(Reaped(row.number, row.worker_id, failed))
    return reaped


def live_workers(storage: Storage, study_id: int) -> int:
    """Workers of this study that heartbeat within their grace period."""
    with storage.autocommit() as conn:
        return conn.execute(
            _live_count_statement(conn.dialect.name), {"study": study_id}
        ).scalar_one()


def live_workers_clause(dialect: str) -> sa.ColumnElement[bool]:
    """WHERE clause: the worker row is of a live worker."""
    return sa.and_(
        workers.c.stopped_at.is_(None),
        db_now(dialect) - workers.c.heartbeat_at <= workers.c.grace_s,
    )


@functools.cache
def _heartbeat_statement(dialect: str) -> sa.Update:
    return (
        sa.update(workers)
        .where(workers.c.worker_id == sa.bindparam("beating"))
        .values(heartbeat_at=db_now(dialect))
    )


@functools.cache
def _silent_holders_statement(dialect: str) -> sa.Select:
    since = workers.c.heartbeat_at
    if dialect == "postgresql":
        # A restarted server has seen no heartbeats since it came up: count silence from its
        # start, so live workers get a whole grace period to reconnect.
        since = sa.func.greatest(since, sa.extract("epoch", sa.func.pg_postmaster_start_time()))
    statement = (
        sa.select(
            trials.c.trial_id,
            trials.c.number,
            trial_leases.c.worker_id,
            trial_leases.c.generation,
            trial_leases.c.epoch,
            workers.c.hostname,
            workers.c.grace_s,
        )
        .join(trial_leases, trial_leases.c.trial_id == trials.c.trial_id)
        .join(workers, workers.c.worker_id == trial_leases.c.worker_id)
        .where(
            trials.c.study_id == sa.bindparam("study"),
            trials.c.state == "RUNNING",
            db_now(dialect) - since > workers.c.grace_s,
        )
    )
    if dialect == "postgresql":  # two reapers never hand back the same trial twice
        statement = statement.with_for_update(of=trials, skip_locked=True)
    return statement


@functools.cache
def _live_count_statement(dialect: str) -> sa.Select:
    return sa.select(sa.func.count()).where(
        workers.c.study_id == sa.bindparam("study"), live_workers_clause(dialect)
    )


def live_workers_on_host(storage: Storage, hostname: str) -> int:
    """Live workers (of any study) registered with `hostname`."""
    with storage.autocommit() as conn:
        return conn.execute(
            _on_host_statement(conn.dialect.name), {"host": hostname[:255]}
        ).scalar_one()


@functools.cache
def _on_host_statement(dialect: str) -> sa.Select:
    return sa.select(sa.func.count()).where(
        workers.c.hostname == sa.bindparam("host"), live_workers_clause(dialect)
    )
