"""Paused trials of promotion-based ASHA, in the shared database.

A trial that reaches a rung is handed back like a preempted trial (its checkpoint kept, its lease
released, WAITING in Optuna's table, no failed attempt counted) and marked paused at that rung in
`trial_rungs`, in one fenced transaction (`pause`). The plain claim skips paused trials
(`search.db.claims.claim_next_trial(..., skip_paused=True)`); a paused trial is claimed only by
`claim_paused`, which unmarks it and takes its lease in one transaction, so two workers never
resume the same trial. `trial_rungs` keeps every trial's value at every rung it reached: the
rung table the promotion rule ranks against (`search.pruning.promotion`).

When a study ends (its budget spent, or no trial left to start or promote), `end_waiting` ends
what is left queued, paused trials included: PRUNED with their last reported value, each saying
how it waited (``hpsearch:ended_as``: "paused" at a rung, or "queued": handed back, e.g. cut by
the budget in the middle of a rung), so that more budget reopens it as it was
(`search.db.reopen`). It ends nothing if the study's budgets were raised meanwhile
(`hpsearch extend`): it and the raise take turns on the study's row.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from search.db.claims import lease_upsert, utcnow_naive
from search.db.leases import Claim, fence, release
from search.db.statements import insert_for, upsert_attributes, write_intermediate_values
from search.db.storage import Storage
from search.db.studies import CONFIG_ATTR, lock_study
from search.db.tables import (
    study_system_attributes,
    trial_intermediate_values,
    trial_leases,
    trial_params,
    trial_rungs,
    trial_system_attributes,
    trial_user_attributes,
    trial_values,
    trials,
)
from search.db.trial_rows import lock_budget

__all__ = [
    "ENDED_AS_ATTR",
    "RungRow",
    "claim_paused",
    "end_waiting",
    "next_promotable",
    "pass_rung_if_promotable",
    "pause",
    "paused_count",
    "rung_rows",
]


ENDED_AS_ATTR = "hpsearch:ended_as"
"""Trial system attribute written by the study's end: "paused" (at a rung) or "queued"."""


@dataclass(frozen=True)
class RungRow:
    trial_id: int
    bracket: int
    level: int
    value: float
    paused: bool


def paused_count(conn: Connection, study_id: int) -> int:
    """How many of the study's trials sit paused at a rung, waiting for promotion."""
    return conn.execute(
        sa.select(sa.func.count()).where(
            trial_rungs.c.study_id == study_id, trial_rungs.c.paused.is_(True)
        )
    ).scalar_one()


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


def next_promotable(
    storage: Storage, study_id: int, *, maximize: bool, eta: int, draining: bool = False
) -> RungRow | None:
    """The paused trial a free worker resumes, by `search.pruning.promotion`'s rule evaluated
    in the database (one query, one row back): of the paused trials ranking in the top
    floor(n / eta) of their (bracket, rung), ceil while `draining`, the one at the highest rung,
    the best value there first, then the lowest trial id. NaN (NULL) ranks last.
    `tests/search/db/test_promotion_rule.py` checks it picks what `RungTable.next_to_resume`
    picks.

    It reads the paused rows only (a partial index holds them), and of each rung that has
    some, only the best paused one: if that one does not rank high enough, no paused trial of
    its rung does (each ranks below it). For those few candidates it counts, through the index
    on (study, bracket, rung, value), the rows of the rung and the ones better than the
    candidate: index-only counts of one rung's entries, not a sort of every rung row of the
    study (bench/BENCHMARKS.md, "The promotion query at 20,000 trials").
    """
    with storage.autocommit() as conn:
        row = conn.execute(
            _promotable_statement(maximize, draining),
            {"study": study_id, "eta": eta},
        ).first()
    if row is None:
        return None
    value = math.nan if row.value is None else float(row.value)
    return RungRow(row.trial_id, row.bracket, row.level, value, True)


@functools.cache
def _promotable_statement(maximize: bool, draining: bool) -> sa.Select:
    r = trial_rungs
    study = sa.bindparam("study", type_=sa.Integer)
    best_first = (r.c.value.desc() if maximize else r.c.value.asc()).nulls_last()
    # The paused rows, each rung's best first (best value, then the lowest trial id).
    paused = (
        sa.select(
            r.c.trial_id,
            r.c.bracket,
            r.c.level,
            r.c.value,
            sa.func.row_number()
            .over(partition_by=(r.c.bracket, r.c.level), order_by=(best_first, r.c.trial_id))
            .label("pos"),
        )
        .where(r.c.study_id == study, r.c.paused.is_(True))
        .subquery("paused")
    )
    # Each rung's best paused row. OFFSET 0 keeps PostgreSQL from merging this step into the
    # next: the counts below then run (and are costed) for these few rows, not for every
    # paused row (costed for all of them, the plan crossed the JIT threshold: +15 ms).
    c = (
        sa.select(paused.c.trial_id, paused.c.bracket, paused.c.level, paused.c.value)
        .where(paused.c.pos == 1)
        .offset(0)
        .subquery("candidates")
    )
    o = r.alias("o")
    same_rung = sa.and_(o.c.study_id == study, o.c.bracket == c.c.bracket, o.c.level == c.c.level)
    better_value = o.c.value > c.c.value if maximize else o.c.value < c.c.value
    # How many rows of the rung are strictly better (NULL ranks last: every valued row is
    # better than a NULL one), and how many rows the rung holds.
    better = sa.case(
        (
            c.c.value.is_(None),
            sa.select(sa.func.count()).where(same_rung, o.c.value.is_not(None)).scalar_subquery(),
        ),
        else_=sa.select(sa.func.count()).where(same_rung, better_value).scalar_subquery(),
    )
    n = sa.select(sa.func.count()).where(same_rung).scalar_subquery()
    eta = sa.bindparam("eta", type_=sa.Integer)
    # Integer division in both databases: floor(n / eta), or ceil while draining.
    allowed = (n + eta - 1) // eta if draining else n // eta
    order = c.c.value.desc() if maximize else c.c.value.asc()
    return (
        sa.select(c.c.trial_id, c.c.bracket, c.c.level, c.c.value)
        .where(better < allowed)
        .order_by(c.c.level.desc(), order.nulls_last(), c.c.trial_id)
        .limit(1)
    )


def pass_rung_if_promotable(
    storage: Storage,
    claim: Claim,
    bracket: int,
    level: int,
    value: float,
    *,
    maximize: bool,
    eta: int,
) -> bool:
    """At a rung: if the trial ranks in the top floor(n / eta) of the n trials competing there
    (those recorded and itself, counted once: a row it recorded there before is replaced), record
    it there (going on at once) and return True; else write nothing and return False (it pauses).
    One statement: the rank and the write together. `RungTable.goes_on`'s rule, in SQL;
    `tests/search/db/test_promotion_rule.py` checks they agree."""
    nan = math.isnan(value)
    with storage.autocommit() as conn:
        written = conn.execute(
            _pass_rung_statement(conn.dialect.name, maximize, nan),
            {
                "trial": claim.trial_id,
                "level": level,
                "study": claim.study_id,
                "bracket": bracket,
                "value": None if nan else value,
                "eta": eta,
            },
        ).first()
    return written is not None


@functools.cache
def _pass_rung_statement(dialect: str, maximize: bool, nan: bool) -> Any:
    """`pass_rung_if_promotable`'s statement, built once (its values are bound parameters)."""
    r = trial_rungs
    others = sa.and_(
        r.c.study_id == sa.bindparam("study", type_=sa.Integer),
        r.c.bracket == sa.bindparam("bracket", type_=sa.Integer),
        r.c.level == sa.bindparam("level", type_=sa.Integer),
        r.c.trial_id != sa.bindparam("trial", type_=sa.Integer),
    )
    mine = sa.bindparam("value", type_=sa.Float(53))
    if nan:
        better = r.c.value.is_not(None)  # a NaN ranks below every value
    elif maximize:
        better = r.c.value > mine
    else:
        better = r.c.value < mine
    n_better = sa.select(sa.func.count()).where(others, better).scalar_subquery()
    n_others = sa.select(sa.func.count()).where(others).scalar_subquery()
    row = sa.select(
        sa.bindparam("trial", type_=sa.Integer),
        sa.bindparam("level", type_=sa.Integer),
        sa.bindparam("study", type_=sa.Integer),
        sa.bindparam("bracket", type_=sa.Integer),
        mine,
        sa.false(),
    ).where(n_better < (n_others + 1) // sa.bindparam("eta", type_=sa.Integer))
    insert = insert_for(dialect, r).from_select(
        ["trial_id", "level", "study_id", "bracket", "value", "paused"], row
    )
    return insert.on_conflict_do_update(
        index_elements=[r.c.trial_id, r.c.level],
        set_={"value": insert.excluded.value, "paused": insert.excluded.paused},
    ).returning(r.c.trial_id)


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
        lease_upsert(dialect),
        {"picked": trial_id, "study": study_id, "claimer": worker_id},
    ).scalar_one()
    return Claim(trial_id, started.number, study_id, worker_id, generation)


def end_waiting(
    storage: Storage, study_id: int, reason: str, budgets: dict[str, Any] | None = None
) -> tuple[list[int], list[int]] | None:
    """End every trial of the study still WAITING when the study ends: one that started
    (paused, or handed back) ends PRUNED with its last reported value; one that was queued
    and never started is removed (sampled ahead, it was never part of the search). Returns
    the numbers of both. A few statements for the whole study, in one transaction; a trial a
    worker claims meanwhile is left to that worker (the updates lock the rows they change).
    The budget's counter row is locked first: a trial sampled ahead concurrently is inserted
    either before (and removed here) or after, when its insert finds the budget spent.

    `budgets` ({"n_trials": ..., "budget_epochs": ..., "budget_hours": ...}) are the ones the
    caller found spent: if the study's stored ones differ (raised by `hpsearch extend` or a
    config run again since the caller read them), nothing is ended and None is returned. The
    study's row is held first (`lock_study`), as `search.study.extend` holds it to store new
    budgets and reopen what the end ended: one of the two goes first, the other sees it."""
    t, iv = trials, trial_intermediate_values
    with storage.transaction() as conn:
        dialect = conn.dialect.name
        lock_study(conn, study_id)
        if budgets is not None and _stored_budgets(conn, study_id, budgets) != budgets:
            return None
        lock_budget(conn, study_id, exclusive=True)
        # The paused marks are locked before any trial row, in the order `claim_paused` takes
        # them (the mark, then the trial): a worker resuming a paused trial as the study ends
        # either goes first (its trial is RUNNING then, left to it) or finds the mark gone.
        # Taken the other way round, the two deadlocked (seen with 8 workers on PostgreSQL).
        paused = set(
            conn.execute(
                sa.select(trial_rungs.c.trial_id)
                .where(trial_rungs.c.study_id == study_id, trial_rungs.c.paused.is_(True))
                .with_for_update()
            ).scalars()
        )
        unstarted = conn.execute(
            sa.update(t)
            .where(
                t.c.study_id == study_id,
                t.c.state == "WAITING",
                t.c.datetime_start.is_(None),
                ~sa.exists().where(iv.c.trial_id == t.c.trial_id),
            )
            .values(state="WAITING")  # locks them
            .returning(t.c.trial_id, t.c.number)
        ).all()
        for ids in _chunks([r.trial_id for r in unstarted]):
            for table in (
                trial_params,
                trial_system_attributes,
                trial_user_attributes,
                trial_values,
                trial_leases,
            ):
                conn.execute(sa.delete(table).where(table.c.trial_id.in_(ids)))
            conn.execute(sa.delete(t).where(t.c.trial_id.in_(ids)))
        ended = conn.execute(
            sa.update(t)
            .where(t.c.study_id == study_id, t.c.state == "WAITING")
            .values(state="PRUNED", datetime_complete=utcnow_naive())
            .returning(t.c.trial_id, t.c.number)
        ).all()
        for ids in _chunks([r.trial_id for r in ended]):
            last = (
                sa.select(iv.c.trial_id, sa.func.max(iv.c.step).label("step"))
                .where(iv.c.trial_id.in_(ids))
                .group_by(iv.c.trial_id)
                .subquery()
            )
            values = []
            for trial_id, value, kind in conn.execute(
                sa.select(
                    iv.c.trial_id, iv.c.intermediate_value, iv.c.intermediate_value_type
                ).join(last, sa.and_(iv.c.trial_id == last.c.trial_id, iv.c.step == last.c.step))
            ):
                if kind == "NAN":
                    continue  # a finished trial's value cannot be NaN: it ends without one
                values.append(
                    {"trial_id": trial_id, "objective": 0, "value": value, "value_type": kind}
                )
            if values:
                conn.execute(insert_for(dialect, trial_values).on_conflict_do_nothing(), values)
            attrs = insert_for(dialect, trial_system_attributes)
            conn.execute(
                attrs.on_conflict_do_update(
                    index_elements=[
                        trial_system_attributes.c.trial_id,
                        trial_system_attributes.c.key,
                    ],
                    set_={"value_json": attrs.excluded.value_json},
                ),
                [
                    {"trial_id": i, "key": key, "value_json": json.dumps(value)}
                    for i in ids
                    for key, value in (
                        ("hpsearch:ended_by", reason),
                        (ENDED_AS_ATTR, "paused" if i in paused else "queued"),
                    )
                ],
            )
        conn.execute(
            sa.update(trial_rungs)
            .where(trial_rungs.c.study_id == study_id, trial_rungs.c.paused.is_(True))
            .values(paused=False)
        )
    return [r.number for r in ended], [r.number for r in unstarted]


def _stored_budgets(conn: Connection, study_id: int, like: dict[str, Any]) -> dict[str, Any]:
    """The study's stored values of the keys of `like` (its config's [study] table)."""
    a = study_system_attributes
    raw = conn.execute(
        sa.select(a.c.value_json).where(a.c.study_id == study_id, a.c.key == CONFIG_ATTR)
    ).scalar()
    stored = json.loads(raw).get("study", {}) if raw is not None else {}
    return {key: stored.get(key) for key in like}


def _chunks(ids: list[int], size: int = 500) -> list[list[int]]:
    return [ids[i : i + size] for i in range(0, len(ids), size)]


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
