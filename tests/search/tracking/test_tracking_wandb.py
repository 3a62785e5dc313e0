"""Every trial one W&B run, offline (no network): the run files the workers write are read
back and hold each trial's params, curve, state and provenance; a preempted trial resumed by
another worker continues the same run id."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import optuna
import pytest

from search.commands.cli import main
from search.db.storage import open_storage
from search.study.studies import create_study
from search.tracking.wandb_tracker import wandb_run_id
from search.worker.loop import Worker
from tests.helpers.trackers import (
    EPOCHS,
    FAILING_TRIAL,
    FAILURE,
    run_study_with_a_preempted_trial,
    tracked_config,
)
from tests.helpers.wandb_files import offline_runs

pytestmark = pytest.mark.slow


def test_each_trial_is_one_offline_run_and_a_resumed_trial_keeps_its_id(
    pg_url: str, study_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    config = tracked_config(study_name, {"wandb": {"project": "hpsearch-test", "mode": "offline"}})
    storage = open_storage(pg_url)
    study, _ = create_study(storage, config)
    run_study_with_a_preempted_trial(storage, study)

    trials = optuna.load_study(study_name=study_name, storage=pg_url).trials
    files = defaultdict(list)  # run id -> its run files, oldest first
    for run in offline_runs(tmp_path, expect=len(trials) + 1):  # trial 0 in two parts
        files[run.run_id].append(run)
    assert set(files) == {wandb_run_id(study.uid, t.number) for t in trials}
    for trial in trials:
        parts = files[wandb_run_id(study.uid, trial.number)]
        last = parts[-1]
        assert all(p.group == study_name for p in parts)
        assert {k: last.config[k] for k in trial.params} == trial.params
        about = last.config["hpsearch"]
        assert about["study"] == study_name and about["trial_number"] == trial.number
        # The curve: every epoch once, at step = epoch, across the run's files.
        curve = [(step, row["val_accuracy"]) for p in parts for step, row in p.history.items()]
        assert sorted(curve) == sorted(trial.intermediate_values.items()), trial.number
        state = {"COMPLETE": "complete", "PRUNED": "pruned", "FAIL": "failed"}[trial.state.name]
        assert last.summary["state"] == state and state in last.tags
        if state == "failed":
            assert last.exit_code == 1 and last.summary["fail_reason"] == FAILURE
            continue  # a trial whose task raised has no provenance attributes
        assert last.exit_code == 0
        if state == "pruned":
            assert last.summary["pruned_at_epoch"] == max(trial.intermediate_values)
        for attr in ("hostname", "precision", "git_commit", "data_fingerprint"):
            assert about[attr] == str(trial.user_attrs[attr]), attr
    assert {t.state.name for t in trials} == {"COMPLETE", "PRUNED", "FAIL"}
    assert trials[FAILING_TRIAL].state.name == "FAIL"
    # Trial 0 was preempted at epoch 2 on one worker and finished on another: one run id,
    # written in two parts, the first marked preempting.
    first, second = files[wandb_run_id(study.uid, 0)]
    assert first.preempting and first.summary["state"].startswith("handed back")
    assert sorted(first.history) == [1, 2]
    assert sorted(second.history) == list(range(3, EPOCHS + 1))


def test_export_writes_each_trial_as_one_offline_run(
    pg_url: str, study_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    storage = open_storage(pg_url)
    study, _ = create_study(storage, tracked_config(study_name, {}, n_trials=4))
    assert Worker(storage, study, grace_s=5, progress=False).run() == 0
    assert offline_runs(tmp_path) == []  # no [tracking]: nothing written while it ran

    export = ["export", "--study", study_name, "--to", "wandb", "--storage", pg_url]
    assert main([*export, "--project", "hpsearch-test", "--mode", "offline"]) == 0
    assert "4 finished and 0 running trial(s) in wandb" in capsys.readouterr().out
    runs = {run.run_id: run for run in offline_runs(tmp_path, expect=4)}
    trials = optuna.load_study(study_name=study_name, storage=pg_url).trials
    assert set(runs) == {wandb_run_id(study.uid, t.number) for t in trials}
    for trial in trials:
        run = runs[wandb_run_id(study.uid, trial.number)]
        curve = {step: row["val_accuracy"] for step, row in run.history.items()}
        assert curve == trial.intermediate_values
        assert run.summary["state"] == trial.state.name.lower()
        assert run.config["hpsearch"]["git_commit"] == trial.user_attrs["git_commit"]


def test_asha_pauses_keep_runs_open_and_the_study_end_closes_them(
    pg_url: str, study_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_MODE", "offline")
    data = tracked_config(
        study_name, {"wandb": {"project": "hpsearch-test", "mode": "offline"}}, n_trials=6
    ).to_dict()
    data["pruner"] = {"type": "asha", "min_resource": 1, "reduction_factor": 3}
    storage = open_storage(pg_url)
    study, _ = create_study(storage, type(tracked_config(study_name, {})).from_dict(data))
    assert Worker(storage, study, grace_s=5, progress=False).run() == 0

    trials = optuna.load_study(study_name=study_name, storage=pg_url).trials
    assert {t.state.name for t in trials} <= {"COMPLETE", "PRUNED"}
    paused = [t for t in trials if "hpsearch:paused_at" in t.system_attrs]
    assert paused, "no trial paused at a rung"
    assert any("hpsearch:ended_by" in t.system_attrs for t in trials), "none ended paused"
    files = defaultdict(list)
    for run in offline_runs(tmp_path, expect=len(trials) + len(paused)):
        files[run.run_id].append(run)
    for trial in trials:
        parts = files[wandb_run_id(study.uid, trial.number)]
        # A paused trial's run is handed back, not ended; it ends as the trial does: after
        # its resume, or PRUNED when the study's end ended it where it paused.
        state = {"COMPLETE": "complete", "PRUNED": "pruned"}[trial.state.name]
        assert parts[-1].summary["state"] == state, trial.number
        if trial in paused:
            assert parts[0].summary["state"] == "handed back (paused)"
