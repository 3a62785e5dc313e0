"""A study's epoch budget, counted by every worker in one row: never exceeded, whatever the fleet.

A worker reserves each epoch before training it (`reserve_epoch`: one conditional increment,
``UPDATE ... SET epochs_used = epochs_used + 1 WHERE epochs_used < budget RETURNING``, atomic on
PostgreSQL under concurrent workers and under SQLite's write lock), and gives back a reservation
it did not use (`return_epoch`: a trial paused, pruned, handed back or cut before training it).
A worker that dies holding a reservation leaves it counted: the epoch it was training counts, as
a repeat of it by the trial's next owner does. So `epochs_used` is the epochs trained by the
whole fleet, repeats included, and never more than the budget.

The study's start, for `budget_hours`, is its first trial's start (Optuna's datetime_start).

    ensure_counter(storage, study_id)
    if reserve_epoch(storage, study_id, budget=5000):
        ...train one epoch...
"""

from __future__ import annotations

import datetime
import functools
from typing import Any

import sqlalchemy as sa

from search.db.statements import insert_for
from search.db.storage import Storage
from search.db.tables import study_budgets, trials

__all__ = ["ensure_counter", "epochs_used", "first_start", "reserve_epoch", "return_epoch"]


def ensure_counter(storage: Storage, study_id: int) -> None:
    """Create the study's counter row if it has none (idempotent; any worker may)."""
    with storage.autocommit() as conn:
        dialect = "postgresql" if storage.is_postgres else "sqlite"
        conn.execute(_insert_statement(dialect), {"study": study_id})


def reserve_epoch(storage: Storage, study_id: int, budget: int) -> bool:
    """Reserve the next epoch of the study's budget; False when it is spent."""
    with storage.autocommit() as conn:
        row = conn.execute(_reserve_statement(), {"study": study_id, "budget": budget}).first()
    return row is not None


def return_epoch(storage: Storage, study_id: int) -> None:
    """Give back a reserved epoch that was not trained."""
    with storage.autocommit() as conn:
        conn.execute(
            sa.update(study_budgets)
            .where(study_budgets.c.study_id == study_id, study_budgets.c.epochs_used > 0)
            .values(epochs_used=study_budgets.c.epochs_used - 1)
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
        .where(b.c.study_id == sa.bindparam("study"), b.c.epochs_used < sa.bindparam("budget"))
        .values(epochs_used=b.c.epochs_used + 1)
        .returning(b.c.epochs_used)
    )
