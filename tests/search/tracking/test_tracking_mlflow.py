"""Every trial one MLflow run, against a real `mlflow server` (PostgreSQL backend store):
curves, states, provenance, a preempted trial resumed in its own run, the server stopped
mid-study, and `hpsearch export` after the fact (idempotent)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import optuna
import pytest
from mlflow.tracking import MlflowClient

from search.commands.cli import main
from search.db.storage import open_storage
from search.study.studies import create_study
from search.worker import tracked
from search.worker.loop import Worker
from search.worker.training import run_training
from tests.helpers.trackers import (
    EPOCHS,
    FAILING_TRIAL,
    FAILURE,
    MlflowServer,
    forget_quick_fail,
    mlflow_server_fixture,
    run_study_with_a_preempted_trial,
    tracked_config,
)

pytestmark = pytest.mark.slow

STATUS = {"COMPLETE": "FINISHED", "PRUNED": "KILLED", "FAIL": "FAILED"}


@pytest.fixture(scope="module")
def mlflow_server() -> Iterator[MlflowServer]:
    yield from mlflow_server_fixture()


@pytest.fixture(autouse=True)
def _no_quick_fail_left() -> Iterator[None]:
    yield
    forget_quick_fail()


def trial_runs(client: MlflowClient, experiment: str) -> dict[int, object]:
    """The experiment's trial runs by trial number (each number at most once, or it fails)."""
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None, f"no experiment {experiment!r}"
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    by_number: dict[int, object] = {}
    for run in runs:
        if "hpsearch.trial_key" in run.data.tags:
            number = int(run.data.tags["hpsearch.trial_number"])
            assert number not in by_number, f"trial {number} has two runs"
            by_number[number] = run
    return by_number


def check_runs_match_the_study(
    client: MlflowClient, url: str, study_name: str, experiment: str
) -> None:
    study = optuna.load_study(study_name=study_name, storage=url)
    runs = trial_runs(client, experiment)
    assert sorted(runs) == sorted(t.number for t in study.trials)
    parents = [
        r
        for r in client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
        if "hpsearch.study_key" in r.data.tags
    ]
    assert len(parents) == 1 and parents[0].info.run_name == f"study {study_name}"
    for trial in study.trials:
        run = runs[trial.number]
        assert run.data.tags["mlflow.parentRunId"] == parents[0].info.run_id
        assert run.info.status == STATUS[trial.state.name], trial.number
        assert run.data.tags["hpsearch.state"] == trial.state.name.lower().replace("fail", "failed")
        assert run.data.params == {k: str(v) for k, v in trial.params.items()}
        history = client.get_metric_history(run.info.run_id, "val_accuracy")
        # Every epoch's value once, at step = epoch: the curve the study recorded.
        assert sorted((m.step, m.value) for m in history) == sorted(
            trial.intermediate_values.items()
        ), trial.number
        if trial.state.name == "PRUNED":
            assert run.data.tags["hpsearch.pruned_at_epoch"] == str(max(trial.intermediate_values))
        if trial.state.name == "FAIL":
            assert run.data.tags["hpsearch.fail_reason"] == trial.system_attrs["fail_reason"]
            continue  # a trial whose task raised has no provenance attributes
        for attr in ("hostname", "precision", "git_commit", "data_fingerprint", "torch_version"):
            assert run.data.tags[f"hpsearch.{attr}"] == str(trial.user_attrs[attr]), attr
        assert run.data.tags["hpsearch.hpsearch_version"]


def test_each_trial_is_one_run_and_a_resumed_trial_continues_its_run(
    mlflow_server: MlflowServer, pg_url: str, study_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What is asserted is where each update lands, not how long a leaving worker waits: on a
    # loaded machine one call to the server can outlast FLUSH_S (10 s without an update
    # getting through), and the worker would leave the trials' ends unsent.
    monkeypatch.setattr(tracked, "FLUSH_S", 60.0)
    config = tracked_config(study_name, {"mlflow": {"uri": mlflow_server.uri}})
    storage = open_storage(pg_url)
    study, _ = create_study(storage, config)
    run_study_with_a_preempted_trial(storage, study)

    trials = optuna.load_study(study_name=study_name, storage=pg_url).trials
    states = {t.state.name for t in trials}
    assert states == {"COMPLETE", "PRUNED", "FAIL"}, "the study should prune some trials"
    assert trials[FAILING_TRIAL].system_attrs["fail_reason"] == FAILURE
    resumed = trials[0]
    assert resumed.user_attrs["resumed_from"]["epoch"] >= 2  # from its checkpoint
    client = MlflowClient(mlflow_server.uri)
    check_runs_match_the_study(client, pg_url, study_name, study_name)
    run = trial_runs(client, study_name)[0]
    # Two workers, one run: the second continued the first's, from epoch 3 on.
    assert json.loads(run.data.tags["hpsearch.resumed_from"])["epoch"] >= 2
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "val_accuracy")]
    assert sorted(steps) == list(range(1, EPOCHS + 1))


def test_a_tracker_stopped_mid_study_fails_no_trial_then_export_writes_the_rest(
    mlflow_server: MlflowServer,
    pg_url: str,
    study_name: str,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    experiment = f"{study_name}-exp"
    config = tracked_config(
        study_name, {"mlflow": {"uri": mlflow_server.uri, "experiment": experiment}}, n_trials=5
    )
    storage = open_storage(pg_url)
    study, _ = create_study(storage, config)
    monkeypatch.setattr(tracked, "FLUSH_S", 2.0)  # the leaving worker's wait for the tracker

    def server_stops_at_trial_2(run):
        if run.number == 2:
            mlflow_server.stop()
        return run_training(run)

    try:
        with caplog.at_level(logging.INFO):
            code = Worker(
                storage, study, run_trial=server_stops_at_trial_2, grace_s=5, progress=False
            ).run()
    finally:
        forget_quick_fail()
        mlflow_server.start()
    assert code == 0
    trials = optuna.load_study(study_name=study_name, storage=pg_url).trials
    assert len(trials) == 5 and {t.state.name for t in trials} <= {"COMPLETE", "PRUNED"}
    log = [r.getMessage() for r in caplog.records if r.name == "search.tracking"]
    unreachable = [m for m in log if "training goes on" in m]
    unsent = [m for m in log if "could not be sent" in m]
    assert len(unreachable) == 1, log  # said once, not once per update
    assert len(unsent) == 1, log
    assert f"hpsearch export --study {study_name} --to mlflow" in unsent[0]

    client = MlflowClient(mlflow_server.uri)
    # What got through before the server stopped (the sender is asynchronous: on a fast
    # machine nothing may have, not even the experiment).
    if client.get_experiment_by_name(experiment) is not None:
        assert set(trial_runs(client, experiment)) <= {0, 1, 2}

    # After the fact: export writes every trial, in the same runs; a second export adds nothing.
    export = ["export", "--study", study_name, "--to", "mlflow", "--storage", pg_url]
    assert main(export) == 0
    assert "5 finished and 0 running trial(s) in mlflow" in capsys.readouterr().out
    check_runs_match_the_study(client, pg_url, study_name, experiment)
    before = _snapshot(client, experiment)
    assert main(export) == 0
    assert _snapshot(client, experiment) == before


def _snapshot(client: MlflowClient, experiment: str) -> list[tuple]:
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    return sorted(
        (
            r.info.run_id,
            r.info.status,
            r.info.end_time,
            tuple(sorted(r.data.params.items())),
            tuple(sorted(r.data.tags.items())),
            len(client.get_metric_history(r.info.run_id, "val_accuracy")),
        )
        for r in runs
    )
