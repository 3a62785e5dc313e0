"""Test fixtures: a real PostgreSQL database per test session (created here, dropped after);
the helpers they use are in `tests.helpers`.

Set HPSEARCH_TEST_PG_ADMIN to an admin URL if the server is not the local one on
127.0.0.1:5432 with trust auth for `postgres` (or `root`).
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.helpers.pgbouncer import PgBouncerError, pgbouncer
from tests.helpers.postgres import fresh_database, migrated, private_postgres


def _a_share_of_the_cores_per_test_process() -> None:
    """pytest-xdist runs N test files at once (`-n 2` in pyproject.toml). Left alone, each
    process's torch, and every command a test starts, takes all the cores: on 2 cores, two
    runs of README's main job side by side took 565 s each against 47 s alone, their OpenMP
    threads spinning on each other's cores, and 53 s each with one thread apiece. So each test
    process, and what it starts, gets cores / N threads, unless OMP_NUM_THREADS is set
    already; `-n 0` keeps every core."""
    processes = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    if processes < 2 or "OMP_NUM_THREADS" in os.environ:
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    threads = max(1, (cores or 1) // processes)
    os.environ["OMP_NUM_THREADS"] = str(threads)  # torch reads it when first imported
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(threads)


_a_share_of_the_cores_per_test_process()

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
