"""`hpsearch migrate` says what it did: created the tables, upgraded them, or nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from search.commands import main as hpsearch
from search.db.migrate import _ensure_optuna_schema, _upgrade_ours, head_revision
from search.db.storage import open_storage
from tests.helpers.postgres import fresh_database


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_migrate_says_what_it_created_or_upgraded(
    backend: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    head = head_revision()
    with fresh_database() as pg_fresh, fresh_database() as pg_old:
        fresh, old = (
            (f"sqlite:///{tmp_path}/fresh.db", f"sqlite:///{tmp_path}/old.db")
            if backend == "sqlite"
            else (pg_fresh, pg_old)
        )
        assert hpsearch(["migrate", "--storage", fresh]) == 0
        out = capsys.readouterr().out
        assert "created Optuna's schema and hpsearch's tables (" in out, out
        assert int(out.split("tables (")[1].split()[0]) >= 15
        assert hpsearch(["migrate", "--storage", fresh]) == 0
        assert (
            f"nothing to change; Optuna's schema and hpsearch's tables are up to date ({head})"
            in (capsys.readouterr().out)
        )

        storage = open_storage(old, create=True)  # as an older hpsearch left it
        if storage.is_postgres:
            with storage.engine.begin() as conn:
                conn.exec_driver_sql("CREATE SCHEMA IF NOT EXISTS hpsearch")
        _ensure_optuna_schema(storage)
        _upgrade_ours(storage, "0003")
        storage.close()
        assert hpsearch(["migrate", "--storage", old]) == 0
        assert f"upgraded hpsearch's tables from revision 0003 to {head}" in (
            capsys.readouterr().out
        )


@pytest.mark.postgres
def test_migrate_warns_when_postgresql_runs_no_autovacuum(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Without autovacuum the workers' dead rows pile up and the planner has no statistics: the
    same study ran 2.5x as long on a database of 60 earlier studies (bench/BENCHMARKS.md). The
    admin hears it from `migrate`, on stderr, exactly when the server says so."""
    with fresh_database() as url:
        storage = open_storage(url, create=True)
        with storage.autocommit() as conn:
            off = conn.exec_driver_sql("SHOW autovacuum").scalar() == "off"
        storage.close()
        assert hpsearch(["migrate", "--storage", url]) == 0
        captured = capsys.readouterr()
        assert ("autovacuum is off" in captured.err) == off, captured.err
        assert "autovacuum" not in captured.out
