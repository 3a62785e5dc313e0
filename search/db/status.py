"""What `hpsearch status` and the workers' progress lines read about a study's trials."""

from __future__ import annotations

import functools

import sqlalchemy as sa

from search.db.storage import Storage
from search.db.tables import trial_values, trials

__all__ = ["best_statement", "best_trial"]


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
