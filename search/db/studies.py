"""Finding a study by name with what hpsearch stored in it (its config and its unique id), and
the studies large enough to slow optuna-dashboard down."""

from __future__ import annotations

import datetime
import functools
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Row

from search.db.storage import Storage
from search.db.tables import (
    studies,
    study_system_attributes,
    trial_intermediate_values,
    trials,
)

__all__ = [
    "CONFIG_ATTR",
    "UID_ATTR",
    "find_study_row",
    "hpsearch_study_names",
    "lock_study",
    "studies_with_more_trials_than",
    "study_activity",
    "study_names",
]

CONFIG_ATTR = "hpsearch:config"
"""Study system attribute holding the canonical config JSON."""
UID_ATTR = "hpsearch:uid"
"""Study system attribute: an id unique across databases (see `StudyRef.uid`)."""


def find_study_row(storage: Storage, name: str) -> Row[Any] | None:
    """The study called `name`: study_id, config and uid (JSON text; None when the study has no
    such attribute), or None if there is none."""
    with storage.autocommit() as conn:
        return conn.execute(_find_statement(), {"study_name": name}).first()


def lock_study(conn: Connection, study_id: int) -> None:
    """Hold the study's row till the end of the transaction (PostgreSQL; SQLite's BEGIN
    IMMEDIATE already serializes writers): writers of its progress attributes take turns, so
    the last one written was read last."""
    if conn.dialect.name == "postgresql":
        conn.execute(
            sa.select(studies.c.study_id)
            .where(studies.c.study_id == study_id)
            # FOR NO KEY UPDATE: publishers wait for each other, inserts of trials (whose
            # foreign key takes KEY SHARE on the row) do not wait for them.
            .with_for_update(key_share=True)
        )


def study_names(storage: Storage) -> list[str]:
    """Every study's name (none if the storage has no tables yet)."""
    try:
        with storage.autocommit() as conn:
            return list(conn.execute(sa.select(studies.c.study_name)).scalars())
    except sa.exc.DBAPIError:
        return []


def hpsearch_study_names(storage: Storage) -> list[str]:
    """The names of the studies hpsearch created (they hold its config), by name."""
    with storage.read() as conn:
        return list(
            conn.execute(
                sa.select(studies.c.study_name)
                .join(
                    study_system_attributes,
                    sa.and_(
                        study_system_attributes.c.study_id == studies.c.study_id,
                        study_system_attributes.c.key == CONFIG_ATTR,
                    ),
                )
                .order_by(studies.c.study_name)
            ).scalars()
        )


def study_activity(storage: Storage, study_id: int) -> tuple[datetime.datetime | None, int]:
    """When the study's last trial started or ended (None: no trial has), and the epochs its
    trials reported (repeats after a resume included)."""
    with storage.read() as conn:
        started, finished = conn.execute(
            sa.select(
                sa.func.max(trials.c.datetime_start), sa.func.max(trials.c.datetime_complete)
            ).where(trials.c.study_id == study_id)
        ).one()
        epochs = conn.execute(
            sa.select(sa.func.count())
            .select_from(trial_intermediate_values.join(trials))
            .where(trials.c.study_id == study_id)
        ).scalar_one()
    last = max((t for t in (started, finished) if t is not None), default=None)
    return last, epochs


def studies_with_more_trials_than(storage: Storage, limit: int) -> list[tuple[str, int]]:
    """(name, trials) of every study with more than `limit` trials, by name."""
    with storage.autocommit() as conn:
        rows = conn.execute(
            sa.select(studies.c.study_name, sa.func.count(trials.c.trial_id))
            .join(trials, trials.c.study_id == studies.c.study_id)
            .group_by(studies.c.study_name)
            .having(sa.func.count(trials.c.trial_id) > limit)
            .order_by(studies.c.study_name)
        ).all()
    return [(name, n) for name, n in rows]


@functools.cache
def _find_statement() -> sa.Select:
    s = studies
    config = study_system_attributes.alias("config_attr")
    uid = study_system_attributes.alias("uid_attr")
    return (
        sa.select(s.c.study_id, config.c.value_json.label("config"), uid.c.value_json.label("uid"))
        .select_from(
            s.outerjoin(
                config, sa.and_(config.c.study_id == s.c.study_id, config.c.key == CONFIG_ATTR)
            ).outerjoin(uid, sa.and_(uid.c.study_id == s.c.study_id, uid.c.key == UID_ATTR))
        )
        .where(s.c.study_name == sa.bindparam("study_name"))
    )
