"""TPE's bounded view of a long study: it keeps sampling near the best configurations found,
however old, while it reads a bounded number of trials (search/sampling/bounded.py)."""

from __future__ import annotations

import statistics

import optuna
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState, create_trial

from search.sampling.bounded import BoundedFidelitySampler, _Index, bound, bounded_trials
from search.sampling.multifidelity import MIN_POINTS, FidelitySampler, fidelity_view
from search.sampling.samplers import make_sampler
from search.study.parse_config import parse_config

SPACE = {"x": FloatDistribution(0.0, 1.0)}


def score(x: float, epoch: int) -> float:
    return epoch / 10 - (x - 0.8) ** 2


def long_study(n: int) -> optuna.Study:
    """`n` finished trials as ASHA leaves them: the good ones (x near 0.8) early and trained
    to epoch 9, then many poor recent ones (x below 0.4) stopped after epoch 1 or 3; a few
    running without reports."""
    study = optuna.create_study(direction="maximize")
    for i in range(n):
        good = i < 40
        x = 0.7 + 0.2 * ((i * 0.37) % 1.0) if good else 0.4 * ((i * 0.61) % 1.0)
        epochs = (1, 3, 9) if good and i % 2 == 0 else (1, 3) if i % 3 == 0 else (1,)
        study.add_trial(
            create_trial(
                state=TrialState.COMPLETE if 9 in epochs else TrialState.PRUNED,
                value=score(x, 9) if 9 in epochs else None,
                params={"x": x},
                distributions=SPACE,
                intermediate_values={e: score(x, e) for e in epochs},
            )
        )
    for _ in range(3):
        study.add_trial(
            create_trial(state=TrialState.RUNNING, params={"x": 0.5}, distributions=SPACE)
        )
    return study


def tpe() -> optuna.samplers.TPESampler:
    return optuna.samplers.TPESampler(seed=3, multivariate=False, constant_liar=True)


def next_points(study: optuna.Study, sampler: optuna.samplers.BaseSampler, n: int) -> list[float]:
    study.sampler = sampler
    xs = []
    for _ in range(n):
        trial = study.ask()
        xs.append(trial.suggest_float("x", 0.0, 1.0))
        study.tell(trial, state=TrialState.FAIL)  # not seen by the next samples
    return xs


def test_past_the_bound_tpe_still_samples_near_the_best_trials_however_old() -> None:
    study = long_study(600)
    sampler = bound(
        FidelitySampler(tpe(), mode="rung", min_points=MIN_POINTS), best=30, recent=100, start=150
    )
    assert isinstance(sampler, BoundedFidelitySampler)
    xs = next_points(study, sampler, 12)
    # The 560 recent trials all lie below 0.4; the 40 good ones (x in 0.7-0.9) are the oldest.
    assert abs(statistics.median(xs) - 0.8) < 0.15, xs


def test_the_view_stays_bounded_and_shows_each_kept_trial_as_the_whole_study_would() -> None:
    study = long_study(2000)
    trials = study.get_trials(deepcopy=False)
    kept = bounded_trials(
        trials, _Index(), min_points=MIN_POINTS, maximize=True, best=30, recent=100
    )
    assert kept is not None
    assert len(kept) <= 30 + 100 + 3
    assert [t.number for t in kept] == sorted(t.number for t in kept)
    whole = {t.number: t for t in fidelity_view(trials, "rung", MIN_POINTS)}
    for shown in fidelity_view(kept, "rung", MIN_POINTS):
        same = whole[shown.number]
        assert (shown.state, shown.value) == (same.state, same.value), shown.number
    # The best 25 of the whole study (TPE's good set) are all kept.
    complete = sorted(
        (t for t in whole.values() if t.state == TrialState.COMPLETE), key=lambda t: -t.value
    )
    assert {t.number for t in complete[:25]} <= {t.number for t in kept}
    # The running trials (constant liar) are kept.
    assert sum(t.state == TrialState.RUNNING for t in kept) == 3


def test_the_view_follows_the_study_as_trials_are_added() -> None:
    study = long_study(400)
    index = _Index()
    first = bounded_trials(
        study.get_trials(deepcopy=False),
        index,
        min_points=MIN_POINTS,
        maximize=True,
        best=30,
        recent=100,
    )
    # A new best trial arrives: it is in the next view, read incrementally from the same index.
    study.add_trial(
        create_trial(
            state=TrialState.COMPLETE,
            value=score(0.8, 9),
            params={"x": 0.8},
            distributions=SPACE,
            intermediate_values={e: score(0.8, e) for e in (1, 3, 9)},
        )
    )
    trials = study.get_trials(deepcopy=False)
    again = bounded_trials(trials, index, min_points=MIN_POINTS, maximize=True, best=30, recent=100)
    fresh = bounded_trials(
        trials, _Index(), min_points=MIN_POINTS, maximize=True, best=30, recent=100
    )
    assert first is not None and again is not None and fresh is not None
    assert trials[-1].number in {t.number for t in again}
    assert [t.number for t in again] == [t.number for t in fresh]


def test_a_default_study_samples_with_the_bounded_view_and_small_studies_see_every_trial() -> None:
    config = parse_config(
        {
            "study": {"name": "s", "budget_epochs": 100, "sampler": "tpe"},
            "pruner": {"type": "asha", "min_resource": 1, "reduction_factor": 3},
            "task": {"name": "digits", "epochs": 9},
            "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}},
        }
    )
    sampler = make_sampler(config, 5)
    assert isinstance(sampler, BoundedFidelitySampler)
    study = long_study(100)  # below the bound's start: the view is the whole study
    study.sampler = sampler
    trial = study.ask()
    assert len(sampler._view(study, study._storage.get_trial(trial._trial_id)).get_trials()) == len(
        fidelity_view(study.get_trials(deepcopy=False), "rung", MIN_POINTS)
    )
