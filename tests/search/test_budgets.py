"""Budgets in epochs and hours, and promotion-based ASHA, through real workers and databases."""

from __future__ import annotations

import json
import os
import signal
from collections import Counter
from typing import Any

import optuna
import pytest

from search.commands.cli import main as hpsearch
from search.db.storage import open_storage
from search.study.config import parse_config
from search.study.studies import create_study, open_study
from search.worker.loop import Worker
from search.worker.trial_run import TrialOutcome, TrialRun
from tests.search.objectives import curve, join_all, start_workers
from tests.search.processes import query


def make_config(name: str, pruner: dict[str, Any], **study: Any) -> Any:
    return parse_config(
        {
            "study": {"name": name, "sampler": "random", **study},
            "pruner": pruner,
            "task": {"name": "digits", "epochs": 9},
            "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}},
        }
    )


ASHA = {"type": "asha", "min_resource": 1, "reduction_factor": 3}


def ours(url: str, table: str) -> str:
    return f"hpsearch.{table}" if url.startswith("postgresql") else table


def epochs_used(url: str, study_id: int) -> int:
    rows = query(
        url,
        f"SELECT epochs_used FROM {ours(url, 'study_budgets')} WHERE study_id = :s",
        s=study_id,
    )
    return rows[0][0] if rows else 0


def run_one_worker(url: str, name: str, run_trial: Any = None) -> int:
    storage = open_storage(url)
    worker = Worker(
        storage,
        open_study(storage, name),
        run_trial=run_trial or (lambda run: curve(run, 0.0)),
        grace_s=5.0,
        progress=False,
    )
    try:
        return worker.run()
    finally:
        storage.close()


def test_asha_pauses_at_rungs_and_workers_resume_each_others_trials(
    storage_url: str, study_name: str
) -> None:
    storage = open_storage(storage_url, create=True)
    ref, _ = create_study(storage, make_config(study_name, ASHA, n_trials=24))
    assert join_all(start_workers(storage_url, study_name, 3)) == [0, 0, 0]

    trials = optuna.load_study(study_name=study_name, storage=storage_url).get_trials()
    assert len(trials) == 24
    assert {t.state.name for t in trials} <= {"COMPLETE", "PRUNED"}  # none RUNNING/WAITING
    rungs = query(
        storage_url,
        f"SELECT trial_id, level, paused FROM {ours(storage_url, 'trial_rungs')} "
        "WHERE study_id = :s",
        s=ref.study_id,
    )
    assert not any(paused for _, _, paused in rungs)  # the study's end ended every pause
    levels = Counter(level for _, level, _ in rungs)
    assert levels[1] == 24 and 0 < levels[3] < 24
    paused_then_resumed = [
        t for t in trials if "hpsearch:paused_at" in t.system_attrs and t.state.name == "COMPLETE"
    ]
    assert paused_then_resumed, "no trial was resumed after a pause"
    # Resumed trials continued where they paused: every epoch reported once, in order.
    for t in trials:
        assert sorted(t.intermediate_values) == list(range(1, len(t.intermediate_values) + 1))
    # The score rises with x: the best configuration is never left paused.
    best_x = max(trials, key=lambda t: t.params["x"])
    assert best_x.state.name == "COMPLETE" and len(best_x.intermediate_values) == 9
    # Paused trials that were never promoted end PRUNED with their last value.
    for t in trials:
        if t.state.name == "PRUNED":
            assert t.value == t.intermediate_values[max(t.intermediate_values)]


def test_a_trial_paused_by_one_worker_is_resumed_by_another(
    storage_url: str, study_name: str
) -> None:
    storage = open_storage(storage_url, create=True)
    create_study(storage, make_config(study_name, ASHA, n_trials=9))

    def best_is_trial_0(run: TrialRun) -> TrialOutcome:
        run.params = {"x": 1.0 if run.number == 0 else 0.9 * run.params["x"]}
        return curve(run, 0.0)

    def first_worker(run: TrialRun) -> TrialOutcome:
        outcome = best_is_trial_0(run)
        assert run.stop_reason == "paused"  # the first trial at a rung has nobody to beat
        os.kill(os.getpid(), signal.SIGTERM)  # this worker leaves, as at a spot notice
        return outcome

    assert run_one_worker(storage_url, study_name, first_worker) == 0
    trial = optuna.load_study(study_name=study_name, storage=storage_url).trials[0]
    assert trial.state.name == "WAITING" and trial.system_attrs["hpsearch:paused_at"] == 1
    paused_by = trial.system_attrs["hpsearch:handed_back_by"]

    assert run_one_worker(storage_url, study_name, best_is_trial_0) == 0
    trials = optuna.load_study(study_name=study_name, storage=storage_url).trials
    assert {t.state.name for t in trials} <= {"COMPLETE", "PRUNED"}
    trial = trials[0]
    assert trial.state.name == "COMPLETE" and trial.value == 1.0
    assert trial.user_attrs["worker_id"] != paused_by  # resumed, and finished, elsewhere
    assert sorted(trial.intermediate_values) == list(range(1, 10))


@pytest.mark.parametrize("pruner", ["none", "hyperband", "asha"])
def test_eight_workers_train_exactly_the_epoch_budget_on_postgresql(
    pg_url: str, study_name: str, pruner: str
) -> None:
    settings = ASHA if pruner == "asha" else {"type": pruner}
    if pruner == "hyperband":
        settings = {"type": "hyperband", "min_resource": 1, "reduction_factor": 3}
    storage = open_storage(pg_url)
    ref, _ = create_study(storage, make_config(study_name, settings, budget_epochs=100))
    assert join_all(start_workers(pg_url, study_name, 8), timeout_s=180) == [0] * 8

    trials = optuna.load_study(study_name=study_name, storage=pg_url).get_trials()
    assert {t.state.name for t in trials} <= {"COMPLETE", "PRUNED"}  # none RUNNING/WAITING
    trained = sum(len(t.intermediate_values) for t in trials)
    assert epochs_used(pg_url, ref.study_id) == 100
    assert trained == 100  # no crash here: every counted epoch was trained and reported once
    cut = [t for t in trials if t.system_attrs.get("hpsearch:ended_by") == "budget"]
    for t in cut:
        assert t.state.name == "PRUNED"
        if t.intermediate_values:
            assert t.value == t.intermediate_values[max(t.intermediate_values)]


def test_a_budget_in_hours_ends_the_study_and_its_running_trial(
    storage_url: str, study_name: str
) -> None:
    storage = open_storage(storage_url, create=True)
    create_study(storage, make_config(study_name, {"type": "none"}, budget_hours=1.5 / 3600))

    def slow(run: TrialRun) -> TrialOutcome:
        return curve(run, 0.25)

    assert run_one_worker(storage_url, study_name, slow) == 0
    trials = optuna.load_study(study_name=study_name, storage=storage_url).get_trials()
    assert {t.state.name for t in trials} == {"PRUNED"}  # 9 epochs of 0.25 s never fit in 1.5 s
    started = [t for t in trials if t.intermediate_values]
    assert len(started) == 1
    assert started[0].system_attrs["hpsearch:ended_by"] == "budget"
    assert started[0].value == started[0].intermediate_values[max(started[0].intermediate_values)]
    assert max(started[0].intermediate_values) < 9


def test_a_run_trial_function_sees_why_it_was_stopped(storage_url: str, study_name: str) -> None:
    storage = open_storage(storage_url, create=True)
    create_study(storage, make_config(study_name, ASHA, n_trials=6, budget_epochs=12))
    seen: list[tuple[int, int, str | None]] = []

    def recording(run: TrialRun) -> TrialOutcome:
        outcome = curve(run, 0.0)
        seen.append((run.number, max(run.reported, default=0), run.stop_reason))
        return outcome

    assert run_one_worker(storage_url, study_name, recording) == 0
    reasons = {reason for _, _, reason in seen}
    assert "paused" in reasons
    assert epochs_used(storage_url, open_study(storage, study_name).study_id) <= 12


def test_status_shows_paused_trials_and_the_budget_used_and_left(
    storage_url: str, study_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    storage = open_storage(storage_url, create=True)
    create_study(storage, make_config(study_name, ASHA, budget_epochs=50))

    def pause_then_leave(run: TrialRun) -> TrialOutcome:
        outcome = curve(run, 0.0)
        if run.stop_reason == "paused":
            os.kill(os.getpid(), signal.SIGTERM)
        return outcome

    assert run_one_worker(storage_url, study_name, pause_then_leave) == 0
    capsys.readouterr()
    assert hpsearch(["status", "--study", study_name, "--storage", storage_url, "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["paused"] == 1 and status["running"] == 0  # queued trials are "waiting"
    assert status["n_trials"] is None
    assert status["budget"] == {"epochs": {"budget": 50, "used": 1, "left": 49}}
    assert hpsearch(["status", "--study", study_name, "--storage", storage_url]) == 0
    text = capsys.readouterr().out
    assert "paused 1" in text and "budget: 1/50 epochs (49 left)" in text
    assert f"study {study_name}: 0 finished" in text
