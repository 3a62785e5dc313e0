"""A study's epoch budget, counted by every worker in one row: never exceeded, whatever the fleet.

A worker reserves epochs before training them (`reserve_epochs`: one conditional increment,
``UPDATE ... SET epochs_used = epochs_used + n WHERE epochs_used + n <= budget RETURNING``,
atomic on PostgreSQL under concurrent workers and under SQLite's write lock; n = the epochs up
to the trial's next rung, else one), and gives back what it did not train (`return_epoch`: a
trial paused, pruned, handed back or cut before training them). A worker that dies holding a
reservation leaves it counted: the epoch it was training counts, as a repeat of it by the
trial's next owner does. So `epochs_used` never exceeds the budget, and without crashes it is
the epochs the fleet trained.

The study's start, for `budget_hours`, is its first trial's start (Optuna's datetime_start).

    ensure_counter(storage, study_id)
    if reserve_epoch(storage, study_id, budget=5000):
        ...train one epoch...
"""

from __future__ import annotations

import datetime
import functools
from typing import Any, NamedTuple

import sqlalchemy as sa

from search.db.statements import insert_for
from search.db.storage import Storage
from search.db.tables import study_budgets, trials

__all__ = [
    "Reservation",
    "ensure_counter",
    "epochs_used",
    "first_start",
    "reserve",
    "reserve_epoch",
    "reserve_epochs",
    "return_epoch",
]


def ensure_counter(storage: Storage, study_id: int) -> None:
    """Create the study's counter row if it has none (idempotent; any worker may)."""
    with storage.autocommit() as conn:
        dialect = "postgresql" if storage.is_postgres else "sqlite"
        conn.execute(_insert_statement(dialect), {"study": study_id})


def reserve_epoch(storage: Storage, study_id: int, budget: int) -> bool:
    """Reserve the next epoch of the study's budget; False when it is spent."""
    return reserve_epochs(storage, study_id, budget, 1) == 1


def reserve_epochs(storage: Storage, study_id: int, budget: int, wanted: int) -> int:
    """Reserve `wanted` epochs if that many are left, else one; returns how many (0: the
    budget is spent). A worker reserves the epochs up to its trial's next decision (a rung)
    at once: one statement per rung, not per epoch; near the end of the budget, one by one."""
    return reserve(storage, study_id, budget, wanted).epochs


class Reservation(NamedTuple):
    epochs: int
    """Epochs reserved (0: the budget is spent)."""
    used: int | None
    """The study's epochs used, this reservation included, as the reserving statement read
    them (None when nothing was reserved)."""


def reserve(storage: Storage, study_id: int, budget: int, wanted: int) -> Reservation:
    """`reserve_epochs`, also saying how much of the budget is used, from the same statement."""
    with storage.autocommit() as conn:
        if wanted > 1:
            used = conn.execute(
                _reserve_statement(), {"study": study_id, "budget": budget, "n": wanted}
            ).scalar()
            if used is not None:
                return Reservation(wanted, used)
        used = conn.execute(
            _reserve_statement(), {"study": study_id, "budget": budget, "n": 1}
        ).scalar()
        return Reservation(0, None) if used is None else Reservation(1, used)


def return_epoch(storage: Storage, study_id: int, epochs: int = 1) -> None:
    """Give back reserved epochs that were not trained."""
    with storage.autocommit() as conn:
        conn.execute(
            sa.update(study_budgets)
            .where(study_budgets.c.study_id == study_id)
            .values(epochs_used=sa.func.max(study_budgets.c.epochs_used - epochs, 0))
            if not storage.is_postgres
            else sa.update(study_budgets)
            .where(study_budgets.c.study_id == study_id)
            .values(epochs_used=sa.func.greatest(study_budgets.c.epochs_used - epochs, 0))
        )


def epochs_used(storage: Storage | None, study_id: int, conn: Any = None) -> int:
    """Epochs the fleet trained (or is training) so far; 0 for a study without a counter."""
    statement = sa.select(study_budgets.c.epochs_used).where(study_budgets.c.study_id == study_id)
    if conn is not None:
        return conn.execute(statement).scalar() or 0
    assert storage is not None
    with storage.autocommit() as c:
        return c.execute(statement).scalar() or 0


def first_start(
    storage: Storage | None, study_id: int, conn: Any = None
) -> datetime.datetime | None:
    """When the study's first trial started (naive UTC, as Optuna stores it), or None."""
    statement = sa.select(sa.func.min(trials.c.datetime_start)).where(trials.c.study_id == study_id)
    if conn is not None:
        return conn.execute(statement).scalar()
    assert storage is not None
    with storage.autocommit() as c:
        return c.execute(statement).scalar()


@functools.cache
def _insert_statement(dialect: str) -> Any:
    return (
        insert_for(dialect, study_budgets)
        .values(study_id=sa.bindparam("study"), epochs_used=0)
        .on_conflict_do_nothing(index_elements=[study_budgets.c.study_id])
    )


@functools.cache
def _reserve_statement() -> Any:
    b = study_budgets
    return (
        sa.update(b)
        .where(
            b.c.study_id == sa.bindparam("study"),
            b.c.epochs_used + sa.bindparam("n", type_=sa.Integer)
            <= sa.bindparam("budget", type_=sa.Integer),
        )
        .values(epochs_used=b.c.epochs_used + sa.bindparam("n", type_=sa.Integer))
        .returning(b.c.epochs_used)
    )
