"""Test fixtures: a real PostgreSQL database per test session (created here, dropped after);
the helpers they use are in `tests.helpers`.

Set HPSEARCH_TEST_PG_ADMIN to an admin URL if the server is not the local one on
127.0.0.1:5432 with trust auth for `postgres` (or `root`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.helpers.pgbouncer import PgBouncerError, pgbouncer
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
    """The session's database behind a real PgBouncer in transaction pooling
    (`tests.helpers.pgbouncer`)."""
    try:
        with pgbouncer(pg_url) as bouncer:
            yield bouncer.url
    except PgBouncerError as exc:  # not installed, or did not start
        pytest.fail(str(exc), pytrace=False)
