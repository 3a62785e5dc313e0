"""Statement pieces every part of the data layer shares, and where PostgreSQL and SQLite differ.

The two databases need different SQL in a few places, all of them here:

- the clock: `db_now` (PostgreSQL's ``clock_timestamp()``, SQLite's ``julianday('now')``);
- upserts: `insert_for` gives the dialect's INSERT, whose ``on_conflict_do_update`` both have;
- lists of ids bound as one parameter: `in_bound_ids` (``= ANY(array)`` on PostgreSQL keeps the
  statement's text the same for any number of ids; SQLite reads a JSON array);
- locks: `pg_advisory` (PostgreSQL); SQLite's ``BEGIN IMMEDIATE`` (see `search.db.storage`)
  already serializes every writer.

Statements that are whole different shapes on the two databases (a claim is one statement with
data-modifying CTEs on PostgreSQL, three in one transaction on SQLite) sit side by side in the
module of their concern, as ``_x_postgresql`` and ``_x_sqlite``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from search.db.tables import trial_intermediate_values, trial_system_attributes, value_kind

__all__ = [
    "LOCK_CLASS",
    "bound_ids",
    "db_now",
    "delete_system_attr",
    "in_bound_ids",
    "insert_for",
    "read_system_attr",
    "upsert_attributes",
    "write_intermediate_values",
]

LOCK_CLASS = 0x6870
"""Advisory lock namespace ("hp"), with the study id as the second key."""


def db_now(dialect: str) -> sa.ColumnElement[float]:
    """The database clock in float seconds since the epoch.

    Liveness compares times written by different machines: only the database's clock is
    common to all of them.
    """
    if dialect == "postgresql":
        return sa.extract("epoch", sa.func.clock_timestamp())
    return (sa.func.julianday("now") - 2440587.5) * 86400.0


def insert_for(dialect: str, table: sa.Table) -> Any:
    """The dialect's INSERT construct (both have ``on_conflict_do_update`` and ``excluded``)."""
    return (postgresql.insert if dialect == "postgresql" else sqlite.insert)(table)


def in_bound_ids(dialect: str, column: sa.ColumnElement[int]) -> sa.ColumnElement[bool]:
    """`column` is one of the ids bound as parameter ``ids`` (see `bound_ids`)."""
    if dialect == "postgresql":
        return column == sa.func.any(sa.bindparam("ids", type_=postgresql.ARRAY(sa.Integer)))
    each = sa.func.json_each(sa.bindparam("ids", type_=sa.String)).table_valued("value")
    return column.in_(sa.select(each.c.value))


def bound_ids(dialect: str, ids: Sequence[int]) -> Any:
    """The value to bind as ``ids`` for `in_bound_ids`."""
    return list(ids) if dialect == "postgresql" else json.dumps(list(ids))


def upsert_attributes(
    conn: Connection, table: sa.Table, owner_id: int, attrs: dict[str, Any]
) -> None:
    """Set attributes (a trial's or a study's, user or system: `table` says which) as Optuna
    stores them: one JSON value per key."""
    if not attrs:
        return
    owner = _owner(table).name
    conn.execute(
        _upsert_attribute(conn.dialect.name, table),
        [{owner: owner_id, "key": k, "value_json": json.dumps(v)} for k, v in attrs.items()],
    )


def read_system_attr(conn: Connection, trial_id: int, key: str) -> Any | None:
    """A trial's system attribute `key` (its JSON value decoded), or None if it has none."""
    a = trial_system_attributes
    value = conn.execute(
        sa.select(a.c.value_json).where(a.c.trial_id == trial_id, a.c.key == key)
    ).scalar()
    return None if value is None else json.loads(value)


def delete_system_attr(conn: Connection, trial_id: int, key: str) -> None:
    """Delete a trial's system attribute `key` (nothing if it has none)."""
    a = trial_system_attributes
    conn.execute(sa.delete(a).where(a.c.trial_id == trial_id, a.c.key == key))


def write_intermediate_values(conn: Connection, trial_id: int, values: dict[int, float]) -> None:
    """Upsert intermediate values (step -> value), non-finite ones encoded as Optuna does."""
    if not values:
        return
    conn.execute(
        _upsert_intermediate_value(conn.dialect.name),
        [
            {
                "trial_id": trial_id,
                "step": step,
                "intermediate_value": value if value_kind(value) == "FINITE" else None,
                "intermediate_value_type": value_kind(value),
            }
            for step, value in sorted(values.items())
        ],
    )


def _owner(table: sa.Table) -> sa.Column[Any]:
    """An attribute table's trial_id or study_id column."""
    return table.c.trial_id if "trial_id" in table.c else table.c.study_id


@functools.cache
def _upsert_attribute(dialect: str, table: sa.Table) -> Any:
    insert = insert_for(dialect, table)
    return insert.on_conflict_do_update(
        index_elements=[_owner(table), table.c.key],
        set_={"value_json": insert.excluded.value_json},
    )


@functools.cache
def _upsert_intermediate_value(dialect: str) -> Any:
    iv = trial_intermediate_values
    insert = insert_for(dialect, iv)
    return insert.on_conflict_do_update(
        index_elements=[iv.c.trial_id, iv.c.step],
        set_={
            "intermediate_value": insert.excluded.intermediate_value,
            "intermediate_value_type": insert.excluded.intermediate_value_type,
        },
    )
