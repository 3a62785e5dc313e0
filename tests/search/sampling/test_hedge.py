"""One trial in ten of a TPE + ASHA study is a hedge: drawn at random, first judged at the
third rung. Which studies hedge, and what real workers do with the hedged trials."""

from __future__ import annotations

import logging
from typing import Any

import optuna
import pytest

from search.db import pauses
from search.db.storage import open_storage
from search.sampling.enqueue import enqueue_configured
from search.sampling.hedge import describe, hedged, study_hedge_level
from search.sampling.samplers import make_sampler
from search.study.parse_config import parse_config
from search.study.studies import create_study, open_study
from search.worker.loop import Worker
from search.worker.trial import TrialOutcome, TrialRun


def config(
    name: str,
    *,
    sampler: str = "tpe",
    pruner: str = "asha",
    epochs: int = 28,
    enqueue: list[dict[str, float]] | None = None,
) -> Any:
    study = {"name": name, "sampler": sampler, "seed": 3, "n_trials": 30}
    return parse_config(
        {
            "study": {**study, **({"enqueue": enqueue} if enqueue else {})},
            "pruner": {"type": pruner, "min_resource": 1, "reduction_factor": 3},
            "task": {"name": "digits", "epochs": epochs},
            "space": {
                "x": {"type": "float", "low": 0.0, "high": 1.0},
                "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
            },
        }
    )


def test_which_studies_hedge_and_at_which_rung() -> None:
    assert [n for n in range(40) if hedged(n)] == [9, 19, 29, 39]
    assert study_hedge_level(config("s")) == 9  # rungs 1, 3, 9, 27 below 28 epochs
    assert study_hedge_level(config("s", epochs=50)) == 9
    # No rung above the third: no hedge (digits' 27 epochs: rungs 1, 3, 9).
    assert study_hedge_level(config("s", epochs=27)) is None
    # Random search needs none; Hyperband's brackets already start higher.
    assert study_hedge_level(config("s", sampler="random")) is None
    assert study_hedge_level(config("s", pruner="hyperband")) is None
    assert describe(config("s"), 8) is None
    assert "first judged at epoch 9" in (describe(config("s"), 9) or "")


def test_a_hedged_number_is_drawn_at_random_the_others_by_tpe() -> None:
    c = config("s")
    assert isinstance(make_sampler(c, 19), optuna.samplers.RandomSampler)
    assert not isinstance(make_sampler(c, 18), optuna.samplers.RandomSampler)
    assert not isinstance(make_sampler(c, 20), optuna.samplers.RandomSampler)


def rising(run: TrialRun) -> TrialOutcome:
    """A learning curve that ranks trials alike at every epoch (the rung rule keeps rung 1)."""
    value = None
    for epoch in range(max(run.reported, default=0) + 1, run.config.task.epochs + 1):
        value = run.params["x"] * epoch / run.config.task.epochs
        if run.report(epoch, value):
            return TrialOutcome(status="pruned", value=value)
    return TrialOutcome(status="completed", value=value)


def first_rungs(storage_url: str, cfg: Any) -> dict[int, int]:
    """Run a study to its end with one real worker; each trial's first recorded rung."""
    storage = open_storage(storage_url, create=True)
    try:
        ref, _ = create_study(storage, cfg)
        enqueue_configured(storage, ref)  # [[study.enqueue]], if any: the first trials
        name = cfg.study.name
        worker = Worker(
            storage, open_study(storage, name), run_trial=rising, grace_s=5.0, progress=False
        )
        assert worker.run() == 0
        first: dict[int, int] = {}
        for row in pauses.rung_rows(storage, ref.study_id):
            first[row.trial_id] = min(first.get(row.trial_id, row.level), row.level)
    finally:
        storage.close()
    trials = optuna.load_study(study_name=name, storage=storage_url).get_trials()
    number = {t._trial_id: t.number for t in trials}
    return {number[t]: level for t, level in first.items()}


def test_workers_judge_hedged_trials_first_at_the_third_rung(
    storage_url: str, study_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO):
        first = first_rungs(storage_url, config(study_name))
    assert {n: first[n] for n in (9, 19, 29)} == {9: 9, 19: 9, 29: 9}
    assert all(level == 1 for n, level in first.items() if n not in (9, 19, 29))
    said = [r.getMessage() for r in caplog.records if "a hedge" in r.getMessage()]
    assert len(said) == 3 and all("trial " in s and "first judged at epoch 9" in s for s in said)


def test_an_enqueued_trial_at_a_hedges_number_keeps_its_params_and_says_so(
    storage_url: str, study_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Ten `[[study.enqueue]]` configurations are trials 0-9: trial 9 runs the params given,
    is judged first at epoch 9 like any trial at a hedge's number, and its log line says its
    params were enqueued, not drawn at random."""
    given = [{"x": round(0.05 * i + 0.02, 2), "lr": 0.001} for i in range(10)]
    with caplog.at_level(logging.INFO):
        first = first_rungs(storage_url, config(study_name, enqueue=given))
    trials = optuna.load_study(study_name=study_name, storage=storage_url).get_trials()
    assert [t.params for t in trials[:10]] == given
    assert first[9] == 9 and first[19] == 9
    started = {
        n: m
        for r in caplog.records
        for n in (9, 19)
        if (m := r.getMessage()).startswith(f"trial {n}: starting")
    }
    assert "params enqueued at a hedge's number: first judged at epoch 9" in started[9]
    assert "drawn at random" not in started[9]
    assert "a hedge: drawn at random, first judged at epoch 9" in started[19]


def test_random_search_pauses_every_trial_at_the_first_rung(
    storage_url: str, study_name: str
) -> None:
    first = first_rungs(storage_url, config(study_name, sampler="random"))
    assert len(first) == 30 and set(first.values()) == {1}
