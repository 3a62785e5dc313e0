"""TPE's bounded view of a long study: it keeps sampling near the best configurations found,
however old, while it reads a bounded number of trials (search/sampling/bounded.py)."""

from __future__ import annotations

import random
import statistics
from pathlib import Path

import optuna
import sqlalchemy as sa
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState, create_trial

from bench.systems import sampler_cost
from search.db.storage import Storage, open_storage
from search.db.tables import trial_intermediate_values, trials
from search.sampling.bounded import (
    START,
    BoundedFidelitySampler,
    _Index,
    bound,
    bounded_trials,
)
from search.sampling.mirror import StudyMirror
from search.sampling.multifidelity import MIN_POINTS, FidelitySampler, _StudyView, fidelity_view
from search.sampling.samplers import make_sampler, suggest
from search.study.parse_config import parse_config
from search.study.studies import open_study

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


def _stop_running(storage: Storage, study_id: int, rng: random.Random, count: int) -> None:
    """`count` of the study's running trials stop at a rung, as another worker writes it."""
    with storage.transaction() as conn:
        running = conn.execute(
            sa.select(trials.c.trial_id)
            .where(trials.c.study_id == study_id, trials.c.state == "RUNNING")
            .order_by(trials.c.trial_id)
            .limit(count)
        ).scalars()
        for trial_id in list(running):
            conn.execute(
                sa.update(trials).where(trials.c.trial_id == trial_id).values(state="PRUNED")
            )
            conn.execute(
                sa.insert(trial_intermediate_values),
                [
                    {
                        "trial_id": trial_id,
                        "step": step,
                        "intermediate_value": 60 + 30 * rng.random(),
                        "intermediate_value_type": "FINITE",
                    }
                    for step in (1, 3)
                ],
            )


def _as_shown(view: list[optuna.trial.FrozenTrial]) -> list[tuple]:
    return [(t.number, t.state, t.value, t.params) for t in view]


def test_the_workers_path_shows_tpe_what_looking_at_every_trial_showed(tmp_path: Path) -> None:
    """Past the bound's start, on a worker's mirror of a study that others change: the index
    fed with the trials that changed (the mirror's feed) shows TPE the view, and so samples the
    params, that the index looking at every trial before every sample (as before) gave."""
    url = f"sqlite:///{tmp_path / 'study.db'}"
    name = sampler_cost.make_study(url, START + 40)
    storage = open_storage(url)
    ref = open_study(storage, name)
    mirror = StudyMirror(storage, ref)
    rng = random.Random(5)
    scanned = _Index()  # as before: every trial looked at, before every sample
    number = START + 40 + sampler_cost.RUNNING
    sampled_here = 0
    for step in range(6):
        mirror.refresh()
        # Before: the same sampler, its view from the index that looks at every trial.
        before = make_sampler(ref.config, number)
        assert isinstance(before, BoundedFidelitySampler)
        seen_before: list[optuna.trial.FrozenTrial] = []

        def scan_view(
            study: optuna.Study, trial: optuna.trial.FrozenTrial, seen: list = seen_before
        ) -> optuna.Study:
            if not seen:  # one view per sampled trial, made at its first param (as _view does)
                trials_now = study._get_trials(deepcopy=False, use_cache=True)
                kept = bounded_trials(trials_now, scanned, min_points=MIN_POINTS, maximize=True)
                assert kept is not None
                seen[:] = fidelity_view(kept, "rung", MIN_POINTS)
            return _StudyView(study, seen)

        before._view = scan_view  # type: ignore[method-assign]
        trial = optuna.Trial(mirror.study(before), mirror.new_trial(number))
        want = {p.name: suggest(trial, p) for p in ref.config.space}
        mirror.take_sampled()
        # Now: the worker's path (make_sampler's view, fed by the mirror).
        after = make_sampler(ref.config, number)
        trial = optuna.Trial(mirror.study(after), mirror.new_trial(number))
        got = {p.name: suggest(trial, p) for p in ref.config.space}
        assert after._cached is not None
        shown = after._cached[2]._get_trials(deepcopy=False)
        assert _as_shown(shown) == _as_shown(seen_before), step
        assert got == want, step
        assert [t.number for t in mirror.take_sampled()] == [number]
        sampled_here += 1
        # The study moves on: finished trials written, running ones stop at a rung.
        sampler_cost.write_trials(
            storage, ref.study_id, [sampler_cost.asha_trial(rng, got)], number
        )
        number += 1
        _stop_running(storage, ref.study_id, rng, 1)
        if step == 2:
            sampler_cost.write_trials(
                storage,
                ref.study_id,
                [
                    create_trial(
                        state=TrialState.WAITING,
                        params=sampler_cost.asha_trial(rng).params,
                        distributions=sampler_cost.SPACE,
                    )
                ],
                number,
            )
            number += 1
    assert sampled_here == 6
    # What the index reads per sample is what changed, not the study.
    mirror.refresh()
    mirror.get_all_trials(ref.study_id)
    token, _ = mirror.trial_changes(None)
    sampler_cost.write_trials(storage, ref.study_id, [sampler_cost.asha_trial(rng)], number)
    mirror.refresh()
    mirror.get_all_trials(ref.study_id)
    _, changed = mirror.trial_changes(token)
    assert changed is not None and [t.number for t in changed] == [number]
