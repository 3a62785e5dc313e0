"""Samplers that learn across fidelities: TPE and GP learn from paused and pruned trials'
reports, and from every Hyperband bracket, not only from trials trained to the end."""

from __future__ import annotations

import statistics
import warnings

import optuna
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState, create_trial

from search.db.storage import open_storage
from search.sampling.mirror import StudyMirror
from search.sampling.multifidelity import MIN_POINTS, FidelitySampler, fidelity_view
from search.sampling.samplers import make_sampler
from search.study.parse_config import parse_config
from search.study.studies import create_study
from search.worker.loop import Worker
from tests.helpers.objectives import curve

SPACE = {"x": FloatDistribution(0.0, 1.0)}


def score(x: float, epoch: int) -> float:
    return epoch / 10 - (x - 0.8) ** 2


def paused_study(sampler: optuna.samplers.BaseSampler) -> optuna.Study:
    """30 trials paused after 1 or 3 epochs (RUNNING, with their reports), none finished."""
    study = optuna.create_study(direction="maximize", sampler=sampler)
    for i in range(30):
        x = (i * 0.37) % 1.0
        epochs = (1, 3) if i % 3 == 0 else (1,)
        study.add_trial(
            create_trial(
                state=TrialState.RUNNING,
                params={"x": x},
                distributions=SPACE,
                intermediate_values={e: score(x, e) for e in epochs},
            )
        )
    return study


def distance_of_next_points(sampler: optuna.samplers.BaseSampler) -> float:
    study = paused_study(sampler)
    xs = []
    for _ in range(12):
        trial = study.ask()
        xs.append(trial.suggest_float("x", 0.0, 1.0))
        study.tell(trial, state=TrialState.FAIL)  # not seen by the next samples
    return statistics.fmean(abs(x - 0.8) for x in xs)


def tpe(multivariate: bool = True) -> optuna.samplers.TPESampler:
    return optuna.samplers.TPESampler(seed=1, multivariate=multivariate, constant_liar=True)


def test_tpe_learns_from_paused_trials_where_plain_tpe_still_samples_at_random() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        plain = distance_of_next_points(tpe())
        rung = distance_of_next_points(FidelitySampler(tpe(), mode="rung", min_points=10))
        rank = distance_of_next_points(FidelitySampler(tpe(), mode="rank"))
        # hpsearch's own: univariate TPE, fitted once MIN_POINTS trials reached an epoch
        univariate = distance_of_next_points(
            FidelitySampler(tpe(multivariate=False), mode="rung", min_points=MIN_POINTS)
        )
        gp = distance_of_next_points(
            FidelitySampler(optuna.samplers.GPSampler(seed=1), mode="rung", min_points=10)
        )
    assert plain > 0.2  # nothing finished: its start-up samples uniformly
    assert max(rung, rank, gp, univariate) < plain / 2, (plain, rung, rank, gp, univariate)


def test_rung_view_fits_on_the_highest_epoch_enough_trials_reached() -> None:
    trials = paused_study(optuna.samplers.RandomSampler()).trials
    view = fidelity_view(trials, "rung", min_points=10)  # 10 trials reached epoch 3
    complete = [t for t in view if t.state == TrialState.COMPLETE]
    assert len(complete) == 10 and all(t.value == t.intermediate_values[3] for t in complete)
    assert all(t.state == TrialState.PRUNED for t in view if 3 not in t.intermediate_values)
    view = fidelity_view(trials, "rung", min_points=11)  # only epoch 1 has 11 or more
    assert [t.value for t in view] == [t.intermediate_values[1] for t in trials]


def test_tpe_under_hyperband_sees_every_bracket_through_the_mirror(
    storage_url: str, study_name: str
) -> None:
    config = parse_config(
        {
            "study": {"name": study_name, "n_trials": 24, "sampler": "tpe", "seed": 3},
            "pruner": {"type": "hyperband", "min_resource": 1, "reduction_factor": 3},
            "task": {"name": "digits", "epochs": 9},
            "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}},
        }
    )
    storage = open_storage(storage_url, create=True)
    ref, _ = create_study(storage, config)
    assert Worker(storage, ref, run_trial=curve, grace_s=5, progress=False).run() == 0
    mirror = StudyMirror(storage, ref)
    mirror.refresh()
    sampler = make_sampler(config, 24)
    assert isinstance(sampler, FidelitySampler)
    study = mirror.study(sampler)
    trial = study._storage.get_trial(mirror.new_trial(24))
    seen = sampler._view(study, trial).get_trials(deepcopy=False)
    # Every trial is seen (Optuna's Hyperband would show only the trial's bracket), with its
    # reports: complete trials at the highest epoch at least MIN_POINTS trials reached.
    assert len([t for t in seen if t.params]) == 24
    level = max(
        step
        for step in range(1, 10)
        if sum(step in t.intermediate_values for t in seen if t.params) >= MIN_POINTS
    )
    assert all(
        t.value == t.intermediate_values[level] for t in seen if t.state == TrialState.COMPLETE
    )


def _two_clusters_study(sampler: optuna.samplers.BaseSampler) -> optuna.Study:
    """100 trials at one epoch: the best 5 near x = 0.9, the next 5 near x = 0.1, the rest
    in the middle."""
    study = optuna.create_study(direction="maximize", sampler=sampler)
    points = [(0.88 + 0.01 * i, 1.0) for i in range(5)]
    points += [(0.08 + 0.01 * i, 0.95) for i in range(5)]
    points += [(0.3 + 0.4 * i / 89, 0.5) for i in range(90)]
    for x, value in points:
        study.add_trial(
            create_trial(
                state=TrialState.RUNNING,
                params={"x": x},
                distributions=SPACE,
                intermediate_values={1: value},
            )
        )
    return study


def _share_near(sampler: optuna.samplers.BaseSampler, centre: float) -> float:
    study = _two_clusters_study(sampler)
    xs = []
    for _ in range(40):
        trial = study.ask()
        xs.append(trial.suggest_float("x", 0.0, 1.0))
        study.tell(trial, state=TrialState.FAIL)
    return sum(abs(x - centre) < 0.06 for x in xs) / len(xs)


def test_default_tpe_across_fidelities_samples_near_the_best_five_percent() -> None:
    """README's default (TPE + ASHA) counts the best 5% of trials as good, not Optuna's 10%:
    the runners-up cluster does not pull new trials away from the best one."""
    config = parse_config(
        {
            "study": {"name": "s", "budget_epochs": 100, "sampler": "tpe", "seed": 3},
            "pruner": {"type": "asha", "min_resource": 1, "reduction_factor": 3},
            "task": {"name": "digits", "epochs": 9},
            "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}},
        }
    )
    ours = make_sampler(config, 100)
    optunas = FidelitySampler(tpe(multivariate=False), mode="rung", min_points=MIN_POINTS)
    assert _share_near(optunas, 0.1) > 0.2  # Optuna's 10% takes both clusters as good
    assert _share_near(ours, 0.1) < 0.1
    assert _share_near(ours, 0.9) > 0.6
