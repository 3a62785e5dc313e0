"""The one incremental reader of a study's trials: what changed since a view's last look.

A finished trial never changes, so a view of a study (the samplers' mirror,
`search.sampling.view`; the pruners' rungs, `search.pruning.view`) reads, each time, only the
trials created since its last look and the ones unfinished then (`ChangeCursor`), both on the
primary key, then whatever of those trials it needs: params, system attributes, values,
intermediate values. Every read takes a connection the caller opened (one transaction for a
whole look) and the ids to read.

Example::

    cursor = ChangeCursor(study_id)
    with storage.read() as conn:
        rows = read_changed_trials(conn, cursor)
    for r in rows:
        cursor.saw(r.trial_id, r.state)
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from optuna.trial import TrialState
from sqlalchemy.engine import Connection, Row

from search.db.statements import bound_ids, in_bound_ids
from search.db.tables import (
    trial_intermediate_values,
    trial_params,
    trial_system_attributes,
    trial_values,
    trials,
)

__all__ = [
    "RUNG_PREFIX",
    "STATES",
    "ChangeCursor",
    "read_changed_trials",
    "read_curves",
    "read_params",
    "read_system_attrs",
    "read_values",
]

STATES = {s.name: s for s in TrialState}
"""Optuna's trial states by the name the trials table holds."""
RUNG_PREFIX = "completed_rung_"
"""Optuna's successive halving records a trial's value at rung k as `completed_rung_k`."""


@dataclass
class ChangeCursor:
    """Where a view's last look ended: the highest trial id it saw and the trials unfinished
    then. Copy it (`snapshot`) to read without holding the view's lock."""

    study_id: int
    max_id: int = -1
    unfinished: set[int] = field(default_factory=set)

    def saw(self, trial_id: int, state: str | TrialState) -> None:
        """A trial read in `state`: read again next time unless it is finished."""
        finished = (STATES[state] if isinstance(state, str) else state).is_finished()
        if finished:
            self.unfinished.discard(trial_id)
        else:
            self.unfinished.add(trial_id)
        self.max_id = max(self.max_id, trial_id)

    def snapshot(self) -> ChangeCursor:
        return ChangeCursor(self.study_id, self.max_id, set(self.unfinished))


def read_changed_trials(
    conn: Connection, cursor: ChangeCursor, *, with_rungs: bool = False
) -> Sequence[Row[Any]]:
    """The trials created since the cursor's last look, or unfinished then: trial_id, number,
    state, datetime_start, datetime_complete; `with_rungs`: one row per `completed_rung_*`
    attribute too (key, value_json; None for a trial without one), in the same round trip."""
    dialect = conn.dialect.name
    statement = _changed_with_rungs(dialect) if with_rungs else _changed(dialect)
    ids = bound_ids(dialect, sorted(cursor.unfinished))
    return conn.execute(
        statement, {"study": cursor.study_id, "max_seen": cursor.max_id, "ids": ids}
    ).all()


def read_params(conn: Connection, trial_ids: Sequence[int]) -> Sequence[Row[Any]]:
    """(trial_id, param_name, param_value, distribution_json) of the trials."""
    dialect = conn.dialect.name
    return conn.execute(_params(dialect), {"ids": bound_ids(dialect, trial_ids)}).all()


def read_system_attrs(conn: Connection, trial_ids: Sequence[int]) -> Sequence[Row[Any]]:
    """(trial_id, key, value_json) of the trials' system attributes."""
    dialect = conn.dialect.name
    return conn.execute(_attrs(dialect), {"ids": bound_ids(dialect, trial_ids)}).all()


def read_values(conn: Connection, trial_ids: Sequence[int]) -> Sequence[Row[Any]]:
    """(trial_id, value, value_type) of the trials' first objective."""
    dialect = conn.dialect.name
    return conn.execute(_values(dialect), {"ids": bound_ids(dialect, trial_ids)}).all()


def read_curves(conn: Connection, trial_ids: Sequence[int]) -> Sequence[Row[Any]]:
    """(trial_id, step, intermediate_value, intermediate_value_type) of the trials' reports."""
    dialect = conn.dialect.name
    return conn.execute(_curves(dialect), {"ids": bound_ids(dialect, trial_ids)}).all()


def _changed_condition(dialect: str) -> sa.ColumnElement[bool]:
    t = trials
    # Both branches on the primary key (the ids are this study's): reads only what changed,
    # not every trial of the study.
    return sa.or_(
        sa.and_(t.c.trial_id > sa.bindparam("max_seen"), t.c.study_id == sa.bindparam("study")),
        in_bound_ids(dialect, t.c.trial_id),
    )


@functools.cache
def _changed(dialect: str) -> sa.Select:
    t = trials
    return sa.select(
        t.c.trial_id, t.c.number, t.c.state, t.c.datetime_start, t.c.datetime_complete
    ).where(_changed_condition(dialect))


@functools.cache
def _changed_with_rungs(dialect: str) -> sa.Select:
    t, a = trials, trial_system_attributes
    rung = sa.and_(a.c.trial_id == t.c.trial_id, a.c.key.startswith(RUNG_PREFIX, autoescape=True))
    return (
        sa.select(
            t.c.trial_id,
            t.c.number,
            t.c.state,
            t.c.datetime_start,
            t.c.datetime_complete,
            a.c.key,
            a.c.value_json,
        )
        .select_from(t.outerjoin(a, rung))
        .where(_changed_condition(dialect))
    )


@functools.cache
def _params(dialect: str) -> sa.Select:
    p = trial_params
    return sa.select(p.c.trial_id, p.c.param_name, p.c.param_value, p.c.distribution_json).where(
        in_bound_ids(dialect, p.c.trial_id)
    )


@functools.cache
def _attrs(dialect: str) -> sa.Select:
    a = trial_system_attributes
    return sa.select(a.c.trial_id, a.c.key, a.c.value_json).where(
        in_bound_ids(dialect, a.c.trial_id)
    )


@functools.cache
def _values(dialect: str) -> sa.Select:
    v = trial_values
    return sa.select(v.c.trial_id, v.c.value, v.c.value_type).where(
        in_bound_ids(dialect, v.c.trial_id), v.c.objective == 0
    )


@functools.cache
def _curves(dialect: str) -> sa.Select:
    v = trial_intermediate_values
    return sa.select(
        v.c.trial_id, v.c.step, v.c.intermediate_value, v.c.intermediate_value_type
    ).where(in_bound_ids(dialect, v.c.trial_id))
