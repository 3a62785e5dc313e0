"""Bring a study database up to date: Optuna's schema, then hpsearch's own tables.

`hpsearch migrate` is the one command that runs DDL on PostgreSQL (the docker-compose `migrate`
service, with an owner role); `create`, `worker`, `status` and the dashboard only `check_schema`
and refuse a database that is missing tables or behind, so they run with roles that have no DDL
rights (`search.db.roles`). A SQLite file is migrated by `create` and `run`, for the one-command
start. Two versions of the code must never write one database with different ideas of its
tables.

Optuna keeps its revision in ``alembic_version`` in the schema it lives in. Where another
tool's Alembic owns that table (MLflow and many web apps do), the two cannot share the schema:
`upgrade` and `check_schema` say so, touching nothing, and the study belongs in a schema of its
own (``--schema``, or ``?options=-csearch_path=NAME`` in the URL; `search.db.storage.with_schema`).
"""

from __future__ import annotations

import functools
from pathlib import Path

import optuna
import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection

from search.db.storage import Storage, StorageError, engine_kwargs
from search.db.tables import OUR_SCHEMA
from search.errors import first_line

__all__ = [
    "VERSION_TABLE",
    "autovacuum_on",
    "check_schema",
    "head_revision",
    "migrations_dir",
    "optuna_head_revision",
    "schema_for",
    "table_count",
    "upgrade",
]

VERSION_TABLE = "hpsearch_alembic_version"
MIGRATION_DIRS = (
    Path(__file__).resolve().parent / "migrations",
    Path(__file__).resolve().parents[2] / "migrations",
)
"""Where hpsearch's Alembic revisions are, first found wins: in an installed package (the wheel maps
the repository's top-level ``migrations/`` to ``search.db.migrations``, pyproject's package-dir),
else in a source checkout, at its top level."""
_RUN_MIGRATE = "run `hpsearch migrate` (with a role that may create tables) first"


def schema_for(conn: Connection) -> str | None:
    """Our tables' schema on this connection's database (None: SQLite's single namespace): the
    schema the storage URL names, else `OUR_SCHEMA`."""
    if conn.dialect.name != "postgresql":
        return None
    translate = conn.get_execution_options().get("schema_translate_map") or {}
    return translate.get(OUR_SCHEMA) or OUR_SCHEMA


def upgrade(storage: Storage) -> str:
    """Create or upgrade every table; returns hpsearch's schema revision.

    On PostgreSQL, concurrent calls wait for each other (an advisory lock), and a schema whose
    ``alembic_version`` belongs to another tool is refused (StorageError) before anything is
    written.
    """
    if not storage.is_postgres:
        with storage.engine.connect() as conn:
            _refuse_foreign_alembic(storage, conn)
        _ensure_optuna_schema(storage)
        _upgrade_ours(storage)
        return head_revision()
    with storage.engine.connect() as lock:
        lock.execute(sa.text("SELECT pg_advisory_lock(hashtext('hpsearch.migrate'))"))
        lock.commit()
        try:
            with storage.engine.connect() as conn:
                _refuse_foreign_alembic(storage, conn)
            _ddl(storage, _create_schemas)
            _ddl(storage, _ensure_optuna_schema)
            _ddl(storage, _upgrade_ours)
        finally:
            lock.execute(sa.text("SELECT pg_advisory_unlock(hashtext('hpsearch.migrate'))"))
            lock.commit()
    return head_revision()


def _ddl(storage: Storage, step: object) -> None:
    """Run a migration step; a role without the rights gets one line, not a traceback."""
    try:
        step(storage)  # type: ignore[operator]
    except sa.exc.ProgrammingError as exc:
        if "permission denied" not in str(exc.orig) and "must be owner" not in str(exc.orig):
            raise
        user = storage.engine.url.username or "this role"
        raise StorageError(
            f"{storage.safe_url}: {first_line(exc)}: `hpsearch migrate` needs a role that may "
            f"create schemas and tables (the database's owner); {user!r} may not"
        ) from None


def _create_schemas(storage: Storage) -> None:
    with storage.engine.begin() as conn:
        conn.execute(sa.schema.CreateSchema(schema_for(conn), if_not_exists=True))  # type: ignore[arg-type]


def _ensure_optuna_schema(storage: Storage) -> None:
    """Create or upgrade Optuna's tables (Optuna's own Alembic migrations). DDL: migrate only."""
    rdb = optuna.storages.RDBStorage(
        storage.url, engine_kwargs=engine_kwargs(storage.url), skip_compatibility_check=True
    )
    try:
        if rdb.get_current_version() != rdb.get_head_version():
            rdb.upgrade()
    finally:
        rdb.engine.dispose()


def _upgrade_ours(storage: Storage, revision: str = "head") -> None:
    with storage.engine.begin() as conn:
        config = _alembic_config()
        config.attributes["connection"] = conn
        command.upgrade(config, revision)


def current_revision(storage: Storage) -> str | None:
    """hpsearch's schema revision in the database (None: no hpsearch tables)."""
    with storage.engine.connect() as conn:
        context = MigrationContext.configure(
            conn, opts={"version_table": VERSION_TABLE, "version_table_schema": schema_for(conn)}
        )
        return context.get_current_revision()


def head_revision() -> str:
    head = ScriptDirectory.from_config(_alembic_config()).get_current_head()
    assert head is not None, "migrations/ has no revisions"
    return head


def optuna_head_revision() -> str:
    """The revision of Optuna's tables that the installed Optuna needs."""
    head = _optuna_scripts().get_current_head()
    assert head is not None
    return head


def check_schema(storage: Storage) -> None:
    """Raise StorageError (one line: run `hpsearch migrate`) unless Optuna's tables and
    hpsearch's are at the revisions this installation needs. Reads only: no DDL, ever."""
    with storage.engine.connect() as conn:
        optuna_revision = _refuse_foreign_alembic(storage, conn)
    optuna_head = optuna_head_revision()
    if optuna_revision != optuna_head:
        found = f"at revision {optuna_revision}" if optuna_revision else "missing"
        raise StorageError(
            f"the database at {storage.safe_url}{_in_schema(storage)}: Optuna's tables are "
            f"{found}, this Optuna needs {optuna_head}: {_RUN_MIGRATE}"
        )
    current, head = current_revision(storage), head_revision()
    if current != head:
        found = f"revision {current}" if current else "no hpsearch tables"
        raise StorageError(
            f"the database at {storage.safe_url}{_in_schema(storage)} has {found}, this "
            f"hpsearch needs {head}: {_RUN_MIGRATE}"
        )


def _refuse_foreign_alembic(storage: Storage, conn: Connection) -> str | None:
    """Optuna's revision in the schema where its tables live (None: no ``alembic_version``
    there). StorageError if that ``alembic_version`` holds another tool's revision."""
    if storage.is_postgres:
        schema = storage.schema or conn.execute(sa.text("SELECT current_schema()")).scalar()
        if schema is None:
            return None  # the URL's schema does not exist yet
        table = conn.execute(
            sa.text("SELECT to_regclass(format('%I.alembic_version', CAST(:s AS text)))"),
            {"s": schema},
        ).scalar()
        if table is None:
            return None
        revision = conn.execute(
            sa.text(f'SELECT version_num FROM "{schema}".alembic_version LIMIT 1')
        ).scalar()
    else:
        schema = None
        revision = MigrationContext.configure(conn).get_current_revision()
    if revision is not None and revision not in _optuna_revisions():
        where = f"{schema}.alembic_version" if schema else "alembic_version"
        hint = (
            "give hpsearch a schema of its own: `--schema hpsearch` (or $HPSEARCH_SCHEMA, or "
            "?options=-csearch_path%3Dhpsearch in the URL)"
            if storage.is_postgres
            else "use another database file"
        )
        raise StorageError(
            f"the database at {storage.safe_url}: {where} holds revision {revision!r}, which is "
            f"not Optuna's: another tool's Alembic migrations live there, and Optuna keeps its "
            f"own revision in that table; {hint}. Nothing was changed"
        )
    return revision


def _in_schema(storage: Storage) -> str:
    return f" (schema {storage.schema})" if storage.schema else ""


@functools.cache
def _optuna_scripts() -> ScriptDirectory:
    config = Config()
    config.set_main_option(
        "script_location", str(Path(optuna.storages._rdb.__file__).parent / "alembic")
    )
    return ScriptDirectory.from_config(config)


@functools.cache
def _optuna_revisions() -> frozenset[str]:
    return frozenset(r.revision for r in _optuna_scripts().walk_revisions())


def _alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    return config


def migrations_dir() -> Path:
    """The folder of hpsearch's Alembic revisions this installation runs (`MIGRATION_DIRS`)."""
    for folder in MIGRATION_DIRS:
        if (folder / "env.py").is_file():
            return folder
    raise StorageError("hpsearch's migrations are missing from this installation")


def autovacuum_on(storage: Storage) -> bool:
    """Whether a PostgreSQL server runs autovacuum (its default; off on some CI servers):
    without it the workers' dead rows pile up and the planner has no statistics."""
    with storage.autocommit() as conn:
        return conn.exec_driver_sql("SHOW autovacuum").scalar() != "off"


def table_count(storage: Storage) -> int:
    """Tables in the database (every schema but the system's)."""
    with storage.engine.connect() as conn:
        if storage.is_postgres:
            query = (
                "SELECT count(*) FROM information_schema.tables WHERE table_type = 'BASE TABLE' "
                "AND table_schema NOT IN ('pg_catalog', 'information_schema')"
            )
        else:
            query = "SELECT count(*) FROM sqlite_master WHERE type = 'table'"
        return int(conn.execute(sa.text(query)).scalar_one())
