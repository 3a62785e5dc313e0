"""What `hpsearch workers` and `hpsearch delete` read and remove: every worker with the trial it
runs, and the rows hpsearch keeps for a study (workers, leases, its sampling lock)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Row

from search.db.statements import db_now
from search.db.storage import Storage
from search.db.tables import sampling_locks, studies, trial_leases, trials, workers

__all__ = ["count_workers", "delete_study_rows", "read_workers"]


def count_workers(storage: Storage, study_id: int) -> int:
    """How many workers ever registered on the study (alive, lost or stopped)."""
    with storage.read() as conn:
        return conn.execute(
            sa.select(sa.func.count()).where(workers.c.study_id == study_id)
        ).scalar_one()


def read_workers(storage: Storage, study_id: int | None) -> Sequence[Row[Any]]:
    """Every worker (of one study): worker_id, study_name, hostname, pid, device, grace_s,
    stopped_at, stop_reason, age (seconds since its heartbeat, by the database's clock), and
    the number and epoch of the trial it runs (None between trials)."""
    with storage.read() as conn:
        return conn.execute(
            _workers_statement(conn.dialect.name, study_id is not None), {"study": study_id}
        ).all()


def delete_study_rows(storage: Storage, study_id: int) -> tuple[int, int, int]:
    """Remove the study's workers, leases and sampling lock in one transaction; returns (its
    trials, workers removed, leases removed). Its trials are Optuna's to delete."""
    with storage.transaction() as conn:
        n_trials = conn.execute(
            sa.select(sa.func.count()).where(trials.c.study_id == study_id)
        ).scalar_one()
        leases = conn.execute(
            sa.delete(trial_leases).where(trial_leases.c.study_id == study_id)
        ).rowcount
        gone = conn.execute(sa.delete(workers).where(workers.c.study_id == study_id)).rowcount
        conn.execute(sa.delete(sampling_locks).where(sampling_locks.c.study_id == study_id))
    return n_trials, gone, leases


@functools.cache
def _workers_statement(dialect: str, one_study: bool) -> sa.Select:
    running = sa.select(trials.c.trial_id, trials.c.number).where(trials.c.state == "RUNNING")
    running = running.subquery("running")
    statement = (
        sa.select(
            workers.c.worker_id,
            studies.c.study_name,
            workers.c.hostname,
            workers.c.pid,
            workers.c.device,
            workers.c.grace_s,
            workers.c.stopped_at,
            workers.c.stop_reason,
            workers.c.launched_by,
            (db_now(dialect) - workers.c.heartbeat_at).label("age"),
            running.c.number,
            trial_leases.c.epoch,
        )
        .join(studies, studies.c.study_id == workers.c.study_id)
        .outerjoin(
            sa.join(trial_leases, running, running.c.trial_id == trial_leases.c.trial_id),
            trial_leases.c.worker_id == workers.c.worker_id,
        )
    )
    if one_study:
        statement = statement.where(workers.c.study_id == sa.bindparam("study"))
    return statement
