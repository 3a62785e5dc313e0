"""Test fixtures: a real PostgreSQL database per test session (created here, dropped after);
the helpers they use are in `tests.helpers`.

Set HPSEARCH_TEST_PG_ADMIN to an admin URL if the server is not the local one on
127.0.0.1:5432 with trust auth for `postgres` (or `root`).
"""

from __future__ import annotations

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

from tests.helpers.postgres import fresh_database, migrated, private_postgres

POSTGRES_FIXTURES = frozenset({"pg_url", "private_pg", "pgbouncer_url"})
"""Fixtures that need a PostgreSQL server: a test using one is marked `postgres` (and so is a
`storage_url` test on its postgresql backend); a test that opens a database of its own
(`tests.helpers.postgres`) says so with ``@pytest.mark.postgres``."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        params = getattr(getattr(item, "callspec", None), "params", {})
        if fixtures & POSTGRES_FIXTURES or params.get("storage_url") == "postgresql":
            item.add_marker(pytest.mark.postgres)


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """URL of a fresh, migrated PostgreSQL database for this test session."""
    with fresh_database() as url:
        yield migrated(url)


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
