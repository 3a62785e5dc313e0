"""Pruning through hpsearch's light study view decides exactly as Optuna does on its storage."""

from __future__ import annotations

import random

import optuna
import pytest
import sqlalchemy as sa

from search.db.storage import open_storage
from search.pruning.pruner import Pruner
from search.study.parse_config import parse_config
from search.study.studies import create_study
from search.worker.loop import Worker
from tests.helpers.objectives import curve


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


def test_a_worker_stops_a_poor_trial_at_its_first_rung(storage_url: str, study_name: str) -> None:
    """In a worker, decisions come from a view refreshed in the background and rung values
    are written in the background too: a trial worse than every other still stops at the first
    rung of its Hyperband bracket, and every pruned trial stopped at a rung."""
    from search.pruning.pruners import HyperbandPruner, rung_steps

    config = parse_config(
        {
            "study": {"name": study_name, "n_trials": 36, "sampler": "random"},
            "pruner": {"type": "hyperband", "min_resource": 1, "reduction_factor": 3},
            "task": {"name": "digits", "epochs": 9},
            "space": {"x": {"type": "float", "low": 0.5, "high": 1.0}},
        }
    )
    storage = open_storage(storage_url, create=True)
    ref, _ = create_study(storage, config)

    def poor_late_trials(run):  # trials 24 and later score a hundredth of the others
        if run.number >= 24:
            run.params["x"] = 0.001
        return curve(run)

    Worker(storage, ref, run_trial=poor_late_trials, grace_s=5, progress=False).run()

    study = optuna.load_study(study_name=study_name, storage=storage_url)
    brackets = HyperbandPruner(min_resource=1, max_resource=9, reduction_factor=3)
    first_rung = {0: 1, 1: 3, 2: 9}  # min_resource * 3 ** bracket
    stopped = 0
    for trial in study.get_trials(deepcopy=False):
        last = max(trial.intermediate_values)
        if trial.state.name == "PRUNED":
            assert last in rung_steps(config.pruner, 9), (trial.number, last)
        bracket = brackets.bracket_of(study, trial.number)
        if trial.number >= 24 and first_rung[bracket] < 9:
            assert trial.state.name == "PRUNED" and last == first_rung[bracket], (
                trial.number,
                bracket,
                trial.state,
                last,
            )
            stopped += 1
    assert stopped >= 2
