"""A study given more budget after it ended: its paused trials become promotable again.

When a study ends, `search.db.pauses.end_waiting` ends the trials still paused at a rung PRUNED
(``hpsearch:ended_by`` = "budget" or "n_trials"), and their checkpoints are kept
(`search.worker.leftovers`). `reopen_paused` undoes that for those that still have one: WAITING
again, paused at their highest rung, without the value the study's end gave them, in one
transaction; promotion (`search.pruning.promotion`) then ranks them as before.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

import sqlalchemy as sa

from search.db.budget import epochs_used, first_start
from search.db.checkpoint_pointers import POINTER_ATTR
from search.db.storage import Storage
from search.db.tables import trial_rungs, trial_system_attributes, trial_values, trials

__all__ = ["ENDED_BY_ATTR", "Spent", "reopen_paused", "spent"]

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


def reopen_paused(storage: Storage, study_id: int) -> list[int]:
    """Trials the study's end left PRUNED at a rung, with a checkpoint: paused there again.
    Returns their numbers."""
    t, a, r, v = trials, trial_system_attributes, trial_rungs, trial_values
    ended = sa.select(a.c.trial_id).where(
        a.c.key == ENDED_BY_ATTR, a.c.value_json.in_([f'"{why}"' for why in _STUDY_END])
    )
    with_checkpoint = sa.select(a.c.trial_id).where(a.c.key == POINTER_ATTR)
    with storage.transaction() as conn:
        rows = conn.execute(
            sa.select(t.c.trial_id, t.c.number)
            .where(
                t.c.study_id == study_id,
                t.c.state == "PRUNED",
                t.c.trial_id.in_(ended),
                t.c.trial_id.in_(with_checkpoint),
                sa.exists().where(r.c.trial_id == t.c.trial_id),
            )
            .order_by(t.c.number)
        ).all()
        ids = [row.trial_id for row in rows]
        if not ids:
            return []
        conn.execute(
            sa.update(t)
            .where(t.c.trial_id.in_(ids))
            .values(state="WAITING", datetime_complete=None)
        )
        conn.execute(sa.delete(v).where(v.c.trial_id.in_(ids)))
        conn.execute(sa.delete(a).where(a.c.trial_id.in_(ids), a.c.key == ENDED_BY_ATTR))
        top = (
            sa.select(r.c.trial_id, sa.func.max(r.c.level).label("level"))
            .where(r.c.trial_id.in_(ids))
            .group_by(r.c.trial_id)
        )
        for trial_id, level in conn.execute(top).all():
            conn.execute(
                sa.update(r).where(r.c.trial_id == trial_id, r.c.level == level).values(paused=True)
            )
    return [row.number for row in rows]
