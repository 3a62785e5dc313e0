"""Now and then a trial of a TPE + ASHA study is a hedge: drawn at random, first judged at the
third rung, the gap to the next one growing while hedges lose. Which studies hedge, which
trials, and what real workers do with them."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import optuna
import pytest

from search.db import pauses
from search.db.claims import claim_next_trial
from search.db.enqueued import HEDGE_ATTR, replace_next_queued, trial_attr
from search.db.storage import open_storage
from search.sampling.enqueue import enqueue_configured
from search.sampling.hedge import describe, is_next_hedge, study_hedge_level
from search.sampling.sample_ahead import queue_first_trials
from search.sampling.samplers import make_sampler
from search.study.studies import create_study, open_study
from search.worker.loop import Worker
from search.worker.trial import TrialOutcome, TrialRun
from tests.helpers.configs import hedge_config


def test_which_studies_hedge_and_at_which_rung() -> None:
    assert study_hedge_level(hedge_config("s")) == 9  # rungs 1, 3, 9, 27 below 28 epochs
    assert study_hedge_level(hedge_config("s", epochs=50)) == 9
    # No rung above the third: no hedge (digits' 27 epochs: rungs 1, 3, 9).
    assert study_hedge_level(hedge_config("s", epochs=27)) is None
    # Random search needs none; Hyperband's brackets already start higher.
    assert study_hedge_level(hedge_config("s", sampler="random")) is None
    assert study_hedge_level(hedge_config("s", pruner="hyperband")) is None
    assert "first judged at epoch 9" in describe(9)


def hedges_when(judged: Callable[[int], bool | None], until: int) -> list[int]:
    """The hedged trial numbers below `until` when each hedge's outcome, by the time later
    trials are sampled, is `judged(number)`."""
    hedges: list[int] = []
    for n in range(until):
        if is_next_hedge(n, [(h, judged(h)) for h in reversed(hedges)]):
            hedges.append(n)
    return hedges


def test_the_gap_doubles_while_hedges_lose_and_is_ten_again_after_one_wins() -> None:
    assert hedges_when(lambda h: False, 200) == [9, 29, 69, 109, 149, 189]
    assert hedges_when(lambda h: True, 60) == [9, 19, 29, 39, 49, 59]
    # Trial 29's hedge wins: the next one comes 10 trials later, then the gap grows again.
    assert hedges_when(lambda h: h == 29, 130) == [9, 29, 39, 59, 99]
    # A hedge not judged yet (training towards its rung, or handed back by a dead machine)
    # counts neither way: the gap is the one its predecessors set.
    assert hedges_when(lambda h: None, 40) == [9, 19, 29, 39]
    assert hedges_when(lambda h: None if h == 29 else False, 120) == [9, 29, 49, 89]
    assert hedges_when(lambda h: None if h == 9 else False, 80) == [9, 19, 39, 79]


def test_a_hedge_is_drawn_at_random_the_others_by_tpe() -> None:
    c = hedge_config("s")
    assert isinstance(make_sampler(c, 19, hedge=True), optuna.samplers.RandomSampler)
    assert not isinstance(make_sampler(c, 19), optuna.samplers.RandomSampler)


def curve(storage_url: str, hedge_value: float) -> Callable[[TrialRun], TrialOutcome]:
    """A learning curve that ranks trials alike at every epoch (the rung rule keeps rung 1);
    a hedge (read from its trial, as a user's code could) reports `hedge_value` throughout:
    0.0 loses at every rung, 1.0 wins."""
    storage = open_storage(storage_url)

    def run(run: TrialRun) -> TrialOutcome:
        hedge = trial_attr(storage, run.trial_id, HEDGE_ATTR) is not None
        value = None
        for epoch in range(max(run.reported, default=0) + 1, run.config.task.epochs + 1):
            value = hedge_value if hedge else 0.1 + 0.8 * run.params["x"] * epoch / 28
            if run.report(epoch, value):
                return TrialOutcome(status="pruned", value=value)
        return TrialOutcome(status="completed", value=value)

    return run


def run_study(storage_url: str, cfg: Any, hedge_value: float = 0.0) -> dict[int, Any]:
    """Run a study to its end with one real worker; per trial number: its first recorded
    rung, whether it is a hedge and its params."""
    storage = open_storage(storage_url, create=True)
    try:
        ref, _ = create_study(storage, cfg)
        enqueue_configured(storage, ref)  # [[study.enqueue]], if any: the first trials
        name = cfg.study.name
        worker = Worker(
            storage,
            open_study(storage, name),
            run_trial=curve(storage_url, hedge_value),
            grace_s=5.0,
            progress=False,
        )
        assert worker.run() == 0
        first: dict[int, int] = {}
        for row in pauses.rung_rows(storage, ref.study_id):
            first[row.trial_id] = min(first.get(row.trial_id, row.level), row.level)
    finally:
        storage.close()
    trials = optuna.load_study(study_name=name, storage=storage_url).get_trials()
    return {
        t.number: (first.get(t._trial_id), HEDGE_ATTR in t.system_attrs, t.params) for t in trials
    }


def test_workers_space_out_hedges_that_lose_and_judge_them_first_at_the_third_rung(
    storage_url: str, study_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO):
        trials = run_study(storage_url, hedge_config(study_name, n_trials=120), hedge_value=0.0)
    hedges = [n for n, (_, hedge, _) in trials.items() if hedge]
    assert hedges == [9, 29, 69, 109]
    assert all(trials[n][0] == 9 for n in hedges)  # none paused at rung 1 or 3
    assert {level for n, (level, _, _) in trials.items() if n not in hedges} == {1}
    said = [r.getMessage() for r in caplog.records if "a hedge" in r.getMessage()]
    assert [s.split(":")[0] for s in said] == [f"trial {n}" for n in hedges]
    assert all("first judged at epoch 9" in s for s in said)


def test_hedges_that_win_come_every_ten_trials(storage_url: str, study_name: str) -> None:
    trials = run_study(storage_url, hedge_config(study_name, n_trials=40), hedge_value=1.0)
    assert [n for n, (_, hedge, _) in trials.items() if hedge] == [9, 19, 29, 39]


def test_enqueued_trials_are_never_hedges(
    storage_url: str, study_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Ten `[[study.enqueue]]` configurations are trials 0-9: each runs the params given and
    is judged at the first rung like any trial a user chose; the first hedge is the first
    trial sampled after them."""
    given = [{"x": round(0.05 * i + 0.02, 2), "lr": 0.001} for i in range(10)]
    with caplog.at_level(logging.INFO):
        trials = run_study(storage_url, hedge_config(study_name, enqueue=given))
    assert [trials[n][2] for n in range(10)] == given
    assert [n for n, (_, hedge, _) in trials.items() if hedge] == [10]
    assert trials[9][0] == 1 and trials[10][0] == 9
    started = [r.getMessage() for r in caplog.records if "starting" in r.getMessage()]
    assert [s.split(":")[0] for s in started if "a hedge" in s] == ["trial 10"]


def test_a_hedge_a_user_enqueues_into_is_no_longer_one(storage_url: str, study_name: str) -> None:
    """`hpsearch enqueue` on a running study gives the first queued trial its params: if that
    trial was sampled as a hedge, it is not one any more (its params were not drawn at random)."""
    storage = open_storage(storage_url, create=True)
    try:
        ref, _ = create_study(storage, hedge_config(study_name))
        queue_first_trials(storage, ref)  # TPE's ten start-up trials: 0-9, 9 a hedge
        study = optuna.load_study(study_name=study_name, storage=storage_url)
        trials = {t.number: t for t in study.get_trials()}
        assert [n for n, t in trials.items() if HEDGE_ATTR in t.system_attrs] == [9]
        dist = optuna.distributions.FloatDistribution(0.0, 1.0)
        for _ in range(9):  # trials 0-8 started: trial 9 is the first queued
            assert claim_next_trial(storage, ref.study_id, "w") is not None
        assert replace_next_queued(storage, ref.study_id, {"x": (0.5, dist)}) == 9
        assert trial_attr(storage, trials[9]._trial_id, HEDGE_ATTR) is None
    finally:
        storage.close()


def test_random_search_pauses_every_trial_at_the_first_rung(
    storage_url: str, study_name: str
) -> None:
    trials = run_study(storage_url, hedge_config(study_name, sampler="random"))
    assert len(trials) == 30 and {level for level, _, _ in trials.values()} == {1}
    assert not any(hedge for _, hedge, _ in trials.values())
