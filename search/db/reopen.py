"""A study given more budget after it ended: what its end stopped goes on.

When a study ends, `search.db.pauses.end_waiting` ends the trials still WAITING PRUNED
(``hpsearch:ended_by`` = "budget" or "n_trials"; ``hpsearch:ended_as`` = "paused" at a rung, or
"queued": handed back, e.g. cut by the budget in the middle of a rung, or interrupted), and
their checkpoints are kept (`search.worker.leftovers`). `reopen_ended` undoes that for those
that still have one: WAITING again without the value the study's end gave them; a paused one
paused at its highest rung again (promotion, `search.pruning.promotion`, ranks it as before),
a queued one queued (the next free worker resumes it from its checkpoint). It runs in the
transaction that stores the new budgets, which holds the study's row as the study's end does.
Trials ended before ``hpsearch:ended_as`` existed count as paused (those with a rung).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from search.db.budget import epochs_used, first_start
from search.db.checkpoint_pointers import POINTER_ATTR
from search.db.pauses import ENDED_AS_ATTR
from search.db.storage import Storage
from search.db.tables import trial_rungs, trial_system_attributes, trial_values, trials

__all__ = ["ENDED_BY_ATTR", "Reopened", "Spent", "reopen_ended", "spent"]

ENDED_BY_ATTR = "hpsearch:ended_by"
_STUDY_END = ("budget", "n_trials")


@dataclass(frozen=True)
class Spent:
    """What a study has used of its budgets."""

    epochs: int
    trials: int
    """Trials the study has (queued ones included: they run unless it ends first)."""
    first_start: datetime.datetime | None


def spent(storage: Storage, study_id: int) -> Spent:
    t = trials
    with storage.read() as conn:
        started = conn.execute(
            sa.select(sa.func.count()).where(t.c.study_id == study_id)
        ).scalar_one()
        return Spent(epochs_used(None, study_id, conn), started, first_start(None, study_id, conn))


@dataclass(frozen=True)
class Reopened:
    """Trials a raised budget reopened: paused at a rung again, or queued to resume."""

    paused: list[int]
    queued: list[int]


def reopen_ended(conn: Connection, study_id: int) -> Reopened:
    """Trials the study's end left PRUNED, with a checkpoint: paused at their rung again, or
    queued again (see the module's docstring), in the transaction `conn`."""
    t, a, r, v = trials, trial_system_attributes, trial_rungs, trial_values
    ended = sa.select(a.c.trial_id).where(
        a.c.key == ENDED_BY_ATTR, a.c.value_json.in_([f'"{why}"' for why in _STUDY_END])
    )
    queued = sa.select(a.c.trial_id).where(a.c.key == ENDED_AS_ATTR, a.c.value_json == '"queued"')
    with_checkpoint = sa.select(a.c.trial_id).where(a.c.key == POINTER_ATTR)
    rows = conn.execute(
        sa.select(t.c.trial_id, t.c.number, t.c.trial_id.in_(queued).label("queued"))
        .where(
            t.c.study_id == study_id,
            t.c.state == "PRUNED",
            t.c.trial_id.in_(ended),
            t.c.trial_id.in_(with_checkpoint),
            sa.or_(t.c.trial_id.in_(queued), sa.exists().where(r.c.trial_id == t.c.trial_id)),
        )
        .order_by(t.c.number)
    ).all()
    ids = [row.trial_id for row in rows]
    if not ids:
        return Reopened([], [])
    conn.execute(
        sa.update(t).where(t.c.trial_id.in_(ids)).values(state="WAITING", datetime_complete=None)
    )
    conn.execute(sa.delete(v).where(v.c.trial_id.in_(ids)))
    conn.execute(
        sa.delete(a).where(a.c.trial_id.in_(ids), a.c.key.in_([ENDED_BY_ATTR, ENDED_AS_ATTR]))
    )
    to_pause = [row.trial_id for row in rows if not row.queued]
    if to_pause:
        top = (
            sa.select(r.c.trial_id, sa.func.max(r.c.level).label("level"))
            .where(r.c.trial_id.in_(to_pause))
            .group_by(r.c.trial_id)
        )
        for trial_id, level in conn.execute(top).all():
            conn.execute(
                sa.update(r).where(r.c.trial_id == trial_id, r.c.level == level).values(paused=True)
            )
    return Reopened(
        paused=[row.number for row in rows if not row.queued],
        queued=[row.number for row in rows if row.queued],
    )
