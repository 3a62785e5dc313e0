"""Budgets in epochs and hours, and promotion-based ASHA, through real workers and databases."""

from __future__ import annotations

import json
import logging
import math
import os
import random
import signal
import threading
import time
from collections import Counter
from typing import Any

import optuna
import pytest
import sqlalchemy as sa

from search.commands.cli import main as hpsearch
from search.db import budget, liveness, pauses
from search.db.storage import open_storage
from search.db.tables import trial_rungs
from search.pruning.promotion import Paused, RungTable
from search.sampling import sample_ahead
from search.study.studies import create_study, open_study
from search.worker.loop import Worker
from search.worker.trial import TrialOutcome, TrialRun
from tests.helpers.configs import ASHA_PRUNER, pruner_config
from tests.helpers.objectives import curve, join_all, start_workers
from tests.helpers.processes import query


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


@pytest.mark.slow
def test_asha_pauses_at_rungs_and_workers_resume_each_others_trials(
    storage_url: str, study_name: str
) -> None:
    storage = open_storage(storage_url, create=True)
    ref, _ = create_study(storage, pruner_config(study_name, ASHA_PRUNER, n_trials=24))
    assert join_all(start_workers(storage_url, study_name, 3, "early_best")) == [0, 0, 0]

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
    # The first trials are the best: the first at rung 1 paused there (nobody to beat) and
    # was promoted later; the best configuration is never left paused.
    assert trials[0].state.name == "COMPLETE" and len(trials[0].intermediate_values) == 9
    # Paused trials that were never promoted end PRUNED with their last value.
    for t in trials:
        if t.state.name == "PRUNED":
            assert t.value == t.intermediate_values[max(t.intermediate_values)]


def test_the_last_epochs_of_a_small_budget_finish_the_best_paused_trial(
    storage_url: str, study_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """9 epochs a trial, ASHA's rungs at 1 and 3: promotion alone trains a trial fully only
    after 18-21 epochs here (seven to nine trials at rung 1, three of them to rung 3, one on
    to 9), so a budget of 15 used to end with every trial pruned. The epochs once too few to
    train a new trial fully go to the paused trials instead, best first, and one is trained
    to the end."""
    storage = open_storage(storage_url, create=True)
    ref, _ = create_study(storage, pruner_config(study_name, ASHA_PRUNER, budget_epochs=15, seed=0))
    caplog.set_level(logging.INFO, logger="search")
    assert run_one_worker(storage_url, study_name) == 0
    # The log says which rule promoted them: ceil(n/eta) there, not the top 1/eta.
    drained = [r.getMessage() for r in caplog.records if "draining rule" in r.getMessage()]
    assert drained, "no promotion was logged as the draining rule's"
    assert all("top ceil(n/3)" in m and "cannot train a new trial fully" in m for m in drained)

    trials = optuna.load_study(study_name=study_name, storage=storage_url).get_trials()
    assert epochs_used(storage_url, ref.study_id) == 15
    assert {t.state.name for t in trials} <= {"COMPLETE", "PRUNED"}
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    assert complete, "no trial was trained fully within the budget"
    assert all(sorted(t.intermediate_values) == list(range(1, 10)) for t in complete)
    # The one trained fully was the best of those at the highest rung when it was promoted:
    # no trial that reached rung 3 is better than it (x is the ranking at every epoch).
    best = max(complete, key=lambda t: t.params["x"])
    at_rung_3 = [t for t in trials if 3 in t.intermediate_values]
    assert best.params["x"] == max(t.params["x"] for t in at_rung_3)


@pytest.mark.slow
def test_a_trial_paused_by_one_worker_is_resumed_by_another(
    storage_url: str, study_name: str
) -> None:
    storage = open_storage(storage_url, create=True)
    create_study(storage, pruner_config(study_name, ASHA_PRUNER, n_trials=9))

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


@pytest.mark.slow
@pytest.mark.parametrize("pruner", ["none", "hyperband", "asha"])
def test_eight_workers_train_exactly_the_epoch_budget_on_postgresql(
    pg_url: str, study_name: str, pruner: str
) -> None:
    settings = ASHA_PRUNER if pruner == "asha" else {"type": pruner}
    if pruner == "hyperband":
        settings = {"type": "hyperband", "min_resource": 1, "reduction_factor": 3}
    storage = open_storage(pg_url)
    ref, _ = create_study(storage, pruner_config(study_name, settings, budget_epochs=100))
    assert join_all(start_workers(pg_url, study_name, 8), timeout_s=180) == [0] * 8

    trials = optuna.load_study(study_name=study_name, storage=pg_url).get_trials()
    assert {t.state.name for t in trials} <= {"COMPLETE", "PRUNED"}  # none RUNNING/WAITING
    trained = sum(len(t.intermediate_values) for t in trials)
    assert epochs_used(pg_url, ref.study_id) == 100
    assert trained == 100  # no crash here: every counted epoch was trained and reported once
    # The dashboard's view of the budget (the study's user attributes), as the last worker to
    # leave wrote it.
    attrs = optuna.load_study(study_name=study_name, storage=pg_url).user_attrs
    assert attrs["budget"] == "100/100 epochs (0 left)"
    assert attrs.get("paused trials", 0) == 0
    cut = [t for t in trials if t.system_attrs.get("hpsearch:ended_by") == "budget"]
    for t in cut:
        assert t.state.name == "PRUNED"
        if t.intermediate_values:
            assert t.value == t.intermediate_values[max(t.intermediate_values)]


def test_a_budget_in_hours_ends_the_study_and_its_running_trial(
    storage_url: str, study_name: str
) -> None:
    storage = open_storage(storage_url, create=True)
    create_study(storage, pruner_config(study_name, {"type": "none"}, budget_hours=1.5 / 3600))

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
    create_study(storage, pruner_config(study_name, ASHA_PRUNER, n_trials=6, budget_epochs=12))
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
    create_study(storage, pruner_config(study_name, ASHA_PRUNER, budget_epochs=50))

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
    # optuna-dashboard shows the same on the study's page (Study User Attributes).
    attrs = optuna.load_study(study_name=study_name, storage=storage_url).user_attrs
    assert attrs == {"budget": "1/50 epochs (49 left)", "paused trials": 1}


@pytest.mark.parametrize("maximize", [True, False])
def test_the_database_promotes_what_the_rule_promotes(storage_url: str, maximize: bool) -> None:
    """`search.db.pauses` ranks in SQL; it must pick what `search.pruning.promotion` picks."""
    storage = open_storage(storage_url)
    rng = random.Random(7 if maximize else 8)
    study_id = rng.randrange(10**6, 10**7)  # rows of their own: no other study's
    table = RungTable(maximize=maximize)
    rows = []
    for trial_id in range(study_id, study_id + 60):
        bracket = rng.randrange(2)
        for level in (1, 3, 9)[: rng.randrange(1, 4)]:
            value = rng.choice([math.nan, round(rng.random(), 1)])  # ties and NaN too
            rows.append((trial_id, level, bracket, value, rng.random() < 0.5))
            table.record(trial_id, bracket, level, value)
    with storage.transaction() as conn:
        conn.execute(
            sa.insert(trial_rungs),
            [
                {
                    "trial_id": t,
                    "level": lvl,
                    "study_id": study_id,
                    "bracket": b,
                    "value": None if math.isnan(v) else v,
                    "paused": p,
                }
                for t, lvl, b, v, p in rows
            ],
        )
    paused = [Paused(t, b, lvl, v) for t, lvl, b, v, p in rows if p]
    for eta in (2, 3, 4):
        for draining in (False, True):
            want = table.next_to_resume(paused, reduction_factor=eta, draining=draining)
            got = pauses.next_promotable(
                storage, study_id, maximize=maximize, eta=eta, draining=draining
            )
            assert (got and got.trial_id, got and got.level) == (
                want and want.trial_id,
                want and want.level,
            ), (eta, draining)
    storage.close()


def test_hyperband_with_promotion_runs_brackets_of_asha(storage_url: str, study_name: str) -> None:
    storage = open_storage(storage_url, create=True)
    hyperband = {"type": "hyperband", "min_resource": 1, "reduction_factor": 3, "promotion": True}
    ref, _ = create_study(storage, pruner_config(study_name, hyperband, n_trials=30))
    assert run_one_worker(storage_url, study_name) == 0
    trials = optuna.load_study(study_name=study_name, storage=storage_url).get_trials()
    assert len(trials) == 30 and {t.state.name for t in trials} <= {"COMPLETE", "PRUNED"}
    rows = query(
        storage_url,
        f"SELECT bracket, min(level) FROM {ours(storage_url, 'trial_rungs')} "
        "WHERE study_id = :s GROUP BY bracket ORDER BY bracket",
        s=ref.study_id,
    )
    # 9 epochs, eta 3: brackets 0, 1, 2 pause first at 1, 3, 9 epochs... and bracket 2's
    # first rung would be 9 = task.epochs: its trials train fully, recording no rung.
    assert [tuple(r) for r in rows] == [(0, 1), (1, 3)]
    full = [t for t in trials if "hpsearch:paused_at" not in t.system_attrs]
    assert any(len(t.intermediate_values) == 9 for t in full)


def test_no_trial_sampled_ahead_outlives_a_study_whose_budget_ends(
    pg_url: str, study_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Trials sampled ahead in the background while the budget runs out are not left WAITING
    after the study's end (the race behind bench/efficiency/runner.py's leftover WAITING trials: the
    end-of-study cleanup ran before a sampler thread's insert)."""
    suggest = sample_ahead.suggest

    def slow_in_background(*args: Any) -> Any:
        if threading.current_thread().name == "sampler":
            time.sleep(0.5)  # TPE on a large study: the last trial ends meanwhile
        return suggest(*args)

    monkeypatch.setattr(sample_ahead, "suggest", slow_in_background)
    storage = open_storage(pg_url)
    ref, _ = create_study(
        storage, pruner_config(study_name, ASHA_PRUNER, sampler="tpe", budget_epochs=10)
    )
    assert run_one_worker(pg_url, study_name) == 0

    trials = optuna.load_study(study_name=study_name, storage=pg_url).get_trials()
    assert {t.state.name for t in trials} <= {"COMPLETE", "PRUNED"}, Counter(
        t.state.name for t in trials
    )
    assert epochs_used(pg_url, ref.study_id) == 10


@pytest.mark.parametrize("sampler", ["random", "tpe"])
def test_no_trial_is_sampled_once_the_epoch_budget_is_spent(
    storage_url: str, study_name: str, sampler: str
) -> None:
    """The insert itself checks the budget (another worker's cleanup may already be done)."""
    storage = open_storage(storage_url)
    ref, _ = create_study(
        storage, pruner_config(study_name, ASHA_PRUNER, sampler=sampler, budget_epochs=5)
    )
    before = len(optuna.load_study(study_name=study_name, storage=storage_url).get_trials())
    worker_id = f"w-{study_name}"
    top_up = sample_ahead.TrialSampler(storage, ref, worker_id).top_up
    liveness.register(storage, liveness.WorkerInfo(worker_id, ref.study_id, "h", 1, "cpu", 60.0))
    budget.ensure_counter(storage, ref.study_id)
    assert budget.reserve_epochs(storage, ref.study_id, 5, 4) == 4
    assert top_up(at_least=before + 2)  # budget left: trials are sampled ahead
    during = len(optuna.load_study(study_name=study_name, storage=storage_url).get_trials())
    assert during > before
    assert budget.reserve_epochs(storage, ref.study_id, 5, 1) == 1  # the last epoch: spent
    assert not top_up(at_least=during + 2)
    after = len(optuna.load_study(study_name=study_name, storage=storage_url).get_trials())
    assert after == during
    storage.close()
