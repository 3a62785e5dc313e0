"""What `hpsearch status` and the progress lines read about a study: trials by state, the best
trial, the running trials and who runs them, the live workers.

All reads of `read_status` share one read-only transaction (`Storage.read`): on SQLite it takes
no write lock, so watching a study never slows its workers down.
"""

from __future__ import annotations

import datetime
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Row

from search.db.budget import epochs_used, first_start
from search.db.liveness import live_workers_clause
from search.db.pauses import paused_count
from search.db.statements import db_now
from search.db.storage import Storage
from search.db.tables import (
    trial_intermediate_values,
    trial_leases,
    trial_params,
    trial_values,
    trials,
    workers,
)

__all__ = ["StatusRows", "best_statement", "best_trial", "read_status"]


@dataclass(frozen=True)
class StatusRows:
    """A study's status as the database holds it (`search.monitor.status` makes it readable)."""

    counts: dict[str, int]
    """Trials by state name."""
    best: Row[Any] | None
    """The best complete trial: trial_id, number, value."""
    best_params: Sequence[Row[Any]]
    """Its params: param_name, param_value (internal), distribution_json."""
    running: Sequence[Row[Any]]
    """RUNNING trials: number, worker_id, hostname, device, epoch, last_value, seconds,
    heartbeat_age."""
    live_workers: int
    paused: int = 0
    """Trials paused at a rung (asha), waiting for promotion; 0 unless asked for."""
    epochs_used: int | None = None
    """Epochs trained by the fleet so far (asked for when the study has an epoch budget)."""
    first_start: datetime.datetime | None = None
    """When the study's first trial started (asked for when it has an hour budget)."""


def read_status(
    storage: Storage,
    study_id: int,
    direction: str,
    *,
    paused: bool = False,
    epochs: bool = False,
    hours: bool = False,
) -> StatusRows:
    """The study's status, read in one read-only transaction; `paused`, `epochs`, `hours`: also
    the paused trials, the epochs used, the first trial's start."""
    with storage.read() as conn:
        dialect = conn.dialect.name
        counts = dict(
            conn.execute(
                sa.select(trials.c.state, sa.func.count())
                .where(trials.c.study_id == study_id)
                .group_by(trials.c.state)
            ).all()
        )
        best = conn.execute(best_statement(direction), {"study": study_id}).first()
        params: Sequence[Row[Any]] = []
        if best is not None:
            p = trial_params
            params = conn.execute(
                sa.select(p.c.param_name, p.c.param_value, p.c.distribution_json).where(
                    p.c.trial_id == best.trial_id
                )
            ).all()
        running = conn.execute(_running_statement(dialect), {"study": study_id}).all()
        live = conn.execute(
            sa.select(sa.func.count()).where(
                workers.c.study_id == study_id, live_workers_clause(dialect)
            )
        ).scalar_one()
        n_paused = paused_count(conn, study_id) if paused else 0
        used = epochs_used(None, study_id, conn) if epochs else None
        start = first_start(None, study_id, conn) if hours else None
    return StatusRows(counts, best, params, running, live, n_paused, used, start)


def best_trial(storage: Storage, study_id: int, direction: str) -> tuple[int, float] | None:
    """(number, value) of the best complete trial so far, or None."""
    with storage.autocommit() as conn:
        row = conn.execute(best_statement(direction), {"study": study_id}).first()
    return None if row is None else (row.number, float(row.value))


@functools.cache
def best_statement(direction: str) -> sa.Select:
    """The best complete trial of a study (bound ``study``): trial_id, number, value."""
    t, v = trials, trial_values
    order = v.c.value.desc() if direction == "maximize" else v.c.value.asc()
    return (
        sa.select(t.c.trial_id, t.c.number, v.c.value)
        .join(v, sa.and_(v.c.trial_id == t.c.trial_id, v.c.objective == 0))
        .where(
            t.c.study_id == sa.bindparam("study"),
            t.c.state == "COMPLETE",
            v.c.value.is_not(None),
        )
        .order_by(order, t.c.number)
        .limit(1)
    )


@functools.cache
def _running_statement(dialect: str) -> sa.Select:
    t, lease, w, iv = trials, trial_leases, workers, trial_intermediate_values
    now = db_now(dialect)
    last_value = (
        sa.select(iv.c.intermediate_value)
        .where(iv.c.trial_id == t.c.trial_id)
        .order_by(iv.c.step.desc())
        .limit(1)
        .scalar_subquery()
    )
    return (
        sa.select(
            t.c.number,
            lease.c.worker_id,
            w.c.hostname,
            w.c.device,
            lease.c.epoch,
            last_value.label("last_value"),
            (now - lease.c.claimed_at).label("seconds"),
            (now - w.c.heartbeat_at).label("heartbeat_age"),
        )
        .join(lease, lease.c.trial_id == t.c.trial_id)
        .outerjoin(w, w.c.worker_id == lease.c.worker_id)
        .where(t.c.study_id == sa.bindparam("study"), t.c.state == "RUNNING")
        .order_by(t.c.number)
    )
