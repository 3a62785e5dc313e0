"""From an empty database to a fleet: only `migrate` runs DDL, a schema of its own beside other
tools, least-privilege roles, `hpsearch workers`, and deleting a study. Real PostgreSQL, real
roles, real `hpsearch` processes."""

from __future__ import annotations

import io
import json
import uuid
from pathlib import Path

import optuna
import pytest
import sqlalchemy as sa

from search.db import liveness, migrate, trial_rows
from search.db.artifacts import DatabaseArtifactStore
from search.db.storage import StorageError, open_storage
from search.monitor.workers import list_workers
from search.study.studies import create_study
from search.worker.artifacts import DirectoryArtifactStore, TrialCheckpoints
from tests.helpers.cli import hpsearch
from tests.helpers.configs import make_config, write_config
from tests.helpers.dispatch import claim_a_new_trial, register
from tests.helpers.postgres import fresh_database, migrated

FOREIGN_REVISION = "e1f0c4f3a2b1"  # what another tool's Alembic (MLflow's, say) leaves


def as_role(url: str, role: str) -> str:
    # The test server trusts 127.0.0.1: a LOGIN role connects without its password.
    return sa.engine.make_url(url).set(username=role, password=None).render_as_string(False)


def tables_in(url: str) -> set[str]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return set(
                conn.execute(
                    sa.text(
                        "SELECT table_schema || '.' || table_name FROM information_schema.tables "
                        "WHERE table_schema NOT IN ('pg_catalog', 'information_schema')"
                    )
                ).scalars()
            )
    finally:
        engine.dispose()


def sql(url: str, statement: str) -> None:
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(statement))
    finally:
        engine.dispose()


def one_line_error(done: object) -> str:
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])  # type: ignore[attr-defined]
    lines = done.stderr.strip().splitlines()  # type: ignore[attr-defined]
    assert len(lines) == 1 and lines[0].startswith("hpsearch: error: "), done.stderr  # type: ignore[attr-defined]
    return lines[0]


@pytest.mark.slow
@pytest.mark.postgres
def test_only_migrate_runs_ddl_and_the_roles_do_what_they_may(tmp_path: Path) -> None:
    suffix = uuid.uuid4().hex[:8]
    worker, viewer = f"hps_worker_{suffix}", f"hps_viewer_{suffix}"
    with fresh_database(worker, viewer) as url:
        config = write_config(tmp_path, "roles", n_trials=2)
        # On a bare database nothing but `migrate` touches the schema: each says what to run.
        for args in (
            ("create", str(config)),
            ("run", str(config), "--workers", "1"),
            ("worker", "--study", "roles", "--device", "cpu"),
            ("status", "--study", "roles"),
            ("workers",),
        ):
            line = one_line_error(hpsearch(*args, "--storage", url, cwd=tmp_path))
            assert "run `hpsearch migrate`" in line, line
        assert tables_in(url) == set()

        secret = f"pw-{uuid.uuid4().hex}"
        env = {"HPSEARCH_WORKER_PASSWORD": secret, "HPSEARCH_VIEWER_PASSWORD": secret + "v"}
        roles = ("--worker-role", worker, "--viewer-role", viewer)
        done = hpsearch(
            "migrate", "--create-roles", *roles, "--storage", url, cwd=tmp_path, env=env
        )
        assert done.returncode == 0, done.stderr
        assert f"role {worker} created" in done.stdout and f"role {viewer} created" in done.stdout
        assert secret not in done.stdout + done.stderr
        admin = sa.create_engine(url)
        with admin.connect() as conn:
            stored = dict(
                conn.execute(
                    sa.text("SELECT rolname, rolpassword FROM pg_authid WHERE rolname IN (:w, :v)"),
                    {"w": worker, "v": viewer},
                ).all()
            )
        admin.dispose()
        assert all(p.startswith("SCRAM-SHA-256$") for p in stored.values()), "hashed, not text"
        # A later plain migrate grants the roles what it adds, and changes nothing else of them.
        done = hpsearch("migrate", *roles, "--storage", url, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert f"role {worker} granted the tables" in done.stdout

        # The worker role creates the study and runs it to the end; it has no DDL rights.
        as_worker = as_role(url, worker)
        done = hpsearch("create", str(config), "--storage", as_worker, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        done = hpsearch(
            "worker", "--study", "roles", "--device", "cpu", "--storage", as_worker, cwd=tmp_path
        )
        assert done.returncode == 0, done.stderr[-3000:]
        study = optuna.load_study(study_name="roles", storage=url)
        assert len(study.trials) == 2 and all(t.state.is_finished() for t in study.trials)
        for statement in (
            "CREATE TABLE public.w_table (x int)",
            "CREATE TABLE hpsearch.w_table (x int)",
            "DROP TABLE public.trials",
            "DROP TABLE hpsearch.workers",
            "ALTER TABLE public.trials ADD COLUMN y int",
            "CREATE SCHEMA w_schema",
        ):
            with pytest.raises(sa.exc.ProgrammingError, match=r"permission denied|must be owner"):
                sql(as_worker, statement)
        line = one_line_error(hpsearch("migrate", "--storage", as_worker, cwd=tmp_path))
        assert "needs a role that may create" in line

        # The viewer reads status and the fleet, and can write nothing.
        as_viewer = as_role(url, viewer)
        done = hpsearch(
            "status", "--study", "roles", "--json", "--storage", as_viewer, cwd=tmp_path
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["complete"] + json.loads(done.stdout)["pruned"] == 2
        done = hpsearch("workers", "--all", "--json", "--storage", as_viewer, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        states = {w["state"] for w in json.loads(done.stdout)["workers"]}
        assert states == {"stopped"}  # `create` sampled as one, the worker was the other
        for statement in (
            "UPDATE public.trials SET state = 'FAIL'",
            "DELETE FROM hpsearch.workers",
            "INSERT INTO public.studies (study_name) VALUES ('x')",
        ):
            with pytest.raises(sa.exc.InternalError, match="read-only transaction"):
                sql(as_viewer, statement)
            with pytest.raises(sa.exc.ProgrammingError, match="permission denied"):
                sql(as_viewer, f"SET TRANSACTION READ WRITE; {statement}")
        other = write_config(tmp_path, "other", n_trials=2)
        line = one_line_error(hpsearch("create", str(other), "--storage", as_viewer, cwd=tmp_path))
        assert "read-only transaction: the storage URL's role may not write here" in line

        # A database behind this hpsearch: workers refuse it and say what to run.
        sql(url, "UPDATE hpsearch.hpsearch_alembic_version SET version_num = '0003'")
        line = one_line_error(
            hpsearch(
                "worker",
                "--study",
                "roles",
                "--device",
                "cpu",
                "--storage",
                as_worker,
                cwd=tmp_path,
            )
        )
        assert "revision 0003" in line and "run `hpsearch migrate`" in line


@pytest.mark.slow
@pytest.mark.postgres
def test_a_schema_of_its_own_beside_another_tools_alembic(tmp_path: Path) -> None:
    with fresh_database() as url:
        sql(url, "CREATE TABLE alembic_version (version_num varchar(32) PRIMARY KEY)")
        sql(url, f"INSERT INTO alembic_version VALUES ('{FOREIGN_REVISION}')")
        config = write_config(tmp_path, "beside", n_trials=2)

        # Without a schema of its own: one line naming the clash, and nothing touched.
        for args in (("migrate",), ("create", str(config)), ("status", "--study", "beside")):
            line = one_line_error(hpsearch(*args, "--storage", url, cwd=tmp_path))
            assert f"public.alembic_version holds revision '{FOREIGN_REVISION}'" in line, line
            assert "--schema" in line
        assert tables_in(url) == {"public.alembic_version"}

        done = hpsearch("migrate", "--schema", "tuning", "--storage", url, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        done = hpsearch(
            "run",
            str(config),
            "--schema",
            "tuning",
            "--storage",
            url,
            "--workers",
            "1",
            cwd=tmp_path,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        # The same schema through the URL alone, as Optuna itself reads it.
        in_url = f"{url}?options=-csearch_path%3Dtuning"
        done = hpsearch("status", "--study", "beside", "--json", "--storage", in_url, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["running"] == 0
        study = optuna.load_study(study_name="beside", storage=in_url)
        assert len(study.trials) == 2 and all(t.state.is_finished() for t in study.trials)

        tables = tables_in(url)
        assert {"tuning.studies", "tuning.trials", "tuning.alembic_version"} <= tables
        assert {
            "tuning.workers",
            "tuning.trial_leases",
            "tuning.hpsearch_alembic_version",
        } <= tables
        assert {t for t in tables if not t.startswith("tuning.")} == {"public.alembic_version"}
        engine = sa.create_engine(url)
        with engine.connect() as conn:
            assert conn.execute(
                sa.text("SELECT version_num FROM public.alembic_version")
            ).all() == [(FOREIGN_REVISION,)]
        engine.dispose()


def test_bad_schema_names_are_refused(tmp_path: Path) -> None:
    cases = [
        ("--schema", "Bad-Name", "postgresql+psycopg://u@h/db", "a schema name is lower-case"),
        ("--schema", "tuning", "sqlite:///x.db", "is not PostgreSQL"),
        (
            "--schema",
            "a",
            "postgresql+psycopg://u@h/db?options=-csearch_path%3Db",
            "names search_path",
        ),
    ]
    for flag, value, url, message in cases:
        line = one_line_error(
            hpsearch("status", "--study", "s", flag, value, "--storage", url, cwd=tmp_path)
        )
        assert message in line, line
    assert not (tmp_path / "x.db").exists()


def test_workers_shows_alive_lost_and_what_they_run(pg_url: str, study_name: str) -> None:
    storage = open_storage(pg_url)
    ref, _ = create_study(storage, make_config(study_name))
    register(storage, ref.study_id, f"{study_name}-a", grace_s=60)
    register(storage, ref.study_id, f"{study_name}-b", grace_s=60)
    register(storage, ref.study_id, f"{study_name}-c", grace_s=60)
    claim = claim_a_new_trial(storage, ref.study_id, f"{study_name}-a")
    sql(pg_url, f"UPDATE hpsearch.trial_leases SET epoch = 3 WHERE trial_id = {claim.trial_id}")
    sql(
        pg_url,
        "UPDATE hpsearch.workers SET heartbeat_at = heartbeat_at - 600 "
        f"WHERE worker_id = '{study_name}-b'",
    )
    liveness.unregister(storage, f"{study_name}-c", "done")
    register(storage, ref.study_id, f"{study_name}-d", grace_s=60)  # lost two days ago
    sql(
        pg_url,
        "UPDATE hpsearch.workers SET heartbeat_at = heartbeat_at - 172800 "
        f"WHERE worker_id = '{study_name}-d'",
    )

    listed = {w.worker_id: w for w in list_workers(storage, study_id=ref.study_id)}
    assert set(listed) == {f"{study_name}-a", f"{study_name}-b"}
    a, b = listed[f"{study_name}-a"], listed[f"{study_name}-b"]
    assert (a.state, a.trial, a.epoch, a.study, a.hostname, a.pid, a.device) == (
        "alive",
        claim.number,
        3,
        study_name,
        "h",
        1,
        "cpu",
    )
    assert a.heartbeat_age_s < 30
    assert (b.state, b.trial) == ("lost", None) and b.heartbeat_age_s >= 600
    everyone = list_workers(storage, study_id=ref.study_id, include_stopped=True)
    assert [w.state for w in everyone] == ["alive", "lost", "lost", "stopped"]
    assert everyone[2].worker_id == f"{study_name}-d"  # with --all, the old lost one too

    done = hpsearch("workers", "--study", study_name, "--storage", pg_url, cwd=Path("/tmp"))
    assert done.returncode == 0, done.stderr
    header, *rows, total = done.stdout.strip().splitlines()
    assert header.split()[:8] == [
        "state",
        "study",
        "host",
        "pid",
        "device",
        "trial",
        "epoch",
        "heartbeat",
    ]
    assert rows[0].split()[:7] == ["alive", study_name, "h", "1", "cpu", str(claim.number), "3"]
    assert rows[1].split()[0] == "lost" and total == "1 alive, 1 lost"
    done = hpsearch("workers", "--json", "--storage", pg_url, cwd=Path("/tmp"))
    mine = [w for w in json.loads(done.stdout)["workers"] if w["study"] == study_name]
    assert len(mine) == 2  # every study's workers without --study
    storage.close()


def pg_rows_of(url: str, study_id: int, trial_ids: list[int]) -> dict[str, int]:
    engine = sa.create_engine(url)
    ids = ",".join(map(str, trial_ids))
    with engine.connect() as conn:
        counts = {
            table: conn.execute(
                sa.text(f"SELECT count(*) FROM hpsearch.{table} WHERE {where}")
            ).scalar_one()
            for table, where in (
                ("workers", f"study_id = {study_id}"),
                ("trial_leases", f"study_id = {study_id}"),
                ("sampling_locks", f"study_id = {study_id}"),
                ("artifacts", f"trial_id IN ({ids})"),
            )
        }
    engine.dispose()
    return counts


def a_study_with_everything(url: str, name: str, store_dir: Path | None = None):
    """A study with a worker, a held trial, a sampling lock row and a stored checkpoint."""
    storage = open_storage(url)
    ref, _ = create_study(storage, make_config(name))
    register(storage, ref.study_id, f"{name}-w", grace_s=60)
    with trial_rows.sampling_lock(storage, ref.study_id, f"{name}-w") as taken:
        assert taken  # the lock's row stays, free, after its holder lets go
    claim = claim_a_new_trial(storage, ref.study_id, f"{name}-w")
    store = DirectoryArtifactStore(store_dir) if store_dir else DatabaseArtifactStore(storage)
    TrialCheckpoints(store, storage, claim, ref).write(io.BytesIO(b"x" * 1000))
    liveness.unregister(storage, f"{name}-w", "done")
    return storage, ref, claim, store


def test_optuna_delete_study_leaves_none_of_our_rows(pg_url: str, study_name: str) -> None:
    storage, ref, claim, _ = a_study_with_everything(pg_url, study_name)
    before = pg_rows_of(pg_url, ref.study_id, [claim.trial_id])
    assert all(before.values()), before
    optuna.delete_study(study_name=study_name, storage=pg_url)  # plain Optuna, its own engine
    assert pg_rows_of(pg_url, ref.study_id, [claim.trial_id]) == dict.fromkeys(before, 0)
    storage.close()


@pytest.mark.slow
def test_hpsearch_delete_removes_rows_and_checkpoint_files(tmp_path: Path, study_name: str) -> None:
    url = migrated(f"sqlite:///{tmp_path / 'study.db'}")
    files = tmp_path / "ckpt"
    files.mkdir()
    storage, ref, _, _ = a_study_with_everything(url, study_name, files)
    register(storage, ref.study_id, f"{study_name}-live", grace_s=60)
    assert list(files.glob(f"{ref.uid}-*"))
    line = one_line_error(
        hpsearch(
            "delete",
            "--study",
            study_name,
            "--storage",
            url,
            "--artifacts",
            str(files),
            cwd=tmp_path,
        )
    )
    assert "1 live worker" in line and "--force" in line
    args = ["delete", "--study", study_name, "--force", "--storage", url, "--artifacts", str(files)]
    # Not on a terminal, it cannot ask: it says what would go and deletes nothing.
    line = one_line_error(hpsearch(*args, cwd=tmp_path))
    assert line == (
        f"hpsearch: error: delete would remove study {study_name!r} from {url}: 1 trials "
        f"(1 running), 2 worker records, its leases and its checkpoints ({files}/): pass --yes "
        "to delete without asking"
    )
    assert list(files.glob(f"{ref.uid}-*"))
    done = hpsearch(*args, "--yes", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"study {study_name!r} deleted" in done.stdout
    assert not list(files.glob(f"{ref.uid}-*"))
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        for table in ("workers", "trial_leases", "sampling_locks", "studies", "trials"):
            assert conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one() == 0, table
    engine.dispose()
    line = one_line_error(hpsearch("delete", "--study", study_name, "--storage", url, cwd=tmp_path))
    assert "no hpsearch study named" in line
    storage.close()


@pytest.mark.postgres
def test_upgrading_to_the_cascades_drops_rows_of_studies_deleted_before(study_name: str) -> None:
    with fresh_database() as url:
        storage = open_storage(url)
        # The database as hpsearch 0003 left it, with a worker of a study deleted since.
        migrate._ensure_optuna_schema(storage)
        migrate._create_schemas(storage)
        migrate._upgrade_ours(storage, "0003")
        ref, _ = create_study(storage, make_config(study_name))
        # Rows as 0003's workers table holds them (later revisions add columns).
        with sa.create_engine(url).begin() as conn:
            for worker_id, study_id in (("kept", ref.study_id), ("orphan", ref.study_id + 1000)):
                conn.execute(
                    sa.text(
                        "INSERT INTO hpsearch.workers (worker_id, study_id, hostname, pid, device,"
                        " started_at, heartbeat_at, grace_s)"
                        " VALUES (:w, :s, 'h', 1, 'cpu', 0, 0, 60)"
                    ),
                    {"w": worker_id, "s": study_id},
                )
        with pytest.raises(StorageError, match=r"has revision 0003.*run `hpsearch migrate`"):
            migrate.check_schema(storage)
        assert migrate.upgrade(storage) == migrate.head_revision()
        migrate.check_schema(storage)
        engine = sa.create_engine(url)
        with engine.connect() as conn:
            ids = conn.execute(sa.text("SELECT worker_id FROM hpsearch.workers")).scalars().all()
        engine.dispose()
        assert ids == ["kept"]
        storage.close()
