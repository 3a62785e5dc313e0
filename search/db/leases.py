"""Leases: which worker holds a trial, and the fence every write for the trial passes.

A lease (a row of ``trial_leases``) names the worker holding a trial and a generation that
grows with each claim. A `Claim` is a worker's copy of its lease. Every write for a trial
(report, finish, hand back, checkpoint pointer) checks the lease in the same transaction or
statement: a worker that lost its trial (declared dead, then back after a network cut) can never
overwrite the work of the worker that took the trial over; it gets `LeaseLost`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from search.db.tables import trial_leases, trials

__all__ = [
    "Claim",
    "LeaseLost",
    "TrialData",
    "fence",
    "holds",
    "lease_matches",
    "lease_params",
    "release",
]


class LeaseLost(Exception):
    """This worker no longer holds the trial: another worker took it over."""


@dataclass(frozen=True)
class TrialData:
    """What a worker needs of a trial it claimed, as stored."""

    params: list[tuple[str, float, str]]
    """(name, internal value, distribution JSON) per parameter."""
    steps: list[tuple[int, float | None, str]]
    """(step, value, Optuna's value type) per intermediate value."""
    previous_worker: str | None
    """The worker that held the trial before, if it is resumed."""


@dataclass(frozen=True)
class Claim:
    """A trial a worker holds: its copy of the lease."""

    trial_id: int
    number: int
    study_id: int
    worker_id: str
    generation: int
    """Fencing token: writes for the trial succeed only while the lease has this generation."""
    waiting: int | None = field(default=None, compare=False)
    """Trials still queued right after this claim (None: not counted)."""
    loaded: TrialData | None = field(default=None, compare=False, repr=False)
    """The trial's stored data, read by the claim itself (None: not read)."""


def fence(conn: Connection, claim: Claim, epoch: int | None = None) -> None:
    """Lock the claim's lease row for this transaction (recording `epoch` if given), or raise
    LeaseLost."""
    values: dict[str, Any] = {"new_epoch": epoch} if epoch is not None else {}
    updated = conn.execute(
        _fence_statement(epoch is not None), {**lease_params(claim), **values}
    ).rowcount
    if updated != 1:
        raise LeaseLost(f"trial {claim.number} was taken over by another worker")


def holds(conn: Connection, claim: Claim) -> bool:
    """Whether the claim's worker still holds the trial with the claim's generation."""
    return conn.execute(_holds_statement(), lease_params(claim)).first() is not None


def release(conn: Connection, trial_id: int, *, keep_holder: bool = False) -> None:
    """Queue a held trial again (WAITING, with its params, values and checkpoint).

    `last_worker_id` records who held it, so the next worker knows whose work it continues.
    Unless `keep_holder`, the holder can no longer write to the trial; with it (a hand-back),
    a retry after a commit lost with the connection still passes the fence, until the next
    claim.
    """
    conn.execute(_requeue_statement(), {"requeued": trial_id})
    conn.execute(_release_statement(keep_holder), {"requeued": trial_id})


def lease_matches() -> sa.ColumnElement[bool]:
    """WHERE clause: the lease row is the claim's (parameters from `lease_params`)."""
    return sa.and_(
        trial_leases.c.trial_id == sa.bindparam("lease_trial"),
        trial_leases.c.worker_id == sa.bindparam("lease_worker"),
        trial_leases.c.generation == sa.bindparam("lease_generation"),
    )


def lease_params(claim: Claim) -> dict[str, Any]:
    """The parameters `lease_matches` binds."""
    return {
        "lease_trial": claim.trial_id,
        "lease_worker": claim.worker_id,
        "lease_generation": claim.generation,
    }


@functools.cache
def _fence_statement(with_epoch: bool) -> sa.Update:
    sets = (
        {"epoch": sa.bindparam("new_epoch")}
        if with_epoch
        else {"generation": trial_leases.c.generation}  # a no-op write: it locks the row
    )
    return sa.update(trial_leases).where(lease_matches()).values(sets)


@functools.cache
def _holds_statement() -> sa.Select:
    return sa.select(sa.literal(1)).where(lease_matches())


@functools.cache
def _requeue_statement() -> sa.Update:
    return (
        sa.update(trials)
        .where(trials.c.trial_id == sa.bindparam("requeued"), trials.c.state == "RUNNING")
        .values(state="WAITING")
    )


@functools.cache
def _release_statement(keep_holder: bool) -> sa.Update:
    sets: dict[str, Any] = {"last_worker_id": trial_leases.c.worker_id}
    if not keep_holder:
        sets["worker_id"] = None
    return (
        sa.update(trial_leases)
        .where(trial_leases.c.trial_id == sa.bindparam("requeued"))
        .values(sets)
    )
