"""PostgreSQL for the tests: an empty database of its own, migrated as `hpsearch migrate` leaves
it, a private server a test may stop and start.

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


def admin_engine() -> sa.Engine:
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
    admin = admin_engine()
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
