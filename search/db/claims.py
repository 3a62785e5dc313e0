"""Claiming trials: a worker takes the lowest-numbered WAITING trial and its lease at once.

On PostgreSQL a claim is one statement (one round trip): pick the trial with ``FOR UPDATE SKIP
LOCKED`` (concurrent claimers never wait for each other nor take the same trial), mark it
RUNNING, write the lease with the next generation, and return the trial's params, its values
so far (a resumed trial), the worker it continues and how many trials are left queued. On
SQLite, ``BEGIN IMMEDIATE`` serializes writers, and the same is three statements in one
transaction.

Handed-back and orphaned trials are WAITING again and keep their number, so they are resumed
before new trials start.
"""

from __future__ import annotations

import datetime
import functools
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from search.db.leases import Claim, TrialData
from search.db.statements import db_now, insert_for
from search.db.storage import Storage
from search.db.tables import (
    trial_intermediate_values,
    trial_leases,
    trial_params,
    trial_rungs,
    trials,
)

__all__ = ["claim_next_trial", "held_claims", "lease_upsert", "read_trial_data", "utcnow_naive"]


def utcnow_naive() -> datetime.datetime:
    """Optuna stores trial datetimes as naive UTC."""
    return datetime.datetime.now(datetime.UTC).replace(tzinfo=None)


def claim_next_trial(
    storage: Storage, study_id: int, worker_id: str, *, skip_paused: bool = False
) -> Claim | None:
    """Take the study's lowest-numbered WAITING trial, or None if there is none.

    `skip_paused`: leave trials paused at a rung (promotion-based ASHA, `search.db.pauses`)
    to promotions."""
    params = {"study": study_id, "claimer": worker_id, "started": utcnow_naive()}
    if storage.is_postgres:
        return _claim_postgresql(storage, params, skip_paused)
    return _claim_sqlite(storage, params, skip_paused)


def _not_paused(trial_id: Any) -> sa.ColumnElement[bool]:
    r = trial_rungs
    return ~sa.exists().where(r.c.trial_id == trial_id, r.c.paused.is_(True))


def held_claims(storage: Storage, worker_id: str) -> list[Claim]:
    """Trials this worker holds (after an ambiguous commit, a claim may have succeeded)."""
    with storage.autocommit() as conn:
        rows = conn.execute(_held_statement(), {"holder": worker_id}).all()
    return [Claim(r.trial_id, r.number, r.study_id, worker_id, r.generation) for r in rows]


def read_trial_data(storage: Storage, trial_id: int) -> TrialData:
    """A trial's params, intermediate values and previous worker (what a claim returns with
    itself on PostgreSQL)."""
    p, v, lease = trial_params, trial_intermediate_values, trial_leases
    with storage.autocommit() as conn:
        params = conn.execute(
            sa.select(p.c.param_name, p.c.param_value, p.c.distribution_json).where(
                p.c.trial_id == trial_id
            )
        ).all()
        steps = conn.execute(
            sa.select(v.c.step, v.c.intermediate_value, v.c.intermediate_value_type).where(
                v.c.trial_id == trial_id
            )
        ).all()
        previous = conn.execute(
            sa.select(lease.c.last_worker_id).where(lease.c.trial_id == trial_id)
        ).scalar()
    return TrialData(
        params=[tuple(r) for r in params],  # type: ignore[misc]
        steps=[tuple(r) for r in steps],  # type: ignore[misc]
        previous_worker=previous,
    )


# -- PostgreSQL: one statement ----------------------------------------------------------------


def _claim_postgresql(storage: Storage, params: dict[str, Any], skip_paused: bool) -> Claim | None:
    with storage.transaction() as conn:
        row = conn.execute(_claim_statement_postgresql(skip_paused), params).first()
    if row is None:
        return None
    data = TrialData(
        params=[tuple(p) for p in row.params or []],  # type: ignore[misc]
        steps=[tuple(s) for s in row.steps or []],  # type: ignore[misc]
        previous_worker=row.last_worker_id,
    )
    return Claim(
        row.trial_id,
        row.number,
        params["study"],
        params["claimer"],
        row.generation,
        waiting=max(0, row.waiting),
        loaded=data,
    )


@functools.cache
def _claim_statement_postgresql(skip_paused: bool = False) -> sa.Select:
    t, lease, p, v = trials, trial_leases, trial_params, trial_intermediate_values
    picked = (
        sa.select(t.c.trial_id)
        .where(t.c.study_id == sa.bindparam("study"), t.c.state == "WAITING")
        .where(_not_paused(t.c.trial_id) if skip_paused else sa.true())
        .order_by(t.c.number)
        .limit(1)
        .with_for_update(skip_locked=True)
        .cte("picked")
    )
    started = (
        sa.update(t)
        .where(t.c.trial_id == picked.c.trial_id)
        .values(
            state="RUNNING",
            datetime_start=sa.func.coalesce(
                t.c.datetime_start, sa.bindparam("started", type_=sa.DateTime)
            ),
        )
        .returning(t.c.trial_id, t.c.number)
        .cte("started")
    )
    new_lease = postgresql.insert(lease).from_select(
        ["trial_id", "study_id", "worker_id", "generation", "claimed_at", "epoch"],
        sa.select(
            started.c.trial_id,
            sa.bindparam("study"),
            sa.bindparam("claimer"),
            sa.literal(1),
            db_now("postgresql"),
            sa.literal(0),
        ),
    )
    leased = (
        new_lease.on_conflict_do_update(
            index_elements=[lease.c.trial_id],
            set_={
                "worker_id": new_lease.excluded.worker_id,
                "generation": lease.c.generation + 1,
                "claimed_at": new_lease.excluded.claimed_at,
            },
        )
        .returning(lease.c.trial_id, lease.c.generation, lease.c.last_worker_id)
        .cte("leased")
    )
    # This statement still sees the picked trial as WAITING: one less is left.
    waiting = (
        sa.select(sa.func.count() - 1)
        .where(t.c.study_id == sa.bindparam("study"), t.c.state == "WAITING")
        .where(_not_paused(t.c.trial_id) if skip_paused else sa.true())
        .scalar_subquery()
    )
    trial_params_json = (
        sa.select(
            sa.func.json_agg(
                sa.func.json_build_array(p.c.param_name, p.c.param_value, p.c.distribution_json)
            )
        )
        .where(p.c.trial_id == leased.c.trial_id)
        .scalar_subquery()
    )
    steps_json = (
        sa.select(
            sa.func.json_agg(
                sa.func.json_build_array(
                    v.c.step, v.c.intermediate_value, v.c.intermediate_value_type
                )
            )
        )
        .where(v.c.trial_id == leased.c.trial_id)
        .scalar_subquery()
    )
    return sa.select(
        leased.c.trial_id,
        started.c.number,
        leased.c.generation,
        waiting.label("waiting"),
        trial_params_json.label("params"),
        steps_json.label("steps"),
        leased.c.last_worker_id,
    ).select_from(leased.join(started, started.c.trial_id == leased.c.trial_id))


# -- SQLite: three statements in one BEGIN IMMEDIATE transaction ---------------------------------


def _claim_sqlite(storage: Storage, params: dict[str, Any], skip_paused: bool) -> Claim | None:
    t = trials
    with storage.transaction() as conn:
        picked = conn.execute(
            sa.select(t.c.trial_id, t.c.number)
            .where(t.c.study_id == params["study"], t.c.state == "WAITING")
            .where(_not_paused(t.c.trial_id) if skip_paused else sa.true())
            .order_by(t.c.number)
            .limit(1)
        ).first()
        if picked is None:
            return None
        conn.execute(
            sa.update(t)
            .where(t.c.trial_id == picked.trial_id)
            .values(
                state="RUNNING",
                datetime_start=sa.func.coalesce(t.c.datetime_start, params["started"]),
            )
        )
        generation = conn.execute(
            lease_upsert("sqlite"),
            {"picked": picked.trial_id, "study": params["study"], "claimer": params["claimer"]},
        ).scalar_one()
    return Claim(picked.trial_id, picked.number, params["study"], params["claimer"], generation)


@functools.cache
def lease_upsert(dialect: str) -> Any:
    """Give the lease of trial ``picked`` to ``claimer`` (a new lease, or the next generation
    of the trial's lease: every write of the former holder is fenced off)."""
    lease = trial_leases
    insert = insert_for(dialect, lease).values(
        trial_id=sa.bindparam("picked"),
        study_id=sa.bindparam("study"),
        worker_id=sa.bindparam("claimer"),
        generation=1,
        claimed_at=db_now(dialect),
        epoch=0,
    )
    return insert.on_conflict_do_update(
        index_elements=[lease.c.trial_id],
        set_={
            "worker_id": insert.excluded.worker_id,
            "generation": lease.c.generation + 1,
            "claimed_at": insert.excluded.claimed_at,
        },
    ).returning(lease.c.generation)


@functools.cache
def _held_statement() -> sa.Select:
    lease = trial_leases
    return (
        sa.select(lease.c.trial_id, trials.c.number, trials.c.study_id, lease.c.generation)
        .join(trials, trials.c.trial_id == lease.c.trial_id)
        .where(lease.c.worker_id == sa.bindparam("holder"), trials.c.state == "RUNNING")
    )
