"""Dispatch on real databases: exactly n_trials, no duplicates, leases fence stale workers."""

from __future__ import annotations

import time
from collections import Counter

import optuna
import pytest

from search.db import claims, fenced_writes, liveness, trial_rows
from search.db.leases import LeaseLost
from search.db.storage import open_storage
from search.sampling.sample_ahead import queue_first_trials
from search.study.settings import ConfigError
from search.study.studies import create_study
from search.worker.loop import Worker
from tests.helpers.configs import make_config
from tests.helpers.dispatch import claim_a_new_trial, register
from tests.helpers.objectives import curve, join_all, start_workers
from tests.helpers.processes import query


@pytest.mark.slow
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
        ConfigError,
        match=r'already exists with a different config \(study\.sampler: "random" -> "tpe"\)',
    ):
        create_study(storage, make_config(study_name, sampler="tpe"))
    # More trials is more budget, not another config: the same study goes on with it.
    more, created_more = create_study(storage, make_config(study_name, n_trials=13))
    assert not created_more and more.study_id == first.study_id
    assert more.config.study.n_trials == 13


def test_enqueued_trials_are_run_with_their_fixed_params(storage_url: str, study_name: str) -> None:
    storage = open_storage(storage_url, create=True)
    ref, _ = create_study(storage, make_config(study_name, n_trials=3))
    queue_first_trials(storage, ref)
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
    old, new = f"old-{study_name}", f"new-{study_name}"
    for worker in (old, new):
        register(storage, ref.study_id, worker, grace_s=0.05)
    claim = claim_a_new_trial(storage, ref.study_id, old)
    assert claim.generation == 1
    fenced_writes.report(storage, claim, {1: 0.5})

    time.sleep(0.2)  # "old" misses its heartbeats
    liveness.heartbeat(storage, new, None)
    assert [r.number for r in liveness.reap(storage, ref.study_id, 3)] == [claim.number]
    taken = claims.claim_next_trial(storage, ref.study_id, new)
    assert taken is not None and taken.trial_id == claim.trial_id and taken.generation == 2

    with pytest.raises(LeaseLost):
        fenced_writes.report(storage, claim, {2: 0.9})
    with pytest.raises(LeaseLost):
        fenced_writes.finish(storage, claim, "COMPLETE", 0.9, {})
    assert not liveness.heartbeat(storage, old, claim)
    fenced_writes.report(storage, taken, {2: 0.6})
    fenced_writes.finish(storage, taken, "COMPLETE", 0.6, {"who": "new"})
    trial = optuna.load_study(study_name=study_name, storage=storage_url).trials[0]
    assert trial.state.name == "COMPLETE" and trial.value == 0.6
    assert trial.intermediate_values == {1: 0.5, 2: 0.6}  # the old worker's epoch 1 stays
    assert trial.user_attrs == {"who": "new"}


def test_a_trial_claimed_after_its_sampler_was_reaped_is_not_queued_again_by_it(
    storage_url: str, study_name: str
) -> None:
    """A worker silent while it sampled a trial (grid, QMC) was declared dead; the trial was
    queued again and claimed. When the silent worker's sampling ends, the trial stays with
    its new holder: queued again, a third worker would train it alongside."""
    storage = open_storage(storage_url, create=True)
    ref, _ = create_study(storage, make_config(study_name, n_trials=2))
    sampler, other = f"sampler-{study_name}", f"other-{study_name}"
    register(storage, ref.study_id, sampler, grace_s=0.05)
    register(storage, ref.study_id, other, grace_s=60)
    trial_id, _ = trial_rows.create_trial(storage, ref.study_id, sampler)
    time.sleep(0.2)  # the sampling worker misses its heartbeats
    assert [r.number for r in liveness.reap(storage, ref.study_id, 3)] == [0]
    taken = claims.claim_next_trial(storage, ref.study_id, other)
    assert taken is not None and taken.trial_id == trial_id

    trial_rows.enqueue_sampled(storage, trial_id)  # the silent worker's sampling ends

    assert claims.claim_next_trial(storage, ref.study_id, f"third-{study_name}") is None
    assert liveness.heartbeat(storage, other, taken)  # still the holder's
    fenced_writes.finish(storage, taken, "COMPLETE", 0.5, {})
    trial = optuna.load_study(study_name=study_name, storage=storage_url).trials[0]
    assert trial.state.name == "COMPLETE" and trial.value == 0.5


@pytest.mark.slow
@pytest.mark.parametrize("sampler", ["tpe", "grid", "qmc"])
def test_every_sampler_feeds_several_workers_exactly_n_trials(
    storage_url: str, study_name: str, sampler: str
) -> None:
    # Samplers other than random go through Optuna's own Trial under the sampling lock.
    storage = open_storage(storage_url, create=True)
    ref, _ = create_study(storage, make_config(study_name, n_trials=10, sampler=sampler))
    queue_first_trials(storage, ref)
    assert join_all(start_workers(storage_url, study_name, 3)) == [0, 0, 0]

    # Numbers from the table itself: optuna.load_study would collapse two trials of one number.
    numbers = query(
        storage_url, "SELECT number FROM trials WHERE study_id = :s ORDER BY 1", s=ref.study_id
    )
    assert [n for (n,) in numbers] == list(range(10))
    trials = optuna.load_study(study_name=study_name, storage=storage_url).get_trials()
    assert all(t.state.name in ("COMPLETE", "PRUNED") for t in trials)
    points = {(t.params["x"], t.params["lr"], t.params["width"]) for t in trials}
    assert len(points) == 10  # no point sampled twice, however the workers interleaved
    if sampler == "grid":
        grid = ref.config.grid_values()
        assert all(t.params[name] in grid[name] for t in trials for name in grid)
