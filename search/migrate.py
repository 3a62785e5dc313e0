"""Bring a study database up to date: Optuna's schema, then hpsearch's own tables.

`hpsearch migrate` runs this explicitly (the docker-compose `migrate` service); `create` and
`run` run it too, so the embedded SQLite default needs no extra step. Workers only check that
the schema is current and refuse to start otherwise: two versions of the code must never write
one database with different ideas of its tables.
"""

from __future__ import annotations

from pathlib import Path

import optuna
import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection

from search.db.tables import OUR_SCHEMA
from search.storage import Storage, StorageError, engine_kwargs

__all__ = ["VERSION_TABLE", "check_schema", "head_revision", "schema_for", "upgrade"]

VERSION_TABLE = "hpsearch_alembic_version"
MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"


def schema_for(conn: Connection) -> str | None:
    """Our tables' schema on this connection's database (None: SQLite's single namespace)."""
    return OUR_SCHEMA if conn.dialect.name == "postgresql" else None


def upgrade(storage: Storage) -> str:
    """Create or upgrade every table; returns hpsearch's schema revision."""
    ensure_optuna_schema(storage)
    with storage.engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            # Concurrent `create` calls (one per machine) must not race on DDL.
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext('hpsearch.migrate'))"))
            conn.execute(sa.schema.CreateSchema(OUR_SCHEMA, if_not_exists=True))
        config = _alembic_config()
        config.attributes["connection"] = conn
        command.upgrade(config, "head")
    return head_revision()


def ensure_optuna_schema(storage: Storage) -> None:
    """Create or upgrade Optuna's tables (Optuna's own Alembic migrations)."""
    rdb = optuna.storages.RDBStorage(storage.url, engine_kwargs=engine_kwargs(storage.url))
    try:
        if rdb.get_current_version() != rdb.get_head_version():
            rdb.upgrade()
    finally:
        rdb.engine.dispose()


def current_revision(storage: Storage) -> str | None:
    with storage.engine.connect() as conn:
        context = MigrationContext.configure(
            conn, opts={"version_table": VERSION_TABLE, "version_table_schema": schema_for(conn)}
        )
        return context.get_current_revision()


def head_revision() -> str:
    head = ScriptDirectory.from_config(_alembic_config()).get_current_head()
    assert head is not None, "migrations/ has no revisions"
    return head


def check_schema(storage: Storage) -> None:
    """Raise StorageError unless hpsearch's tables are at the head revision."""
    current, head = current_revision(storage), head_revision()
    if current != head:
        found = f"revision {current}" if current else "no hpsearch tables"
        raise StorageError(
            f"the database at {storage.safe_url} has {found}, this hpsearch needs {head}: "
            "run `hpsearch migrate` (or `hpsearch create`) first"
        )


def _alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(_migrations_dir()))
    return config


def _migrations_dir() -> Path:
    # The revisions ship inside the package (search/migrations), so a wheel install has them.
    if not (MIGRATIONS_DIR / "env.py").exists():
        raise StorageError("hpsearch's migrations are missing from this installation")
    return MIGRATIONS_DIR
