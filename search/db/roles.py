"""Least-privilege PostgreSQL roles: a worker role and a read-only viewer role.

`hpsearch migrate --create-roles` (run by the tables' owner) creates them and grants them the
tables; every later `hpsearch migrate` grants the tables a migration added to the roles that
exist. The worker role reads and writes the rows of Optuna's tables and hpsearch's (what
`create`, `worker` and `delete` need) and can create, alter or drop nothing; the viewer role
only reads (`status`, `workers`, the dashboard), and its sessions are read-only by default too.

Passwords never travel as text: a role gets LOGIN only when a password is given, in
``$HPSEARCH_WORKER_PASSWORD`` / ``$HPSEARCH_VIEWER_PASSWORD`` (or a file named by
``$HPSEARCH_WORKER_PASSWORD_FILE`` / ``$HPSEARCH_VIEWER_PASSWORD_FILE``, e.g. a Docker secret),
and what reaches the server is its SCRAM-SHA-256 verifier, computed here (libpq's
``PQencryptPasswordConn``): no statement log shows the password. Without one the role is
NOLOGIN, to be granted to login roles you manage (``GRANT hpsearch_worker TO alice``).

In the default layout (Optuna's tables in ``public``, hpsearch's in ``hpsearch``) only Optuna's
own tables of ``public`` are granted, never another tool's that live there too.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass

import sqlalchemy as sa
from optuna.storages._rdb import models as optuna_models
from psycopg.errors import InsufficientPrivilege, ReadOnlySqlTransaction
from sqlalchemy.engine import Connection

from search.db.migrate import schema_for
from search.db.storage import Storage, StorageError, error_chain
from search.errors import first_line

__all__ = [
    "VIEWER_ROLE",
    "WORKER_ROLE",
    "RoleNames",
    "grant_roles",
    "is_read_only",
    "refused_write",
]

WORKER_ROLE = "hpsearch_worker"
VIEWER_ROLE = "hpsearch_viewer"
_ROLE_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_SCRAM = re.compile(r"SCRAM-SHA-256\$[0-9]+:[A-Za-z0-9+/=]+\$[A-Za-z0-9+/=]+:[A-Za-z0-9+/=]+")
_WRITE = "SELECT, INSERT, UPDATE, DELETE"


@dataclass(frozen=True)
class RoleNames:
    worker: str = WORKER_ROLE
    viewer: str = VIEWER_ROLE

    def check(self) -> None:
        """StorageError (exit 2) for a name hpsearch will not quote into SQL."""
        for flag, name in (("--worker-role", self.worker), ("--viewer-role", self.viewer)):
            if not _ROLE_NAME.fullmatch(name):
                raise StorageError(
                    f"{flag} {name!r}: a role name is lower-case letters, digits and '_'"
                )
        if self.worker == self.viewer:
            raise StorageError("--worker-role and --viewer-role must differ")


def grant_roles(storage: Storage, roles: RoleNames, *, create: bool) -> list[str]:
    """Grant the tables to the worker and viewer roles (creating them with `create`); returns
    one line per role to print. One transaction: all of it or nothing."""
    lines = []
    try:
        with storage.transaction() as conn:
            for role, kind, writes in (
                (roles.worker, "WORKER", True),
                (roles.viewer, "VIEWER", False),
            ):
                exists = conn.execute(
                    sa.text("SELECT 1 FROM pg_roles WHERE rolname = :r"), {"r": role}
                ).first()
                if not exists and not create:
                    continue
                if create:
                    login = _create_or_update(conn, role, kind, exists=bool(exists))
                    made = "created" if not exists else "updated"
                else:  # a plain migrate: grant what a migration added, touch nothing else
                    login, made = "login left as it was", "granted the tables"
                for statement in _grants(conn, storage, role, writes=writes, create=create):
                    conn.execute(sa.text(statement))
                what = "reads and writes rows, no DDL" if writes else "reads only"
                lines.append(f"role {role} {made} ({what}): {login}")
    except sa.exc.ProgrammingError as exc:
        raise StorageError(
            f"{storage.safe_url}: cannot create or grant the roles: {first_line(exc)} (run "
            "`hpsearch migrate --create-roles` as the tables' owner with CREATEROLE)"
        ) from None
    return lines


def is_read_only(storage: Storage) -> bool:
    """Whether this connection may not write studies: a read-only role or transaction
    (`default_transaction_read_only`, a hot standby), no INSERT on Optuna's tables, or a SQLite
    file this user cannot write."""
    if storage.is_postgres:
        with storage.autocommit() as conn:
            read_only = conn.execute(sa.text("SHOW transaction_read_only")).scalar_one()
            may_write = conn.execute(
                sa.text(
                    "SELECT has_table_privilege(CAST('trials' AS regclass), 'INSERT') "
                    "AND has_table_privilege(CAST('study_system_attributes' AS regclass), "
                    "'INSERT')"
                )
            ).scalar_one()
        return read_only == "on" or not may_write
    path = storage.sqlite_path()
    assert path is not None
    return not os.access(path, os.W_OK) or not os.access(path.parent or ".", os.W_OK)


def refused_write(exc: BaseException) -> str | None:
    """One line for an error that is the database refusing this role a write (a viewer role
    running `create`, say), or None for any other error."""
    for seen in error_chain(exc):
        if isinstance(seen, (InsufficientPrivilege, ReadOnlySqlTransaction)):
            return (
                f"the database refused: {first_line(seen)}: the storage URL's role may not write "
                "here (create, worker and delete need the worker role, migrate the owner)"
            )
    return None


def _password(kind: str) -> str | None:
    """$HPSEARCH_<KIND>_PASSWORD, else the file $HPSEARCH_<KIND>_PASSWORD_FILE names."""
    value = os.environ.get(f"HPSEARCH_{kind}_PASSWORD")
    path = os.environ.get(f"HPSEARCH_{kind}_PASSWORD_FILE")
    if not value and path:
        try:
            with open(path, encoding="utf-8") as f:
                value = f.read().rstrip("\r\n")
        except OSError as exc:
            raise StorageError(
                f"HPSEARCH_{kind}_PASSWORD_FILE: cannot read {path}: {exc.strerror}"
            ) from None
    return value or None


def _create_or_update(conn: Connection, role: str, kind: str, *, exists: bool) -> str:
    password = _password(kind)
    if not exists:
        conn.execute(sa.text(f'CREATE ROLE "{role}" NOLOGIN'))
    if password is None:
        if exists:
            return "login left as it was"
        return (
            f"NOLOGIN: grant it to a login role (GRANT {role} TO alice), or set "
            f"$HPSEARCH_{kind}_PASSWORD and run `hpsearch migrate --create-roles` again"
        )
    pgconn = conn.connection.dbapi_connection.pgconn  # type: ignore[union-attr]
    verifier = pgconn.encrypt_password(password.encode(), role.encode(), b"scram-sha-256").decode()
    assert _SCRAM.fullmatch(verifier), "unexpected password verifier"
    # Not sa.text: the verifier's ':' would read as a bind parameter.
    conn.exec_driver_sql(f"ALTER ROLE \"{role}\" LOGIN PASSWORD '{verifier}'")
    return "LOGIN, password set from the environment (stored as a SCRAM verifier)"


def _grants(
    conn: Connection, storage: Storage, role: str, *, writes: bool, create: bool
) -> Iterator[str]:
    """The statements that give `role` its rights; without `create` (a plain `migrate`), only
    those on tables and schemas, which the tables' owner may give without CREATEROLE."""
    rights = _WRITE if writes else "SELECT"
    ours = schema_for(conn)
    optuna_schema = storage.schema or conn.execute(sa.text("SELECT current_schema()")).scalar()
    if create:
        database = conn.engine.url.database
        yield f'GRANT CONNECT ON DATABASE "{database}" TO "{role}"'
        if not writes:
            # Its sessions start read-only in this database: a second guard beside the grants.
            read_only = "SET default_transaction_read_only = on"
            yield f'ALTER ROLE "{role}" IN DATABASE "{database}" {read_only}'
    for schema in dict.fromkeys([optuna_schema, ours]):
        yield f'GRANT USAGE ON SCHEMA "{schema}" TO "{role}"'
    # hpsearch's schema is hpsearch's alone (and so is a schema the user named for it).
    yield f'GRANT {rights} ON ALL TABLES IN SCHEMA "{ours}" TO "{role}"'
    yield f'GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA "{ours}" TO "{role}"'
    # Tables a later migration adds (created by the same owner) are granted as they appear.
    defaults = f'ALTER DEFAULT PRIVILEGES IN SCHEMA "{ours}" GRANT'
    yield f'{defaults} {rights} ON TABLES TO "{role}"'
    yield f'{defaults} USAGE, SELECT ON SEQUENCES TO "{role}"'
    if optuna_schema != ours:
        # In a shared schema (public): Optuna's tables and their sequences only.
        tables = sorted({*optuna_models.BaseModel.metadata.tables, "alembic_version"})
        for (table,) in conn.execute(
            sa.text(
                "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = :s AND c.relkind = 'r' AND c.relname = ANY(:t)"
            ),
            {"s": optuna_schema, "t": tables},
        ):
            yield f'GRANT {rights} ON "{optuna_schema}"."{table}" TO "{role}"'
        for (sequence,) in conn.execute(
            sa.text(
                "SELECT s.relname FROM pg_class s JOIN pg_depend d ON d.objid = s.oid "
                "JOIN pg_class t ON t.oid = d.refobjid "
                "JOIN pg_namespace n ON n.oid = t.relnamespace "
                "WHERE s.relkind = 'S' AND d.deptype IN ('a', 'i') AND n.nspname = :s "
                "AND t.relname = ANY(:t)"
            ),
            {"s": optuna_schema, "t": tables},
        ):
            yield f'GRANT USAGE, SELECT ON SEQUENCE "{optuna_schema}"."{sequence}" TO "{role}"'
