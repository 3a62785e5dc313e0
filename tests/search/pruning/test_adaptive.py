"""ASHA retires a rung whose ranking the next rung contradicts: the statistic, the decision, and
the decision taken by real workers on a real study."""

from __future__ import annotations

import random
from typing import Any

import optuna
import pytest
import scipy.stats

from search.db import pauses
from search.db.storage import open_storage
from search.pruning.adaptive import RungSchedule, first_active_level, spearman
from search.study.parse_config import parse_config
from search.study.studies import create_study, open_study
from search.worker.loop import Worker
from search.worker.trial import TrialOutcome, TrialRun


@pytest.mark.filterwarnings("ignore::scipy.stats.ConstantInputWarning")
def test_spearman_matches_scipy_with_and_without_ties() -> None:
    rng = random.Random(0)
    for n in (2, 5, 13, 40):
        x = [rng.random() for _ in range(n)]
        y = [a + rng.gauss(0, 0.3) for a in x]
        assert spearman(x, y) == pytest.approx(scipy.stats.spearmanr(x, y).statistic)
        tied_x = [round(a, 1) for a in x]
        tied_y = [round(b, 1) for b in y]
        expected = scipy.stats.spearmanr(tied_x, tied_y).statistic
        got = spearman(tied_x, tied_y)
        assert (got != got and expected != expected) or got == pytest.approx(expected)


def rows(level: int, values: list[float], first_id: int = 0) -> list[tuple[int, int, float]]:
    return [(first_id + i, level, v) for i, v in enumerate(values)]


UP = [float(i) for i in range(10)]
DOWN = UP[::-1]


def test_a_rung_is_retired_when_and_only_when_the_next_rung_reverses_its_ranking() -> None:
    levels = [1, 3, 9]
    agree = rows(1, UP) + rows(3, [v + 0.5 for v in UP])
    assert first_active_level(levels, agree, maximize=True) == 1
    reversed_ = rows(1, UP) + rows(3, DOWN)
    assert first_active_level(levels, reversed_, maximize=True) == 3
    # One pair short of min_pairs: not trusted yet, kept.
    assert first_active_level(levels, rows(1, UP[:9]) + rows(3, DOWN[:9]), maximize=True) == 1
    # Minimizing: lower is better at both rungs, so the same reversal still misleads...
    assert first_active_level(levels, reversed_, maximize=False) == 3
    # ... and the same order at both rungs still agrees.
    assert first_active_level(levels, agree, maximize=False) == 1


def test_retiring_goes_on_up_but_never_past_the_last_rung() -> None:
    levels = [1, 3, 9]
    both = rows(1, UP) + rows(3, DOWN) + rows(9, UP)  # 1 vs 3 reversed, 3 vs 9 reversed
    assert first_active_level(levels, both, maximize=True) == 9
    assert first_active_level([9], rows(9, UP), maximize=True) == 9
    assert first_active_level([], [], maximize=True) is None


def test_the_decision_is_taken_on_the_first_trials_that_reached_both_rungs() -> None:
    levels = [1, 3, 9]
    first = rows(1, UP) + rows(3, DOWN)
    later = rows(1, UP, first_id=100) + rows(3, UP, first_id=100)  # agreeing, but later
    assert first_active_level(levels, first + later, maximize=True) == 3
    schedule = RungSchedule(levels, maximize=True)
    assert schedule.update(rows(1, UP[:5]) + rows(3, DOWN[:5])) == 1 and not schedule.settled
    assert schedule.update(first) == 3 and not schedule.settled  # 3 vs 9 not judged yet
    assert schedule.pauses_at(9) and not schedule.pauses_at(1) and not schedule.pauses_at(2)
    agree_up = first + rows(9, [v + 1 for v in DOWN])  # 3 and 9 agree on 10 trials: kept
    assert schedule.update(agree_up) == 3 and not schedule.settled  # judged again at 20, 40
    settled = agree_up
    for first_id in (10, 20, 30):  # 40 trials at rungs 3 and 9, all agreeing
        settled = settled + rows(3, DOWN, first_id=first_id) + rows(9, DOWN, first_id=first_id)
        settled += rows(1, UP, first_id=first_id)
    assert schedule.update(settled) == 3 and schedule.settled
    assert schedule.update(settled + rows(9, UP, first_id=200)) == 3


def test_a_rung_kept_on_10_trials_is_judged_again_on_20_and_40() -> None:
    """Ten pairs are few: a rung the first 10 trials vouch for is judged again on 20 and 40."""
    levels = [1, 3, 9]
    at_1 = [float(i) for i in range(40)]
    # Trials 10-19 rank the other way at rung 3: the first 20 no longer agree (rho -0.74).
    twenty = rows(1, at_1[:20]) + rows(3, UP + [-v for v in UP])
    assert first_active_level(levels, twenty[:10] + twenty[20:30], maximize=True) == 1
    assert first_active_level(levels, twenty, maximize=True) == 3
    # The first 20 agree and 21-40 reverse: retired at 40 (rho 0.04), not before.
    at_3 = at_1[:20] + [19.5 - i for i in range(20)]
    forty = rows(1, at_1) + rows(3, at_3)
    schedule = RungSchedule(levels, maximize=True)
    assert schedule.update(rows(1, at_1[:39]) + rows(3, at_3[:39])) == 1
    assert not schedule.settled
    assert schedule.update(forty) == 3
    # Without rechecks the first 10 decide, as before.
    assert first_active_level(levels, twenty, maximize=True, rechecks=0) == 1


def inverted(run: TrialRun) -> TrialOutcome:
    """Epoch 1 ranks trials by -x, every later epoch by x: the first rung misleads."""
    return _curve(run, lambda x, epoch: 1 - x if epoch == 1 else x * epoch / 9)


def faithful(run: TrialRun) -> TrialOutcome:
    return _curve(run, lambda x, epoch: x * epoch / 9)


def _curve(run: TrialRun, score: Any) -> TrialOutcome:
    value = None
    for epoch in range(max(run.reported, default=0) + 1, run.config.task.epochs + 1):
        value = score(run.params["x"], epoch)
        if run.report(epoch, value):
            return TrialOutcome(status="pruned", value=value)
    return TrialOutcome(status="completed", value=value)


@pytest.mark.parametrize(("task", "retired"), [(inverted, True), (faithful, False)])
def test_workers_stop_pausing_at_a_misleading_first_rung(
    storage_url: str, study_name: str, task: Any, retired: bool
) -> None:
    config = parse_config(
        {
            "study": {"name": study_name, "sampler": "random", "seed": 1, "n_trials": 80},
            "pruner": {"type": "asha", "min_resource": 1, "reduction_factor": 3},
            "task": {"name": "digits", "epochs": 27},
            "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}},
        }
    )
    storage = open_storage(storage_url, create=True)
    try:
        ref, _ = create_study(storage, config)
        worker = Worker(
            storage, open_study(storage, study_name), run_trial=task, grace_s=5.0, progress=False
        )
        assert worker.run() == 0
        at_rung: dict[int, set[int]] = {}
        for row in pauses.rung_rows(storage, ref.study_id):
            at_rung.setdefault(row.trial_id, set()).add(row.level)
    finally:
        storage.close()
    trials = optuna.load_study(study_name=study_name, storage=storage_url).get_trials()
    number = {t._trial_id: t.number for t in trials}
    # Trials whose first recorded rung is 3: they trained past rung 1 without pausing.
    skipped = sorted(number[t] for t, levels in at_rung.items() if min(levels) > 1)
    if retired:
        assert skipped, "rung 1 was never retired"
        # Once retired, every later trial that reached a rung skipped rung 1.
        assert all(min(at_rung[t]) > 1 for t in at_rung if number[t] > skipped[0])
    else:
        assert not skipped
