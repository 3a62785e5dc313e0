"""What a worker says when a statement fails and is retried."""

from __future__ import annotations

import logging
from collections.abc import Callable

import psycopg
import pytest
import sqlalchemy as sa

from search.db.storage import open_storage
from search.study.studies import create_study
from search.worker.health import DatabaseHealth
from tests.helpers.configs import make_config


def _failing_once(error: BaseException) -> Callable[[], str]:
    calls = {"n": 0}

    def statement() -> str:
        calls["n"] += 1
        if calls["n"] == 1:
            raise error
        return "done"

    return statement


@pytest.mark.parametrize(
    ("driver_error", "said"),
    [
        (psycopg.errors.DeadlockDetected("deadlock detected"), "database deadlock (report)"),
        (
            psycopg.errors.SerializationFailure("could not serialize access"),
            "database serialization conflict (report)",
        ),
    ],
)
def test_a_transaction_aborted_for_another_is_retried_and_not_called_an_outage(
    storage_url: str,
    study_name: str,
    caplog: pytest.LogCaptureFixture,
    driver_error: Exception,
    said: str,
) -> None:
    """PostgreSQL aborts one of two deadlocked (or conflicting serializable) transactions: the
    worker retries it and says what happened, not that the database is unreachable."""
    storage = open_storage(storage_url, create=True)
    ref, _ = create_study(storage, make_config(study_name))
    health = DatabaseHealth(storage, ref, grace_s=5)
    error = sa.exc.OperationalError("UPDATE trials ...", {}, driver_error)
    with caplog.at_level(logging.WARNING, logger="search.worker.health"):
        assert health.retry(_failing_once(error), "report") == "done"
    assert said in caplog.text
    assert "unreachable" not in caplog.text

    caplog.clear()
    outage = sa.exc.OperationalError("SELECT 1", {}, ConnectionRefusedError("refused"))
    with caplog.at_level(logging.WARNING, logger="search.worker.health"):
        assert health.retry(_failing_once(outage), "report") == "done"
    assert "database unreachable (report" in caplog.text
    assert "database reachable again" in caplog.text
