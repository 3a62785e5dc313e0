"""Samplers and search spaces: log scales, per-trial seeding, every sampler on the real space."""

from __future__ import annotations

import math
from typing import Any

import optuna
import pytest

from search.sampling.samplers import derived_seed, make_sampler, suggest
from search.study.parse_config import parse_config
from search.study.settings import SAMPLERS

SPACE = {
    "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
    "width": {"type": "int", "low": 8, "high": 64, "log": True},
    "batch_size": {"type": "categorical", "choices": [32, 64, 128]},
    "dropout": {"type": "float", "low": 0.0, "high": 0.5},
}


def config(sampler: str, seed: int = 0) -> Any:
    return parse_config(
        {
            "study": {"name": "s", "sampler": sampler, "seed": seed, "n_trials": 20},
            "task": {"name": "digits", "epochs": 3},
            "space": SPACE,
            "grid": {"points": 3},
        }
    )


def sample_trials(cfg: Any, n: int, objective: Any = None) -> list[dict[str, Any]]:
    """Sample n trials the way workers do: one sampler per trial, seeded by its number."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize")
    out = []
    for number in range(n):
        trial_id = study._storage.create_new_trial(study._study_id)
        study.sampler = make_sampler(cfg, number)
        trial = optuna.Trial(study, trial_id)
        params = {p.name: suggest(trial, p) for p in cfg.space}
        study.tell(trial, objective(params) if objective else 0.0)
        out.append(params)
    return out


def test_log_scale_learning_rate_puts_a_third_in_each_decade() -> None:
    lrs = [p["lr"] for p in sample_trials(config("random"), 900)]
    decades = [sum(lo <= lr < lo * 10 for lr in lrs) / len(lrs) for lo in (1e-4, 1e-3, 1e-2)]
    assert all(abs(share - 1 / 3) < 0.06 for share in decades), decades
    # A linear scale would put 90% in the top decade; log-scale ints spread the same way.
    widths = [p["width"] for p in sample_trials(config("random"), 300)]
    assert 0.35 < sum(w < 23 for w in widths) / len(widths) < 0.65  # 23 ~ sqrt(8 * 64)


def test_each_trial_has_its_own_random_stream_and_it_is_reproducible() -> None:
    first = sample_trials(config("random", seed=0), 50)
    again = sample_trials(config("random", seed=0), 50)
    other_seed = sample_trials(config("random", seed=1), 50)
    assert first == again
    assert len({p["lr"] for p in first}) == 50
    # Seeds 0 and 1 must not be the same stream shifted by one trial.
    assert not {p["lr"] for p in first} & {p["lr"] for p in other_seed}
    assert len({derived_seed(0, n) for n in range(10_000)}) > 9_990


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_every_sampler_samples_the_space(sampler: str) -> None:
    cfg = config(sampler)
    # A smooth objective, so model-based samplers have something to learn from.
    trials = sample_trials(cfg, 14, lambda p: -abs(math.log10(p["lr"]) + 2.5) - p["dropout"])
    for params in trials:
        for p in cfg.space:
            assert p.contains(params[p.name]), (sampler, p.name, params[p.name])
    if sampler == "grid":
        grid = cfg.grid_values()
        assert all(params[name] in grid[name] for params in trials for name in grid)
        assert len({tuple(sorted(t.items())) for t in trials}) == 14  # no point visited twice


def test_tpe_concentrates_on_the_good_region() -> None:
    """Trials 70-99 sample the learning rate nearer the best one than the random start-up
    does (three seeds, averaged: TPE's prior keeps some of every later trial's samples
    spread over the whole range, search.sampling.multifidelity.PRIOR_WEIGHT)."""

    def distance(p: dict[str, Any]) -> float:  # decades from the best learning rate, 10^-2.5
        return abs(math.log10(p["lr"]) + 2.5)

    ratios = []
    for seed in range(3):
        trials = sample_trials(config("tpe", seed), 100, lambda p: -distance(p))
        late = [distance(p) for p in trials[70:]]
        early = [distance(p) for p in trials[:10]]  # random start-up
        ratios.append((sum(late) / len(late)) / (sum(early) / len(early)))
    assert sum(ratios) / len(ratios) < 0.75, ratios  # random search: about 1.1
