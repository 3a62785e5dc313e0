"""Dispatch on real databases: exactly n_trials, no duplicates, leases fence stale workers."""

from __future__ import annotations

from collections import Counter
from typing import Any

import optuna
import pytest

from search.config import ConfigError, parse_config
from search.dispatch import LeaseLost, Queue
from search.storage import open_storage
from search.study import create_study
from search.worker import Worker
from tests.search.objectives import curve, join_all, start_workers


def make_config(name: str, **study: Any) -> Any:
    return parse_config(
        {
            "study": {"name": name, "n_trials": 12, "sampler": "random", **study},
            "pruner": {"type": "hyperband", "min_resource": 1, "reduction_factor": 3},
            "task": {"name": "digits", "epochs": 9},
            "space": {
                "x": {"type": "float", "low": 0.0, "high": 1.0},
                "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
                "width": {"type": "categorical", "choices": [8, 16, 32]},
            },
        }
    )


def test_workers_finish_exactly_n_trials(storage_url: str, study_name: str) -> None:
    storage = open_storage(storage_url, create=True)
    config = make_config(study_name, n_trials=30)
    create_study(storage, config)
    codes = join_all(start_workers(storage_url, study_name, 4))
    assert codes == [0, 0, 0, 0]

    study = optuna.load_study(study_name=study_name, storage=storage_url)
    trials = study.get_trials(deepcopy=False)
    assert sorted(t.number for t in trials) == list(range(30))  # no overshoot, no gaps
    states = Counter(t.state.name for t in trials)
    assert set(states) <= {"COMPLETE", "PRUNED"} and sum(states.values()) == 30
    # Independent draws: random params never repeat across workers and sampling processes.
    assert len({t.params["lr"] for t in trials}) == 30
    # Hyperband stopped some trials early, and those trials carry their last value.
    pruned = [t for t in trials if t.state.name == "PRUNED"]
    assert pruned and all(max(t.intermediate_values) < 9 for t in pruned)
    assert all(t.value == t.intermediate_values[max(t.intermediate_values)] for t in pruned)
    # Plain Optuna sees the metric name and the best trial.
    assert study.metric_names == ["val_accuracy"]
    assert study.best_trial.state.name == "COMPLETE"


def test_create_is_idempotent_and_refuses_another_config(storage_url: str, study_name: str) -> None:
    storage = open_storage(storage_url, create=True)
    first, created = create_study(storage, make_config(study_name))
    again, created_again = create_study(storage, make_config(study_name))
    assert created and not created_again and again.study_id == first.study_id
    with pytest.raises(
        ConfigError, match=r"already exists with a different config \(study\.n_trials: 12 -> 13\)"
    ):
        create_study(storage, make_config(study_name, n_trials=13))


def test_enqueued_trials_are_run_with_their_fixed_params(storage_url: str, study_name: str) -> None:
    storage = open_storage(storage_url, create=True)
    ref, _ = create_study(storage, make_config(study_name, n_trials=3))
    study = optuna.load_study(study_name=study_name, storage=storage_url)
    assert [t.state.name for t in study.trials] == ["WAITING"] * 3  # queued by `create`
    study.enqueue_trial({"x": 0.25, "width": 16})  # plain Optuna API, partial params
    Worker(storage, ref, run_trial=curve, grace_s=5, progress=False).run()
    trials = study.get_trials(deepcopy=False)
    assert len(trials) == 4 and all(t.state.is_finished() for t in trials)
    enqueued = trials[3]
    assert enqueued.params["x"] == 0.25 and enqueued.params["width"] == 16
    assert 1e-4 <= enqueued.params["lr"] <= 1e-1  # the missing one was sampled


def test_a_stale_lease_cannot_write(storage_url: str, study_name: str) -> None:
    storage = open_storage(storage_url, create=True)
    ref, _ = create_study(storage, make_config(study_name, n_trials=1))
    old = Queue(storage, ref.study_id, f"old-{study_name}")
    new = Queue(storage, ref.study_id, f"new-{study_name}")
    for q in (old, new):
        q.register(hostname="h", pid=1, device="cpu", grace_s=0.05)
    trial_id, _ = old.create_trial()
    old.enqueue_sampled(trial_id)
    claim = old.claim()
    assert claim is not None and claim.generation == 1
    old.report(claim, {1: 0.5})

    import time

    time.sleep(0.2)  # "old" misses its heartbeats
    new.heartbeat(None)
    assert [n for n, _ in new.reap()] == [claim.number]
    taken = new.claim()
    assert taken is not None and taken.trial_id == claim.trial_id and taken.generation == 2

    with pytest.raises(LeaseLost):
        old.report(claim, {2: 0.9})
    with pytest.raises(LeaseLost):
        old.finish(claim, "COMPLETE", 0.9, {})
    assert not old.heartbeat(claim)
    new.report(taken, {2: 0.6})
    new.finish(taken, "COMPLETE", 0.6, {"who": "new"})
    trial = optuna.load_study(study_name=study_name, storage=storage_url).trials[0]
    assert trial.state.name == "COMPLETE" and trial.value == 0.6
    assert trial.intermediate_values == {1: 0.5, 2: 0.6}  # the old worker's epoch 1 stays
    assert trial.user_attrs == {"who": "new"}
