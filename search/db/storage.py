"""Where studies live: URL rules, password masking, and the database engines.

`--storage URL`, else ``$HPSEARCH_STORAGE``, else ``sqlite:///hpsearch.db`` (one machine).
Several machines share one PostgreSQL: ``postgresql+psycopg://user:pass@host:5432/db``
(``postgresql://`` and ``postgres://`` mean the same).

Each process keeps one small connection pool of its own for hpsearch's hot path (claims,
reports, heartbeats) and, lazily, Optuna's ``RDBStorage`` for sampling and pruning. A
connection that sat idle in the pool for more than `PING_AFTER_IDLE_S` is pinged before use
(SQLAlchemy's pre-ping, but only where a connection can have gone stale: pinging the ones a
busy worker used a moment ago doubled the database's transactions), connections are recycled
every 5 minutes, TCP keepalives notice a dead server, and an error on a connection that died
anyway (a restart) is retried by `retry`: a worker survives idle timeouts and restarts.

Example::

    >>> mask_url("postgresql+psycopg://ml:s3cret@db:5432/hp")
    'postgresql+psycopg://ml:***@db:5432/hp'
    >>> normalize_url("postgres://ml@db/hp")
    'postgresql+psycopg://ml@db/hp'
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import optuna
import sqlalchemy as sa
import sqlalchemy.orm
import sqlalchemy.pool
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, InvalidatePoolError, OperationalError

from search.db.tables import OUR_SCHEMA
from search.errors import first_line

__all__ = [
    "DEFAULT_STORAGE",
    "Storage",
    "StorageError",
    "conflict_kind",
    "engine_kwargs",
    "error_chain",
    "is_transient",
    "mask_url",
    "normalize_url",
    "open_storage",
    "resolve_url",
    "retry",
    "schema_in_url",
    "with_schema",
]

T = TypeVar("T")

DEFAULT_STORAGE = "sqlite:///hpsearch.db"


class StorageError(Exception):
    """A bad storage URL or an unreachable database (exit code 2); the message is one line."""


def resolve_url(cli_value: str | None, schema: str | None = None) -> str:
    """`--storage`, else $HPSEARCH_STORAGE, else the embedded SQLite default; in `schema`
    (`--schema`), else $HPSEARCH_SCHEMA, if one is named (see `with_schema`)."""
    url = normalize_url(cli_value or os.environ.get("HPSEARCH_STORAGE") or DEFAULT_STORAGE)
    schema = schema or os.environ.get("HPSEARCH_SCHEMA") or None
    return with_schema(url, schema) if schema else url


_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_SEARCH_PATH = re.compile(r"(?:-c\s*|--)search_path\s*=\s*([^\s]+)")


def with_schema(url: str, schema: str) -> str:
    """`url` with every table in PostgreSQL schema `schema`: Optuna's (through the connection's
    ``search_path``, which Optuna's own engine reads from the URL too) and hpsearch's.

    Example::

        >>> with_schema("postgresql+psycopg://ml@db/hp", "tuning")
        'postgresql+psycopg://ml@db/hp?options=-csearch_path%3Dtuning'
    """
    if not _SCHEMA_NAME.fullmatch(schema):
        raise StorageError(
            f"schema {schema!r}: a schema name is lower-case letters, digits and '_' "
            "(at most 63, not starting with a digit)"
        )
    parsed = make_url(url)
    if parsed.get_backend_name() != "postgresql":
        raise StorageError(
            f"schema {schema!r}: schemas are PostgreSQL's; {mask_url(url)} is not PostgreSQL"
        )
    given = schema_in_url(url)
    if given is not None:
        if given != schema:
            raise StorageError(
                f"schema {schema!r} given, but the storage URL names search_path {given!r}"
            )
        return url
    options = " ".join(filter(None, [parsed.query.get("options"), f"-csearch_path={schema}"]))
    return parsed.update_query_dict({"options": options}).render_as_string(hide_password=False)


def schema_in_url(url: str) -> str | None:
    """The schema a PostgreSQL URL puts first on its search_path (``?options=-csearch_path=S``),
    where hpsearch keeps every table; None when the URL names none."""
    options = make_url(url).query.get("options")
    if isinstance(options, tuple):
        options = " ".join(options)
    found = _SEARCH_PATH.search(options or "")
    if found is None:
        return None
    first = found.group(1).split(",")[0].strip().strip('"')
    if not _SCHEMA_NAME.fullmatch(first):
        raise StorageError(
            f"bad storage URL {mask_url(url)!r}: search_path {first!r} is not a schema hpsearch "
            "can use (lower-case letters, digits and '_')"
        )
    return first


def normalize_url(url: str) -> str:
    """Validate a storage URL and spell PostgreSQL URLs with the psycopg 3 driver.

    Raises StorageError (one line, the URL masked) for anything hpsearch cannot use.
    """
    shown = mask_url(url)
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as exc:  # ValueError: a port that is not a number
        why = "the port is not a number" if isinstance(exc, ValueError) else "not a URL"
        raise StorageError(
            f"bad storage URL {shown!r}: {why} (expected sqlite:///PATH or "
            "postgresql+psycopg://USER:PASSWORD@HOST:5432/DB)"
        ) from None
    backend = parsed.get_backend_name()
    if backend in ("postgresql", "postgres"):
        if parsed.drivername not in ("postgresql", "postgres", "postgresql+psycopg"):
            raise StorageError(
                f"bad storage URL {shown!r}: use the psycopg 3 driver "
                f"(postgresql+psycopg://...), not {parsed.drivername}"
            )
        if parsed.host and "@" in parsed.host:
            raise StorageError(
                f"bad storage URL {shown!r}: the user name or password holds '@' or '/': "
                "write it percent-encoded (@ as %40, / as %2F)"
            )
        if not parsed.database:
            raise StorageError(f"bad storage URL {shown!r}: no database name")
        return parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    if backend == "sqlite":
        if parsed.drivername != "sqlite":
            raise StorageError(f"bad storage URL {shown!r}: use sqlite:///PATH")
        if not parsed.database or parsed.database == ":memory:":
            raise StorageError(
                f"bad storage URL {shown!r}: SQLite needs a file (sqlite:///PATH), "
                "workers cannot share an in-memory database"
            )
        return url
    raise StorageError(
        f"bad storage URL {shown!r}: unsupported database {backend!r} "
        "(use sqlite:///PATH or postgresql+psycopg://...)"
    )


_PASSWORD_PARAMETER = re.compile(r"(?i)([?&;](?:password|passwd|pwd|sslpassword)=)[^&;#]*")


def mask_url(url: str) -> str:
    """The URL with every password replaced by ***, safe to print, log or store.

    Works on the text, not on a parse, so that a URL that does not parse (an unescaped '@' in
    the password, a bad port) is masked all the same: the user information ends at the last
    '@', the password is what follows the user name's ':' there, and ``password=`` query
    parameters are masked too. When in doubt more is hidden, never less.
    """
    scheme, sep, rest = url.partition("://")
    if sep:
        at = rest.rfind("@")
        if at >= 0:
            user, colon, _password = rest[:at].partition(":")
            if colon:
                rest = f"{user}:***@{rest[at + 1 :]}"
        url = f"{scheme}://{rest}"
    return _PASSWORD_PARAMETER.sub(r"\1***", url)


def error_chain(exc: BaseException) -> Iterator[BaseException]:
    """`exc`, then what it was raised from or during (its cause, else its context), up to 8
    deep: the errors a check of a wrapped database error should look at (Optuna and SQLAlchemy
    wrap the driver's)."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return
        yield seen
        seen = seen.__cause__ or seen.__context__


CONFLICTS = {"40P01": "deadlock", "40001": "serialization conflict"}
"""PostgreSQL's SQLSTATEs of a transaction it aborted for another's sake: retried, and not an
outage (the server answered)."""


def conflict_kind(exc: BaseException) -> str | None:
    """ "deadlock" or "serialization conflict" when `exc` (or its cause) is PostgreSQL aborting
    a transaction in favour of a concurrent one; else None."""
    for seen in error_chain(exc):
        driver = seen.orig if isinstance(seen, DBAPIError) else seen
        kind = CONFLICTS.get(str(getattr(driver, "sqlstate", "") or ""))
        if kind is not None:
            return kind
    return None


def is_transient(exc: BaseException) -> bool:
    """A database error worth retrying (connection lost, server restarting, too many clients).

    Optuna wraps driver errors in its own exceptions; the cause chain is searched too.
    """
    return any(
        isinstance(seen, (OperationalError, ConnectionError, TimeoutError))
        or (isinstance(seen, DBAPIError) and seen.connection_invalidated)
        for seen in error_chain(exc)
    )


@dataclass
class Storage:
    """One process's handle on a study database."""

    url: str
    """Normalized URL (holds the password: never print it; use `safe_url`)."""
    engine: Engine
    """hpsearch's own pool, for the hot path."""
    schema: str | None = None
    """The PostgreSQL schema the URL names (`schema_in_url`), holding Optuna's tables and
    hpsearch's; None: Optuna's in the default schema, hpsearch's in `OUR_SCHEMA`."""
    _optuna: Any = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def safe_url(self) -> str:
        return mask_url(self.url)

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @property
    def is_postgres(self) -> bool:
        return self.dialect == "postgresql"

    def sqlite_path(self) -> Path | None:
        """The database file of a SQLite storage."""
        if self.is_postgres:
            return None
        return Path(make_url(self.url).database or "hpsearch.db")

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Connection]:
        """One transaction: commit on success, roll back on error, always return the connection.

        On SQLite the transaction starts with BEGIN IMMEDIATE, so that the read-then-write
        claims cannot interleave between processes.
        """
        with self.engine.begin() as conn:
            yield conn

    @contextlib.contextmanager
    def read(self) -> Iterator[Connection]:
        """A read-only transaction for several consistent reads (status): on SQLite a deferred
        BEGIN, so that reading never takes the write lock (workers keep writing meanwhile)."""
        with self.engine.connect() as conn:
            conn = conn.execution_options(hpsearch_read=True)
            with conn.begin():
                yield conn

    @contextlib.contextmanager
    def autocommit(self) -> Iterator[Connection]:
        """A connection whose statements each commit alone: for single statements (reads, one
        upsert), saving the BEGIN and COMMIT/ROLLBACK round trips of a transaction."""
        with self.engine.connect() as conn:
            yield conn.execution_options(isolation_level="AUTOCOMMIT")

    def optuna_storage(self) -> optuna.storages.BaseStorage:
        """Optuna's storage on the same database (cached per process, created on first use)."""
        with self._lock:
            if self._optuna is None:
                rdb = optuna.storages.RDBStorage(
                    self.url,
                    engine_kwargs={"poolclass": sa.pool.NullPool},
                    skip_compatibility_check=True,
                    skip_table_creation=True,
                )
                # One pool per process: Optuna's sessions share ours, so 32 workers stay well
                # inside PostgreSQL's default 100 connections.
                rdb.engine.dispose()
                rdb.engine = self.engine
                rdb.scoped_session = sa.orm.scoped_session(sa.orm.sessionmaker(bind=self.engine))
                self._optuna = optuna.storages._CachedStorage(rdb)
            return self._optuna

    def close(self) -> None:
        self.engine.dispose()


def retry(
    fn: Callable[[], T],
    what: str,
    *,
    attempts: int | None = None,
    on_error: Callable[[BaseException, str], None] | None = None,
    on_success: Callable[[], None] | None = None,
    max_delay_s: float = 15.0,
) -> T:
    """Call fn, retrying transient database errors with exponential backoff and jitter.

    attempts=None retries until the database answers (the work must not be lost).
    """
    delay, attempt = 0.2, 0
    while True:
        attempt += 1
        try:
            result = fn()
        except Exception as exc:
            if not is_transient(exc) or (attempts is not None and attempt >= attempts):
                raise
            if on_error is not None:
                on_error(exc, what)
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, max_delay_s)
            continue
        if on_success is not None:
            on_success()
        return result


def open_storage(url: str, *, create: bool = False, check: bool = True) -> Storage:
    """Open a storage URL; with `check`, connect once so that a bad host fails here, clearly.

    A SQLite file is made only with `create` (by `create`, `run`, `migrate`): `status` or
    `worker` on a mistyped path must say so, not leave an empty database behind.
    """
    url = normalize_url(url)
    sqlite_file = make_url(url).database if make_url(url).get_backend_name() == "sqlite" else None
    if sqlite_file and not create and not Path(sqlite_file).exists():
        raise StorageError(
            f"no study database at {sqlite_file} (create a study first: hpsearch create CONFIG)"
        )
    engine = sa.create_engine(url, **engine_kwargs(url))
    schema = None
    if engine.dialect.name == "postgresql":
        _ping_after_idle(engine)
        schema = schema_in_url(url)
        engine = engine.execution_options(schema_translate_map={OUR_SCHEMA: schema or OUR_SCHEMA})
    else:
        engine = engine.execution_options(schema_translate_map={OUR_SCHEMA: None})
        _setup_sqlite(engine)
    storage = Storage(url=url, engine=engine, schema=schema)
    if check:
        try:
            with engine.connect() as conn:
                conn.execute(sa.text("SELECT 1"))
        except DBAPIError as exc:
            engine.dispose()
            raise StorageError(
                f"cannot reach the database at {mask_url(url)}: {first_line(exc.orig)}"
            ) from None
    return storage


def engine_kwargs(url: str) -> dict[str, Any]:
    """The engine settings hpsearch uses for a storage URL (pool, timeouts, keepalives)."""
    if make_url(url).get_backend_name() == "postgresql":
        return {
            # Stale connections (idle timeouts, a restarted server) are replaced, not used:
            # see _ping_after_idle.
            "pool_recycle": 300,
            # A worker needs few (the loop, the heartbeat thread, a sampler) and holds them
            # briefly: at most 2 stay open idle, 5 at a peak.
            "pool_size": 2,
            "max_overflow": 3,
            "pool_timeout": 30,
            "connect_args": {
                "connect_timeout": 5,
                "application_name": "hpsearch",
                # Notice a dead server or a cut network within about a minute, not hours.
                "keepalives": 1,
                "keepalives_idle": 30,
                "keepalives_interval": 10,
                "keepalives_count": 3,
                # No server-side prepared statements: behind PgBouncer in transaction pooling
                # (before 1.21) a statement prepared on one server connection is missing on the
                # next. hpsearch's statements are few and cheap to plan (bench/BENCHMARKS.md).
                "prepare_threshold": None,
            },
        }
    return {"connect_args": {"timeout": 30}}


PING_AFTER_IDLE_S = 10.0
"""A pooled connection idle for longer than this is pinged before use. Idle timeouts that
close connections (PgBouncer, NAT gateways, load balancers, `idle_session_timeout`) are minutes."""


def _ping_after_idle(engine: Engine) -> None:
    """Pre-ping, only for connections that sat idle in the pool: a failed ping replaces the
    connection and, as SQLAlchemy's own pre-ping does, every other pooled one (a dead server
    took them all)."""

    @event.listens_for(engine, "checkin")
    def _on_checkin(_dbapi_conn: Any, record: Any) -> None:
        record.info["checked_in_at"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _on_checkout(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        checked_in_at = record.info.get("checked_in_at")  # None: a new connection
        if checked_in_at is None or time.monotonic() - checked_in_at < PING_AFTER_IDLE_S:
            return
        try:
            engine.dialect.do_ping(dbapi_conn)
        except Exception as exc:
            raise InvalidatePoolError(f"stale connection: {first_line(exc)}") from exc


def _setup_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let us issue BEGIN ourselves (pysqlite's implicit transactions defer locking).
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA busy_timeout = 30000")
        cur.execute("PRAGMA journal_mode = WAL")
        cur.execute("PRAGMA synchronous = NORMAL")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        options = conn.get_execution_options()
        if options.get("isolation_level") == "AUTOCOMMIT":
            return
        # Writers take the write lock at BEGIN, so that read-then-write transactions (a claim)
        # cannot interleave between processes; readers take none.
        conn.exec_driver_sql("BEGIN" if options.get("hpsearch_read") else "BEGIN IMMEDIATE")
