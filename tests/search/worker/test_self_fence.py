"""Self-fencing: a worker cut off from the database stops its trial before another worker may
take it over, and a worker whose database or study is gone stops with one line, exit 1."""

from __future__ import annotations

import time
from pathlib import Path

import optuna
import pytest
import sqlalchemy as sa

from search.db.storage import open_storage
from search.study.parse_config import parse_config
from search.study.studies import create_study
from tests.helpers.objectives import EPOCH_LOG_ENV, join_all, start_workers
from tests.helpers.postgres import admin_engine, fresh_database, migrated
from tests.helpers.processes import WorkerProcess, reported_epochs, trial_states, wait_for
from tests.helpers.tcp_proxy import TcpProxy

pytestmark = pytest.mark.slow

GRACE_S = 4.0


def _config(name: str, *, epochs: int, task: str = "digits") -> object:
    return parse_config(
        {
            "study": {"name": name, "n_trials": 1, "sampler": "random"},
            "pruner": {"type": "none"},
            "task": {"name": task, "epochs": epochs},
            "space": {"x": {"type": "float", "low": 0.5, "high": 1.0}},
        }
    )


def _epochs(log: Path) -> dict[int, list[tuple[int, float, float]]]:
    """(epoch, start, end) per process, from `logged_curve`'s file."""
    by_pid: dict[int, list[tuple[int, float, float]]] = {}
    for line in log.read_text().splitlines():
        pid, _trial, epoch, start, end = line.split()
        by_pid.setdefault(int(pid), []).append((int(epoch), float(start), float(end)))
    return by_pid


def test_a_worker_cut_off_from_the_database_stops_before_its_trial_is_taken_over(
    pg_url: str, study_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = open_storage(pg_url)
    create_study(storage, _config(study_name, epochs=60))
    log = tmp_path / "epochs.log"
    monkeypatch.setenv(EPOCH_LOG_ENV, str(log))
    url = sa.engine.make_url(pg_url)
    with TcpProxy(url.host or "127.0.0.1", url.port or 5432) as proxy:
        behind_proxy = url.set(port=proxy.port).render_as_string(hide_password=False)
        (first,) = start_workers(behind_proxy, study_name, 1, "logged_curve", grace_s=GRACE_S)
        wait_for(lambda: reported_epochs(pg_url, study_name, 0) >= 3, 60, "epoch 3")
        proxy.sever()
        cut = time.time()
        (second,) = start_workers(pg_url, study_name, 1, "logged_curve", grace_s=GRACE_S)
        # The second worker takes the trial over once the first has been silent for its grace
        # period, and finishes it.
        wait_for(lambda: trial_states(pg_url, study_name) == {"COMPLETE": 1}, 120, "the end")
        proxy.heal()  # the first worker's network comes back: it must not train on
        assert join_all([first, second], timeout_s=60) == [0, 0]

    by_pid = _epochs(log)
    mine, theirs = by_pid[first.pid], by_pid[second.pid]
    last_mine = max(end for _, _, end in mine)
    first_theirs = min(start for _, start, _ in theirs)
    # The cut-off worker stopped training within its grace period...
    assert last_mine - cut < GRACE_S, (last_mine - cut, mine[-3:])
    # ...and before the other worker started on the trial: never two trainings of one trial.
    assert last_mine < first_theirs, (mine[-3:], theirs[:3])
    trial = optuna.load_study(study_name=study_name, storage=pg_url).trials[0]
    assert sorted(trial.intermediate_values) == list(range(1, 61))


@pytest.mark.postgres
@pytest.mark.parametrize("how", ["database dropped", "database renamed"])
def test_a_worker_whose_database_is_gone_stops_with_one_line(how: str, tmp_path: Path) -> None:
    with fresh_database() as url:
        migrated(url)
        storage = open_storage(url)
        name = "gone"
        create_study(
            storage, _config(name, epochs=100000, task="tests.helpers.tiny_task:make_task")
        )
        storage.close()
        worker = WorkerProcess(url, name, tmp_path, grace_s=GRACE_S, name="w")
        try:
            wait_for(lambda: reported_epochs(url, name, 0) >= 2, 120, "epoch 2", [worker])
            database = sa.engine.make_url(url).database
            admin = admin_engine()
            with admin.connect() as conn:
                if how == "database dropped":
                    conn.execute(sa.text(f'DROP DATABASE "{database}" WITH (FORCE)'))
                else:
                    # The worker reconnects at once: the database takes no new sessions
                    # first, then its sessions end, then the rename (retried while one is
                    # still ending: pg_terminate_backend does not wait for it).
                    conn.execute(sa.text(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS false'))
                    for attempt in range(50):
                        conn.execute(
                            sa.text(
                                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                "WHERE datname = :d"
                            ),
                            {"d": database},
                        )
                        try:
                            conn.execute(
                                sa.text(f'ALTER DATABASE "{database}" RENAME TO "{database}_x"')
                            )
                            break
                        except sa.exc.OperationalError as exc:
                            if "being accessed by other users" not in str(exc) or attempt == 49:
                                raise
                            time.sleep(0.05)
                    renamed = f"{database}_x"
            admin.dispose()
            gone = time.monotonic()
            code = worker.wait(60)
            took = time.monotonic() - gone
        finally:
            worker.kill()
            if how == "database renamed":
                admin = admin_engine()
                with admin.connect() as conn:
                    conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{renamed}" WITH (FORCE)'))
                admin.dispose()
    log = worker.log()
    assert code == 1, log[-3000:]
    assert took < GRACE_S + 5, took
    assert "Traceback" not in log
    last = log.strip().splitlines()[-1]
    assert last.startswith("hpsearch: error: study 'gone' on postgresql"), last
    assert last.endswith("this worker stops"), last
    # Not every epoch for ever: a checkpoint or two failed on the way, then it stopped.
    assert log.count("training goes on") <= 3
