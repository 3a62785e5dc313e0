"""A held trial's writes: intermediate values, its end, its hand-back; each fenced by the lease.

Every write first passes the fence (`search.db.leases`): the worker must still hold the trial
with its claim's generation, or nothing is written and `LeaseLost` is raised. On PostgreSQL a
report and a finish are one statement each, the writes hanging off the fence in data-modifying
CTEs (PostgreSQL runs each exactly once, in one snapshot: all happen or none); values travel as
arrays, so the statement's text is the same whatever their number. On SQLite the same writes
are a few statements in one ``BEGIN IMMEDIATE`` transaction.
"""

from __future__ import annotations

import functools
import json
import math
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from search.db.claims import utcnow_naive
from search.db.crash_budget import record_failed_attempt
from search.db.leases import Claim, LeaseLost, fence, lease_matches, lease_params, release
from search.db.statements import insert_for, upsert_attributes, write_intermediate_values
from search.db.storage import Storage
from search.db.tables import (
    FINISHED_STATES,
    trial_intermediate_values,
    trial_leases,
    trial_system_attributes,
    trial_user_attributes,
    trial_values,
    trials,
    value_kind,
)

__all__ = ["finish", "hand_back", "report"]


def report(storage: Storage, claim: Claim, values: dict[int, float]) -> None:
    """Write intermediate values (epoch -> score) into Optuna's table; idempotent per epoch.

    Also records the last epoch on the lease (what `hpsearch status` shows). On PostgreSQL one
    statement in autocommit: a report is one round trip.
    """
    if storage.is_postgres:
        with storage.autocommit() as conn:
            written = conn.execute(
                _report_statement_postgresql(),
                {**lease_params(claim), "new_epoch": max(values), **_value_arrays(values)},
            ).all()
        if not written:
            raise LeaseLost(f"trial {claim.number} was taken over by another worker")
        return
    with storage.transaction() as conn:
        fence(conn, claim, epoch=max(values))
        write_intermediate_values(conn, claim.trial_id, values)


def finish(
    storage: Storage,
    claim: Claim,
    state: str,
    value: float | None,
    user_attrs: dict[str, Any],
    system_attrs: dict[str, Any] | None = None,
    intermediate: dict[int, float] | None = None,
) -> None:
    """Record the trial's end (COMPLETE, PRUNED or FAIL) with its value, its attributes and
    any intermediate values not written yet.

    The lease is left as it is: the trial's state says it is over, and a retry after a
    connection lost around the commit passes the fence again and rewrites the same values.
    """
    if state not in FINISHED_STATES:
        raise ValueError(f"a trial ends COMPLETE, PRUNED or FAIL, not {state!r}")
    if value is not None and math.isnan(value):
        raise ValueError("a finished trial's value cannot be NaN")
    if state == "FAIL":
        value = None
    system_attrs, intermediate = system_attrs or {}, intermediate or {}
    done = utcnow_naive()
    if storage.is_postgres:
        params: dict[str, Any] = {
            **lease_params(claim),
            **_value_arrays(intermediate),
            "user_keys": list(user_attrs),
            "user_values": [json.dumps(v) for v in user_attrs.values()],
            "system_keys": list(system_attrs),
            "system_values": [json.dumps(v) for v in system_attrs.values()],
            "has_value": value is not None,
            "value": None if value is None or value_kind(value) != "FINITE" else value,
            "value_kind": "FINITE" if value is None else value_kind(value),
            "final_state": state,
            "done": done,
        }
        with storage.autocommit() as conn:
            fenced = conn.execute(_finish_statement_postgresql(), params).scalar_one()
        if fenced != 1:
            raise LeaseLost(f"trial {claim.number} was taken over by another worker")
        return
    with storage.transaction() as conn:
        fence(conn, claim)
        write_intermediate_values(conn, claim.trial_id, intermediate)
        upsert_attributes(conn, trial_user_attributes, claim.trial_id, user_attrs)
        upsert_attributes(conn, trial_system_attributes, claim.trial_id, system_attrs)
        if value is not None:
            conn.execute(
                _value_upsert_sqlite(),
                {
                    "trial_id": claim.trial_id,
                    "objective": 0,
                    "value": value if value_kind(value) == "FINITE" else None,
                    "value_type": value_kind(value),
                },
            )
        conn.execute(
            sa.update(trials)
            .where(trials.c.trial_id == claim.trial_id)
            .values(state=state, datetime_complete=done)
        )


def hand_back(
    storage: Storage,
    claim: Claim,
    system_attrs: dict[str, Any] | None = None,
    intermediate: dict[int, float] | None = None,
    *,
    failed_attempt: dict[str, Any] | None = None,
    max_attempts: int = 0,
) -> bool:
    """Return a trial to the queue: another worker resumes it. Returns True if, instead, the
    trial ended FAIL: `failed_attempt` (a machine fault) was its last (`search.db.crash_budget`).

    Preempted (SIGTERM) or interrupted trials come back without a `failed_attempt`. The lease
    keeps naming this worker until the next claim (a retry after a lost commit passes the
    fence); `last_worker_id` tells the next worker whose work it continues.
    """
    with storage.transaction() as conn:
        fence(conn, claim)
        write_intermediate_values(conn, claim.trial_id, intermediate or {})
        upsert_attributes(conn, trial_system_attributes, claim.trial_id, system_attrs or {})
        if failed_attempt is not None:
            return record_failed_attempt(
                conn, claim.trial_id, failed_attempt, max_attempts, keep_holder=True
            )
        release(conn, claim.trial_id, keep_holder=True)
        return False


def _value_arrays(values: dict[int, float]) -> dict[str, list[Any]]:
    steps = sorted(values)
    return {
        "steps": steps,
        "step_values": [values[s] if value_kind(values[s]) == "FINITE" else None for s in steps],
        "step_kinds": [value_kind(values[s]) for s in steps],
    }


# -- PostgreSQL: one statement each ---------------------------------------------------------------


def _fence_cte(epoch: bool) -> Any:
    sets = (
        {"epoch": sa.bindparam("new_epoch")} if epoch else {"generation": trial_leases.c.generation}
    )
    return (
        sa.update(trial_leases)
        .where(lease_matches())
        .values(sets)
        .returning(trial_leases.c.trial_id)
        .cte("fence")
    )


def _unnest(*columns: tuple[str, Any]) -> Any:
    """The rows of parallel arrays bound as parameters, as a table."""
    arrays = [sa.bindparam(name, type_=postgresql.ARRAY(element)) for name, element in columns]
    return (
        sa.func.unnest(*arrays)
        .table_valued(*(name for name, _ in columns))
        .render_derived(name="x")
    )


def _intermediate_insert(fence: Any) -> Any:
    iv = trial_intermediate_values
    rows = _unnest(("steps", sa.Integer), ("step_values", sa.Float(53)), ("step_kinds", sa.Text))
    insert = postgresql.insert(iv).from_select(
        ["trial_id", "step", "intermediate_value", "intermediate_value_type"],
        sa.select(
            fence.c.trial_id,
            rows.c.steps,
            rows.c.step_values,
            sa.cast(rows.c.step_kinds, iv.c.intermediate_value_type.type),
        ).select_from(fence.join(rows, sa.true())),
    )
    return insert.on_conflict_do_update(
        index_elements=[iv.c.trial_id, iv.c.step],
        set_={
            "intermediate_value": insert.excluded.intermediate_value,
            "intermediate_value_type": insert.excluded.intermediate_value_type,
        },
    )


@functools.cache
def _report_statement_postgresql() -> Any:
    fence = _fence_cte(epoch=True)
    return _intermediate_insert(fence).returning(sa.literal(1)).add_cte(fence)


@functools.cache
def _finish_statement_postgresql() -> Any:
    fence = _fence_cte(epoch=False)
    ctes = [_intermediate_insert(fence).cte("iv")]
    for table, prefix in ((trial_user_attributes, "user"), (trial_system_attributes, "system")):
        rows = _unnest((f"{prefix}_keys", sa.Text), (f"{prefix}_values", sa.Text))
        insert = postgresql.insert(table).from_select(
            ["trial_id", "key", "value_json"],
            sa.select(
                fence.c.trial_id,
                getattr(rows.c, f"{prefix}_keys"),
                getattr(rows.c, f"{prefix}_values"),
            ).select_from(fence.join(rows, sa.true())),
        )
        ctes.append(
            insert.on_conflict_do_update(
                index_elements=[table.c.trial_id, table.c.key],
                set_={"value_json": insert.excluded.value_json},
            ).cte(f"{prefix}_attrs")
        )
    value = postgresql.insert(trial_values).from_select(
        ["trial_id", "objective", "value", "value_type"],
        sa.select(
            fence.c.trial_id,
            sa.literal(0),
            sa.bindparam("value", type_=sa.Float(53)),
            sa.cast(sa.bindparam("value_kind", type_=sa.Text), trial_values.c.value_type.type),
        ).where(sa.bindparam("has_value", type_=sa.Boolean)),
    )
    ctes.append(
        value.on_conflict_do_update(
            index_elements=[trial_values.c.trial_id, trial_values.c.objective],
            set_={"value": value.excluded.value, "value_type": value.excluded.value_type},
        ).cte("final_value")
    )
    ctes.append(
        sa.update(trials)
        .where(trials.c.trial_id == fence.c.trial_id)
        .values(
            state=sa.bindparam("final_state", type_=trials.c.state.type),
            datetime_complete=sa.bindparam("done", type_=sa.DateTime),
        )
        .cte("final_state")
    )
    return sa.select(sa.func.count()).select_from(fence).add_cte(*ctes)


@functools.cache
def _value_upsert_sqlite() -> Any:
    insert = insert_for("sqlite", trial_values)
    return insert.on_conflict_do_update(
        index_elements=[trial_values.c.trial_id, trial_values.c.objective],
        set_={"value": insert.excluded.value, "value_type": insert.excluded.value_type},
    )
