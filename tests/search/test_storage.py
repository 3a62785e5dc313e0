"""Connections on a real PostgreSQL: a pooled connection the server closed while it sat idle
(an idle timeout, a proxy, an administrator) is replaced before use, not handed out."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from search import storage as storage_module
from search.storage import open_storage


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
