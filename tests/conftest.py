"""Test fixtures: a real PostgreSQL database per test session (created here, dropped after).

Set HPSEARCH_TEST_PG_ADMIN to an admin URL if the server is not the local one on
127.0.0.1:5432 with trust auth for `postgres` (or `root`).
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from search.db.migrate import upgrade
from search.db.storage import open_storage

REPO = Path(__file__).resolve().parent.parent


def _admin_engine() -> sa.Engine:
    urls = (
        [os.environ["HPSEARCH_TEST_PG_ADMIN"]]
        if "HPSEARCH_TEST_PG_ADMIN" in os.environ
        else [
            "postgresql+psycopg://postgres@127.0.0.1:5432/postgres",
            "postgresql+psycopg://root@127.0.0.1:5432/postgres",
        ]
    )
    errors = []
    for url in urls:
        engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
        try:
            with engine.connect():
                return engine
        except sa.exc.OperationalError as exc:
            errors.append(f"{engine.url.render_as_string(hide_password=True)}: {exc.orig}")
            engine.dispose()
    pytest.fail(
        "these tests need a real PostgreSQL server (none reachable): " + "; ".join(errors),
        pytrace=False,
    )


def migrated(url: str) -> str:
    """`url` with Optuna's and hpsearch's tables created, as `hpsearch migrate` leaves it."""
    storage = open_storage(url, create=True)
    try:
        upgrade(storage)
    finally:
        storage.close()
    return url


@contextlib.contextmanager
def fresh_database(*roles: str) -> Iterator[str]:
    """URL of an empty database of its own (not migrated; owner: the admin), dropped after,
    and then the cluster-wide `roles` a test created in it."""
    admin = _admin_engine()
    name = f"hpsearch_test_{uuid.uuid4().hex[:10]}"
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        yield admin.url.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            for role in roles:
                conn.execute(sa.text(f'DROP ROLE IF EXISTS "{role}"'))
        admin.dispose()


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """URL of a fresh, migrated PostgreSQL database for this test session."""
    admin = _admin_engine()
    name = f"hpsearch_test_{uuid.uuid4().hex[:10]}"
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = admin.url.set(database=name).render_as_string(hide_password=False)
    try:
        yield migrated(url)
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def storage_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each storage test runs on both backends (migrated databases)."""
    if request.param == "sqlite":
        return migrated(f"sqlite:///{tmp_path / 'study.db'}")
    return request.getfixturevalue("pg_url")


@pytest.fixture
def study_name(request: pytest.FixtureRequest) -> str:
    """A study name unique to this test (tests share the session database)."""
    return f"{request.node.name[:40]}-{uuid.uuid4().hex[:6]}"


@contextlib.contextmanager
def private_postgres() -> Iterator[tuple[str, Callable[..., None]]]:
    """A PostgreSQL server of its own (initdb, a free port), migrated, and a function that stops
    it for a few seconds and starts it again: what takes the database away must not disturb the
    shared server. Needs PostgreSQL's server programs (initdb, pg_ctl)."""
    bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    initdb = shutil.which("initdb") or (bins[-1] if bins else None)
    if initdb is None:
        pytest.fail(
            "the database restart tests need PostgreSQL's server programs (initdb, "
            "pg_ctl): install the postgresql package",
            pytrace=False,
        )
    pg_ctl = os.path.join(os.path.dirname(initdb), "pg_ctl")
    # Not under pytest's temporary tree: that is private to root, and the server runs as postgres.
    root = Path(tempfile.mkdtemp(prefix="hpsearch-test-pg-"))
    root.chmod(0o755)
    data, sockets = root / "data", root / "sockets"
    sockets.mkdir()
    as_owner: list[str] = []
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root
        shutil.chown(root, "postgres")
        shutil.chown(sockets, "postgres")
        as_owner = ["runuser", "-u", "postgres", "--"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    subprocess.run(
        [*as_owner, initdb, "-D", str(data), "-A", "trust", "-U", "postgres"],
        check=True,
        capture_output=True,
    )
    options = f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1"
    log = str(root / "server.log")

    def ctl(*args: str) -> None:
        subprocess.run(
            [*as_owner, pg_ctl, "-D", str(data), "-l", log, "-o", options, "-w", *args],
            check=True,
            capture_output=True,
        )

    ctl("start")
    url = f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    try:

        def restart(down_s: float = 3.0) -> None:
            # Stop, stay away a while (connections break, statements fail), start again.
            ctl("stop", "-m", "fast")
            time.sleep(down_s)
            ctl("start")

        yield migrated(url), restart
    finally:
        ctl("stop", "-m", "immediate")
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def private_pg() -> Iterator[tuple[str, Callable[..., None]]]:
    """`private_postgres` for a test session."""
    with private_postgres() as server:
        yield server


@pytest.fixture(scope="session")
def pgbouncer_url(pg_url: str) -> Iterator[str]:
    """The session's database behind a real PgBouncer in transaction pooling (Debian's
    `pgbouncer`, started here on a free loopback port, stopped after)."""
    binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    if not os.path.exists(binary):
        pytest.fail("the pooling test needs PgBouncer: apt-get install -y pgbouncer", pytrace=False)
    target = sa.engine.make_url(pg_url)
    root = Path(tempfile.mkdtemp(prefix="hpsearch-test-pgbouncer-"))
    root.chmod(0o755)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (root / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"{target.database} = host={target.host} port={target.port or 5432} "
        f"dbname={target.database} user={target.username}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        "auth_type = any\npool_mode = transaction\n"
        "max_client_conn = 400\ndefault_pool_size = 20\n"
        f"logfile = {root / 'pgbouncer.log'}\npidfile = {root / 'pgbouncer.pid'}\n"
        "ignore_startup_parameters = extra_float_digits,options\n"
    )
    as_owner: list[str] = []
    if os.geteuid() == 0:  # PgBouncer refuses to run as root
        shutil.chown(root, "postgres")
        as_owner = ["runuser", "-u", "postgres", "--"]
    process = subprocess.Popen([*as_owner, binary, str(root / "pgbouncer.ini")])
    url = target.set(port=port).render_as_string(hide_password=False)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    log = (
                        (root / "pgbouncer.log").read_text()
                        if (root / "pgbouncer.log").exists()
                        else ""
                    )
                    pytest.fail(f"PgBouncer did not start: {log[-2000:]}", pytrace=False)
                time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
        shutil.rmtree(root, ignore_errors=True)
