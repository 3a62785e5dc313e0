"""Pruning through hpsearch's light study view decides exactly as Optuna does on its storage."""

from __future__ import annotations

import random

import optuna
import pytest
import sqlalchemy as sa

from search.config import parse_config
from search.pruning_view import Pruner
from search.storage import open_storage
from search.study import create_study
from search.worker import Worker
from tests.search.objectives import curve


@pytest.mark.parametrize(
    "pruner",
    [
        {"type": "hyperband", "min_resource": 1, "reduction_factor": 3},
        {"type": "successive_halving", "min_resource": 1, "reduction_factor": 2},
        {"type": "median", "n_startup_trials": 3, "n_warmup_steps": 1},
    ],
    ids=lambda p: p["type"],
)
def test_decisions_match_optuna(storage_url: str, study_name: str, pruner: dict) -> None:
    config = parse_config(
        {
            "study": {"name": study_name, "n_trials": 24, "sampler": "random"},
            "pruner": pruner,
            "task": {"name": "digits", "epochs": 9},
            "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}},
        }
    )
    storage = open_storage(storage_url, create=True)
    ref, _ = create_study(storage, config)
    # A history of finished trials, written by a real worker...
    Worker(storage, ref, run_trial=curve, grace_s=5, progress=False).run()

    # ...then new running trials, judged epoch by epoch by both.
    # Optuna's own pruner, built here rather than by hpsearch, on Optuna's own storage.
    reference = {
        "hyperband": lambda: optuna.pruners.HyperbandPruner(
            min_resource=1, max_resource=9, reduction_factor=3
        ),
        "successive_halving": lambda: optuna.pruners.SuccessiveHalvingPruner(
            min_resource=1, reduction_factor=2
        ),
        "median": lambda: optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=1),
    }[pruner["type"]]()
    plain = optuna.load_study(study_name=study_name, storage=storage_url, pruner=reference)
    ours = Pruner(open_storage(storage_url), ref)
    rng = random.Random(0)
    decisions = []
    for _ in range(8):
        trial = plain.ask()
        quality = rng.random()
        values: dict[int, float] = {}
        for epoch in range(1, 9):
            values[epoch] = quality * epoch / 9
            trial.report(values[epoch], epoch)
            before = _attr_keys(storage_url, trial._trial_id)
            mine = ours.should_prune(trial._trial_id, values)
            _drop_attrs_except(storage_url, trial._trial_id, before)  # undo our rung writes
            theirs = plain.pruner.prune(plain, plain._storage.get_trial(trial._trial_id))
            assert mine == theirs, (trial.number, epoch, values)
            decisions.append(theirs)
            if theirs:
                plain.tell(trial, state=optuna.trial.TrialState.PRUNED)
                break
        else:
            plain.tell(trial, values[8])
    assert any(decisions) and not all(decisions)  # the comparison covered both outcomes


def _attr_keys(url: str, trial_id: int) -> set[str]:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        keys = {
            r[0]
            for r in conn.execute(
                sa.text("SELECT key FROM trial_system_attributes WHERE trial_id = :t"),
                {"t": trial_id},
            )
        }
    engine.dispose()
    return keys


def _drop_attrs_except(url: str, trial_id: int, keep: set[str]) -> None:
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        for (key,) in conn.execute(
            sa.text("SELECT key FROM trial_system_attributes WHERE trial_id = :t"), {"t": trial_id}
        ).all():
            if key not in keep:
                conn.execute(
                    sa.text("DELETE FROM trial_system_attributes WHERE trial_id = :t AND key = :k"),
                    {"t": trial_id, "k": key},
                )
    engine.dispose()
