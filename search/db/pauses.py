"""Paused trials of promotion-based ASHA, in the shared database.

A trial that reaches a rung is handed back like a preempted trial (its checkpoint kept, its lease
released, WAITING in Optuna's table, no failed attempt counted) and marked paused at that rung in
`trial_rungs`, in one fenced transaction (`pause`). The plain claim skips paused trials
(`search.db.claims.claim_next_trial(..., skip_paused=True)`); a paused trial is claimed only by
`claim_paused`, which unmarks it and takes its lease in one transaction, so two workers never
resume the same trial. `trial_rungs` keeps every trial's value at every rung it reached: the
rung table the promotion rule ranks against (`search.pruning.promotion`).

When a study ends (its budget spent, or no trial left to start or promote), `end_waiting` ends
what is left queued, paused trials included: PRUNED with their last reported value.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from search.db.claims import utcnow_naive
from search.db.leases import Claim, fence, release
from search.db.statements import db_now, insert_for, upsert_attributes, write_intermediate_values
from search.db.storage import Storage
from search.db.tables import (
    trial_intermediate_values,
    trial_leases,
    trial_params,
    trial_rungs,
    trial_system_attributes,
    trial_user_attributes,
    trial_values,
    trials,
    value_kind,
)

__all__ = ["RungRow", "claim_paused", "end_waiting", "pause", "record_rung", "rung_rows"]


@dataclass(frozen=True)
class RungRow:
    trial_id: int
    bracket: int
    level: int
    value: float
    paused: bool


def rung_rows(storage: Storage, study_id: int) -> list[RungRow]:
    """Every trial's value at every rung it reached, and whether it sits paused there."""
    r = trial_rungs
    with storage.autocommit() as conn:
        rows = conn.execute(
            sa.select(r.c.trial_id, r.c.bracket, r.c.level, r.c.value, r.c.paused).where(
                r.c.study_id == study_id
            )
        ).all()
    return [
        RungRow(t, b, lvl, math.nan if v is None else float(v), bool(p)) for t, b, lvl, v, p in rows
    ]


def record_rung(storage: Storage, claim: Claim, bracket: int, level: int, value: float) -> None:
    """Record the trial's value at a rung it passes without pausing (promoted at once)."""
    with storage.autocommit() as conn:
        _upsert_rung(conn, claim, bracket, level, value, paused=False)


def pause(
    storage: Storage,
    claim: Claim,
    bracket: int,
    level: int,
    value: float,
    intermediate: dict[int, float] | None = None,
    system_attrs: dict[str, Any] | None = None,
) -> None:
    """Hand the trial back paused at rung `level` (fenced: raises LeaseLost if it was taken
    over): its unwritten values written, WAITING, its lease released, marked paused."""
    with storage.transaction() as conn:
        fence(conn, claim)
        write_intermediate_values(conn, claim.trial_id, intermediate or {})
        upsert_attributes(conn, trial_system_attributes, claim.trial_id, system_attrs or {})
        _upsert_rung(conn, claim, bracket, level, value, paused=True)
        release(conn, claim.trial_id, keep_holder=True)


def claim_paused(
    storage: Storage, study_id: int, worker_id: str, trial_id: int, level: int
) -> Claim | None:
    """Resume trial `trial_id` paused at `level`: unmark it and take its lease, in one
    transaction. None if another worker resumed (or ended) it first."""
    dialect = "postgresql" if storage.is_postgres else "sqlite"
    try:
        with storage.transaction() as conn:
            return _claim_paused(conn, dialect, study_id, worker_id, trial_id, level)
    except _Gone:
        return None


class _Gone(Exception):
    """The paused trial was ended meanwhile: roll the transaction back."""


def _claim_paused(
    conn: Connection, dialect: str, study_id: int, worker_id: str, trial_id: int, level: int
) -> Claim | None:
    r = trial_rungs
    unpaused = conn.execute(
        sa.update(r)
        .where(r.c.trial_id == trial_id, r.c.level == level, r.c.paused.is_(True))
        .values(paused=False)
    ).rowcount
    if unpaused != 1:
        return None
    started = conn.execute(
        sa.update(trials)
        .where(trials.c.trial_id == trial_id, trials.c.state == "WAITING")
        .values(state="RUNNING")
        .returning(trials.c.number)
    ).first()
    if started is None:  # ended meanwhile: leave the mark as it was
        raise _Gone
    generation = conn.execute(
        _lease_upsert(dialect),
        {"picked": trial_id, "study": study_id, "claimer": worker_id},
    ).scalar_one()
    return Claim(trial_id, started.number, study_id, worker_id, generation)


def end_waiting(storage: Storage, study_id: int, reason: str) -> tuple[list[int], list[int]]:
    """End every trial of the study still WAITING when the study ends: one that started
    (paused, or handed back) ends PRUNED with its last reported value; one that was queued
    and never started is removed (sampled ahead, it was never part of the search). Returns
    the numbers of both. A trial a worker claims meanwhile is left to that worker."""
    t, iv = trials, trial_intermediate_values
    ended: list[int] = []
    removed: list[int] = []
    with storage.transaction() as conn:
        waiting = conn.execute(
            sa.select(t.c.trial_id, t.c.number, t.c.datetime_start).where(
                t.c.study_id == study_id, t.c.state == "WAITING"
            )
        ).all()
        done = utcnow_naive()
        for trial_id, number, started in waiting:
            if started is None and _remove_unstarted(conn, trial_id):
                removed.append(number)
                continue
            changed = conn.execute(
                sa.update(t)
                .where(t.c.trial_id == trial_id, t.c.state == "WAITING")
                .values(state="PRUNED", datetime_complete=done)
            ).rowcount
            if changed != 1:
                continue
            last = conn.execute(
                sa.select(iv.c.intermediate_value, iv.c.intermediate_value_type)
                .where(iv.c.trial_id == trial_id)
                .order_by(iv.c.step.desc())
                .limit(1)
            ).first()
            if last is not None and last.intermediate_value_type != "NAN":
                value = (
                    float(last.intermediate_value)
                    if last.intermediate_value_type == "FINITE"
                    else (math.inf if last.intermediate_value_type == "INF_POS" else -math.inf)
                )
                conn.execute(
                    insert_for(conn.dialect.name, trial_values)
                    .values(
                        trial_id=trial_id,
                        objective=0,
                        value=value if value_kind(value) == "FINITE" else None,
                        value_type=value_kind(value),
                    )
                    .on_conflict_do_nothing()
                )
            upsert_attributes(
                conn, trial_system_attributes, trial_id, {"hpsearch:ended_by": reason}
            )
            conn.execute(
                sa.update(trial_rungs)
                .where(trial_rungs.c.trial_id == trial_id, trial_rungs.c.paused.is_(True))
                .values(paused=False)
            )
            ended.append(number)
    return ended, removed


def _remove_unstarted(conn: Connection, trial_id: int) -> bool:
    """Delete a queued trial that never started, with its params and attributes."""
    iv = trial_intermediate_values
    if conn.execute(sa.select(iv.c.step).where(iv.c.trial_id == trial_id).limit(1)).first():
        return False
    # Lock the row first (a claim skips it, or has taken it: then it stays).
    locked = conn.execute(
        sa.update(trials)
        .where(
            trials.c.trial_id == trial_id,
            trials.c.state == "WAITING",
            trials.c.datetime_start.is_(None),
        )
        .values(state="WAITING")
    ).rowcount
    if locked != 1:
        return False
    for table in (
        trial_params,
        trial_system_attributes,
        trial_user_attributes,
        trial_values,
        trial_leases,
    ):
        conn.execute(sa.delete(table).where(table.c.trial_id == trial_id))
    conn.execute(sa.delete(trials).where(trials.c.trial_id == trial_id))
    return True


def _upsert_rung(
    conn: Connection, claim: Claim, bracket: int, level: int, value: float, *, paused: bool
) -> None:
    r = trial_rungs
    insert = insert_for(conn.dialect.name, r).values(
        trial_id=claim.trial_id,
        level=level,
        study_id=claim.study_id,
        bracket=bracket,
        value=None if math.isnan(value) else value,
        paused=paused,
    )
    conn.execute(
        insert.on_conflict_do_update(
            index_elements=[r.c.trial_id, r.c.level],
            set_={"value": insert.excluded.value, "paused": insert.excluded.paused},
        )
    )


@functools.cache
def _lease_upsert(dialect: str) -> Any:
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
