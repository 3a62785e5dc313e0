"""Test fixtures: a real PostgreSQL database per test session (created here, dropped after).

Set HPSEARCH_TEST_PG_ADMIN to an admin URL if the server is not the local one on
127.0.0.1:5432 with trust auth for `postgres` (or `root`).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

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


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """URL of a fresh PostgreSQL database for this test session."""
    admin = _admin_engine()
    name = f"hpsearch_test_{uuid.uuid4().hex[:10]}"
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = admin.url.set(database=name).render_as_string(hide_password=False)
    try:
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def storage_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each storage test runs on both backends."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'study.db'}"
    return request.getfixturevalue("pg_url")


@pytest.fixture
def study_name(request: pytest.FixtureRequest) -> str:
    """A study name unique to this test (tests share the session database)."""
    return f"{request.node.name[:40]}-{uuid.uuid4().hex[:6]}"
