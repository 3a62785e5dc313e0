"""A killed or preempted worker loses at most one checkpoint interval, on a real PostgreSQL.

(a) kill -9 mid-trial: another worker finishes the trial from its checkpoint, with the value an
uninterrupted run gets. (b) SIGTERM (and Ctrl-C): checkpoint, hand back, exit 0 (130). (c) The
database restarts under three workers: nothing fails, nothing runs twice. (d) Workers killed at
random, again and again: the study still finishes every trial. (e) The database goes away just
as a trial reaches an ASHA rung: the trial trains on and completes. (f) A SIGTERM'd worker whose
step and hand-back take longer than its grace period keeps its heartbeat: its trial is not taken
over from it, and no failed attempt is counted against the trial.
"""

from __future__ import annotations

import dataclasses
import random
import re
import signal
import sys
import threading
import time
from pathlib import Path

import optuna
import psycopg
import pytest

from search.db.storage import open_storage
from search.sampling.samplers import derived_seed
from search.study.parse_config import load_config
from search.study.studies import create_study
from tests.helpers.configs import write_config
from tests.helpers.processes import (
    WorkerProcess,
    query,
    reported_epochs,
    trial_states,
    wait_for,
)

pytestmark = pytest.mark.slow

EPOCHS = 12
"""Epochs of the interrupted trial: long enough that the signal lands in the middle of it."""


def uninterrupted(config_path: Path, params: dict, number: int) -> list[float]:
    """The per-epoch metrics of the same trial trained start to finish in one go."""
    from trainer import resolve_task, train

    config = load_config(config_path)
    train_config = dataclasses.replace(
        config.train, seed=derived_seed(config.study.seed, number, "train")
    )
    result = train(resolve_task(config.task.name), params, train_config, device="cpu")
    assert result.status == "completed", result.reason
    return result.metrics


@pytest.mark.parametrize(
    ("signum", "exit_code"),
    [(signal.SIGKILL, -9), (signal.SIGTERM, 0), (signal.SIGINT, 130)],
    ids=["kill-9", "sigterm", "ctrl-c"],
)
def test_a_stopped_worker_s_trial_is_finished_elsewhere_from_its_checkpoint(
    signum: int, exit_code: int, pg_url: str, study_name: str, tmp_path: Path
) -> None:
    config = write_config(tmp_path, study_name, n_trials=1)
    config.write_text(
        config.read_text()
        .replace("epochs = 4", f"epochs = {EPOCHS}")
        .replace('type = "hyperband"', 'type = "none"')
        .replace("min_resource = 1\nreduction_factor = 2\n", "")
    )
    storage = open_storage(pg_url)
    create_study(storage, load_config(config))
    first = WorkerProcess(pg_url, study_name, tmp_path, grace_s=2, name="first")
    try:
        wait_for(lambda: reported_epochs(pg_url, study_name, 0) >= 2, 120, "epoch 2", [first])
        signalled = time.monotonic()
        first.signal(signum)
        assert first.wait(30) == exit_code, first.log()
        stopped_in = time.monotonic() - signalled
    finally:
        first.kill()
    epochs_done = reported_epochs(pg_url, study_name, 0)
    assert epochs_done < EPOCHS, "the trial finished before the signal: make it longer"
    if signum != signal.SIGKILL:
        assert stopped_in < 10, f"took {stopped_in:.1f} s to checkpoint and hand back"
        assert trial_states(pg_url, study_name) == {"WAITING": 1}  # handed back at once
        assert "handed back for another worker" in first.log()

    second = WorkerProcess(pg_url, study_name, tmp_path, grace_s=2, name="second")
    try:
        assert second.wait(120) == 0, second.log()
    finally:
        second.kill()

    trial = optuna.load_study(study_name=study_name, storage=pg_url).trials[0]
    assert trial.state.name == "COMPLETE"
    resumed = trial.user_attrs["resumed_from"]
    assert resumed["worker_id"] == re.search(r"worker (\S+) joined", first.log())[1]
    assert resumed["epoch"] >= 2  # it continued from a checkpoint, not from scratch
    assert trial.user_attrs["epochs_trained"] == EPOCHS
    # Exactly the run it would have been without the interruption, epoch by epoch.
    expected = uninterrupted(config, trial.params, trial.number)
    assert [trial.intermediate_values[e] for e in range(1, EPOCHS + 1)] == expected
    assert trial.value == expected[-1]
    leases = query(
        pg_url,
        "SELECT generation FROM hpsearch.trial_leases WHERE trial_id = :t",
        t=trial._trial_id,
    )
    assert leases == [(2,)]  # claimed twice: by the first worker, then by the second


def test_a_sigterm_d_worker_heartbeats_until_its_slow_hand_back_is_done(
    pg_url: str, study_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    grace_s = 3.0
    config = write_config(
        tmp_path, study_name, n_trials=1, task="tests.helpers.slow_step_task:make_task"
    )
    config.write_text(
        config.read_text()
        .replace('type = "hyperband"', 'type = "none"')
        .replace("min_resource = 1\nreduction_factor = 2\n", "")
    )
    create_study(open_storage(pg_url), load_config(config))
    slow = tmp_path / "slow"
    slow.touch()
    stepping = Path(f"{slow}.stepping")
    monkeypatch.setenv("SLOW_STEP_FILE", str(slow))
    first = WorkerProcess(pg_url, study_name, tmp_path, grace_s=grace_s, name="first")
    second = None
    try:
        wait_for(
            lambda: trial_states(pg_url, study_name) == {"RUNNING": 1}, 120, "a claim", [first]
        )
        # The other worker has nothing to claim: it waits, and its heartbeat reaps the silent.
        second = WorkerProcess(pg_url, study_name, tmp_path, grace_s=grace_s, name="second")
        wait_for(lambda: "joined study" in second.log(), 120, "the second worker", [second])
        stepping.unlink(missing_ok=True)
        wait_for(stepping.exists, 60, "a slow step of the first worker", [first])
        first.signal(signal.SIGTERM)  # its step goes on for about SLOW_STEP_S > grace_s
        signalled = time.monotonic()
        slow.unlink()  # the steps after this one are fast
        assert first.wait(60) == 0, first.log()
        assert time.monotonic() - signalled > grace_s  # the hand-back took longer than grace
        assert second.wait(120) == 0, second.log()
    finally:
        for worker in (first, second):
            if worker is not None:
                worker.kill()
    assert "handed back for another worker" in first.log(), first.log()[-3000:]
    assert "taken over" not in first.log(), first.log()[-3000:]
    assert "went silent" not in second.log(), second.log()[-3000:]
    trial = optuna.load_study(study_name=study_name, storage=pg_url).trials[0]
    assert trial.state.name == "COMPLETE"
    assert "hpsearch:failed_attempts" not in trial.system_attrs, trial.system_attrs


def test_database_restart_under_three_workers(
    private_pg: tuple[str, object], study_name: str, tmp_path: Path
) -> None:
    url, restart = private_pg
    config = write_config(tmp_path, study_name, n_trials=9)
    config.write_text(config.read_text().replace("epochs = 4", "epochs = 6"))
    create_study(open_storage(url), load_config(config))
    workers = [WorkerProcess(url, study_name, tmp_path, grace_s=5, name=f"w{i}") for i in range(3)]
    try:
        wait_for(
            lambda: (
                all("joined study" in w.log() for w in workers)
                and trial_states(url, study_name).get("RUNNING", 0) >= 2
            ),
            120,
            "three workers and two running trials",
            workers,
        )
        restart()  # connections drop; the server is away for 3 s (less than the grace period)
        codes = [w.wait(180) for w in workers]
        assert codes == [0, 0, 0], "\n".join(w.log()[-2000:] for w in workers)
    finally:
        for w in workers:
            w.kill()
    logs = "\n".join(w.log() for w in workers)
    assert "database unreachable" in logs and "database reachable again" in logs
    study = optuna.load_study(study_name=study_name, storage=url)
    assert len(study.trials) == 9
    failed = {
        t.number: t.system_attrs.get("fail_reason") for t in study.trials if t.state.name == "FAIL"
    }
    assert not failed, (failed, logs[-4000:])
    # No trial was declared dead and run twice: each was claimed exactly once.
    generations = query(
        url,
        "SELECT l.generation FROM hpsearch.trial_leases l JOIN studies s USING (study_id) "
        "WHERE s.study_name = :n",
        n=study_name,
    )
    assert sorted(g for (g,) in generations) == [1] * 9
    # A worker whose heartbeats could not get through for most of its grace period stopped its
    # trial (self-fencing) and, still holding it when the server was back, went on with it from
    # its own checkpoint: a resume, never another worker's.
    for t in study.trials:
        if "resumed_from" in t.user_attrs:
            assert t.user_attrs["resumed_from"]["worker_id"] == t.user_attrs["worker_id"], t


def test_workers_killed_at_random_still_finish_the_study(
    pg_url: str, study_name: str, tmp_path: Path
) -> None:
    config = write_config(tmp_path, study_name, n_trials=12)
    config.write_text(  # every trial trains all its epochs: long enough to be killed in
        config.read_text()
        .replace("epochs = 4", "epochs = 5")
        .replace('type = "hyperband"\nmin_resource = 1\nreduction_factor = 2', 'type = "none"')
    )
    create_study(open_storage(pg_url), load_config(config))
    rng = random.Random(7)
    workers = [
        WorkerProcess(pg_url, study_name, tmp_path, grace_s=2, name=f"w{i}") for i in range(3)
    ]
    started, kills = time.monotonic(), 0
    try:
        # Kill a random worker every few seconds and start a new one, five times.
        while kills < 5 and time.monotonic() - started < 120:
            time.sleep(rng.uniform(1.5, 3.5))
            if (
                trial_states(pg_url, study_name).get("COMPLETE", 0)
                + trial_states(pg_url, study_name).get("PRUNED", 0)
                >= 10
            ):
                break
            victim = rng.randrange(len(workers))
            workers[victim].kill()
            kills += 1
            workers[victim] = WorkerProcess(
                pg_url, study_name, tmp_path, grace_s=2, name=f"w{victim}-{kills}"
            )
        codes = [w.wait(180) for w in workers]
        assert codes == [0, 0, 0], "\n".join(w.log()[-2000:] for w in workers)
    finally:
        for w in workers:
            w.kill()
    assert kills >= 3
    study = optuna.load_study(study_name=study_name, storage=pg_url)
    assert sorted(t.number for t in study.trials) == list(range(12))
    assert {t.state.name for t in study.trials} <= {"COMPLETE", "PRUNED"}
    assert trial_states(pg_url, study_name).keys() <= {"COMPLETE", "PRUNED"}


RUNG_TASK = '''
"""One trial that waits in its first epoch (ASHA's first rung) until the test has stopped the
database, so the worker decides the rung while the database is away."""
import os, time
import torch
from torch.utils.data import TensorDataset
from trainer import Task

HERE = os.path.dirname(os.path.abspath(__file__))

def make_task(params):
    epoch = [0]
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=g)
    data = TensorDataset(x, (x[:, 0] > 0).long())

    def metric(out, y):
        epoch[0] += 1
        if epoch[0] == 1 and not os.path.exists(os.path.join(HERE, "released")):
            open(os.path.join(HERE, "at_rung"), "w").close()
            deadline = time.time() + 120
            while not os.path.exists(os.path.join(HERE, "released")) and time.time() < deadline:
                time.sleep(0.05)
        return (out.argmax(1) == y).float().mean().item()

    return Task(model=torch.nn.Linear(4, 2), train_set=data, val_set=data,
                loss_fn=torch.nn.functional.cross_entropy, metric_fn=metric)
'''


def test_a_database_outage_at_an_asha_rung_fails_no_trial(
    private_pg: tuple[str, object], study_name: str, tmp_path: Path
) -> None:
    """The rung decision needs the database (the rung schedule, the rivals there); when it is
    away the trial trains on, and completes: a restart is the machine's fault, not the trial's."""
    url, restart = private_pg
    (tmp_path / "rung_task.py").write_text(RUNG_TASK)
    (tmp_path / "rung.toml").write_text(
        f'[study]\nname = "{study_name}"\nn_trials = 1\nsampler = "random"\nseed = 0\n\n'
        '[pruner]\ntype = "asha"\nmin_resource = 1\nreduction_factor = 3\n\n'
        '[task]\nname = "rung_task:make_task"\nepochs = 9\n\n'  # rungs at 1 and 3
        '[space]\nlr = { type = "float", low = 1e-3, high = 1e-1, log = true }\n'
        'batch_size = { type = "categorical", choices = [32] }\n'
    )
    sys.path.insert(0, str(tmp_path))
    try:
        create_study(open_storage(url), load_config(tmp_path / "rung.toml"))
    finally:
        sys.path.remove(str(tmp_path))
    worker = WorkerProcess(url, study_name, tmp_path, grace_s=60, name="w")
    try:
        wait_for(lambda: (tmp_path / "at_rung").exists(), 120, "the trial at its rung", [worker])
        away = threading.Thread(target=restart, kwargs={"down_s": 5.0})
        away.start()
        dsn = url.replace("postgresql+psycopg://", "postgresql://")

        def refused() -> bool:
            try:
                psycopg.connect(dsn, connect_timeout=1).close()
            except psycopg.OperationalError:
                return True
            return False

        wait_for(refused, 30, "the database to go away", [worker])
        (tmp_path / "released").touch()  # the rung is decided now, with the database away
        away.join()
        assert worker.wait(180) == 0, worker.log()[-3000:]
    finally:
        worker.kill()
    log = worker.log()
    assert "database unreachable" in log, log[-3000:]
    (trial,) = optuna.load_study(study_name=study_name, storage=url).trials
    assert trial.state.name == "COMPLETE", (trial.system_attrs.get("fail_reason"), log[-3000:])
    assert sorted(trial.intermediate_values) == list(range(1, 10))  # trained on past the rung
