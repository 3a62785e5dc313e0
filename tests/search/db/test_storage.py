"""Connections and transactions on real databases: a pooled PostgreSQL connection the server
closed while it sat idle is replaced before use; readers never wait for writers; a failed
transaction leaves nothing behind (both backends)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import sqlalchemy as sa

from search.db import storage as storage_module
from search.db.storage import open_storage
from search.db.tables import trials
from search.monitor.status import study_status
from search.study.studies import create_study
from tests.helpers.configs import make_config


def _server_closes_pooled_connection(url: str, pid: int) -> None:
    admin = sa.create_engine(url, poolclass=sa.pool.NullPool)
    with admin.connect() as conn:
        assert conn.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": pid}).scalar_one()
    admin.dispose()


def _backend_pid(storage: storage_module.Storage) -> int:
    with storage.autocommit() as conn:
        return conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()


def test_a_connection_closed_while_idle_is_replaced_before_use(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = open_storage(pg_url)
    pid = _backend_pid(storage)
    _server_closes_pooled_connection(pg_url, pid)
    monkeypatch.setattr(storage_module, "PING_AFTER_IDLE_S", 0.0)  # it has been idle "long"
    assert _backend_pid(storage) != pid  # pinged, found dead, replaced: no error
    storage.close()


def test_a_connection_used_a_moment_ago_is_not_pinged(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The other side of the same rule: a busy worker's connections go unpinged (pinging them
    # doubled the database's transactions), so a connection killed between two uses fails once
    # (and `retry` handles it like any outage).
    storage = open_storage(pg_url)
    pid = _backend_pid(storage)
    _server_closes_pooled_connection(pg_url, pid)
    monkeypatch.setattr(storage_module, "PING_AFTER_IDLE_S", 3600.0)
    with pytest.raises(sa.exc.OperationalError):
        _backend_pid(storage)
    assert _backend_pid(storage) != pid  # the pool replaced it after the error
    storage.close()


def test_status_reads_while_a_worker_holds_the_write_lock(
    storage_url: str, study_name: str
) -> None:
    # On SQLite a writer's transaction locks the database file for writing; `hpsearch status`
    # (and every read) must neither wait for it nor take that lock itself.
    storage = open_storage(storage_url)
    study, _ = create_study(storage, make_config(study_name, n_trials=5))
    watcher = open_storage(storage_url)
    with storage.transaction() as writer, ThreadPoolExecutor(1) as pool:
        writer.execute(sa.insert(trials).values(number=0, study_id=study.study_id, state="WAITING"))
        status = pool.submit(study_status, watcher, study).result(timeout=10)
        assert status.waiting == 0  # the writer has not committed yet
    assert study_status(watcher, study).waiting == 1


def test_a_failed_transaction_writes_nothing(storage_url: str, study_name: str) -> None:
    storage = open_storage(storage_url)
    study, _ = create_study(storage, make_config(study_name, n_trials=5))
    with pytest.raises(RuntimeError), storage.transaction() as conn:
        conn.execute(sa.insert(trials).values(number=0, study_id=study.study_id, state="WAITING"))
        raise RuntimeError("the process fails half way")
    with storage.read() as conn:
        count = conn.execute(
            sa.select(sa.func.count()).where(trials.c.study_id == study.study_id)
        ).scalar_one()
    assert count == 0
