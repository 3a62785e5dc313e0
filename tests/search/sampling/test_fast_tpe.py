"""hpsearch's faster TPE picks exactly the points Optuna's TPE picks: the log of the normal CDF
is Optuna's bit for bit, and a trial's split into good and bad trials is the one Optuna makes."""

from __future__ import annotations

import math

import numpy as np
import optuna
import pytest
from optuna.distributions import FloatDistribution, IntDistribution
from optuna.samplers._tpe import _truncnorm
from optuna.samplers._tpe import sampler as tpe_module
from optuna.trial import TrialState, create_trial

from search.sampling import fast_tpe
from search.sampling.multifidelity import MIN_POINTS, FidelitySampler

SPACE = {
    "lr": FloatDistribution(1e-4, 1e-1, log=True),
    "width": IntDistribution(16, 1024, log=True),
    "layers": IntDistribution(1, 5),
    "dropout": FloatDistribution(0.0, 1.0),
    "step": FloatDistribution(0.0, 1.0, step=0.1),
}


@pytest.mark.parametrize("libm", ["as installed", "through math"])
def test_log_ndtr_is_optunas_bit_for_bit(libm: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if libm == "through math":  # what a CPU where NumPy's log is not libm's runs
        monkeypatch.setattr(fast_tpe, "_log", lambda a: fast_tpe._map(math.log, a))
        monkeypatch.setattr(
            fast_tpe, "_square", lambda a: fast_tpe._map(math.pow, a, [2.0] * a.size)
        )
    rng = np.random.default_rng(0)
    edges = [6.0, -20.0, 1.0, -1.0, 0.0, -0.0, math.inf, -math.inf, math.nan, -37.5, 40.0, -1e150]
    nudged = [np.nextafter(v, d) for v in (6.0, -20.0, 1.0, -1.0) for d in (-math.inf, math.inf)]
    x = np.concatenate(
        [rng.normal(0.0, scale, 20_000) for scale in (0.5, 3.0, 10.0, 30.0, 300.0)]
        + [np.array(edges + nudged), -np.logspace(1.3, 150, 2_000)]
    )
    with np.errstate(all="ignore"):
        want = fast_tpe._ORIGINAL(x)
    got = fast_tpe.log_ndtr(x)
    same = (want.view(np.int64) == got.view(np.int64)) | (np.isnan(want) & np.isnan(got))
    assert same.all(), x[~same][:10]
    grid = x[:7_000].reshape(1_000, 7)
    assert np.array_equal(fast_tpe.log_ndtr(grid), fast_tpe._ORIGINAL(grid))
    assert fast_tpe.log_ndtr(np.array([])).shape == (0,)


def study_with_curves(seed: int) -> list[optuna.trial.FrozenTrial]:
    """60 trials as ASHA leaves them: finished, pruned and paused at rungs, a few running."""
    rng = np.random.default_rng(seed)
    trials = []
    for i in range(60):
        params = {
            "lr": float(10 ** rng.uniform(-4, -1)),
            "width": int(rng.integers(16, 1025)),
            "layers": int(rng.integers(1, 6)),
            "dropout": float(rng.uniform()),
            "step": round(float(rng.integers(0, 11)) * 0.1, 1),
        }
        quality = -abs(math.log10(params["lr"]) + 2.5) - abs(params["dropout"] - 0.3)
        epochs = [1, 3, 9, 27][: 1 + i % 4]
        curve = {e: quality + 0.1 * math.log(e) for e in epochs}
        if i % 7 == 6:
            state, value, curve = TrialState.RUNNING, None, {}
        elif len(epochs) == 4:
            state, value = TrialState.COMPLETE, curve[27]
        elif i % 2:
            state, value = TrialState.PRUNED, None
        else:
            state, value = TrialState.RUNNING, None  # paused at its rung
        trials.append(
            create_trial(
                state=state,
                value=value,
                params=params,
                distributions=SPACE,
                intermediate_values=curve,
            )
        )
    return trials


def sample_next(sampler: optuna.samplers.BaseSampler, seed: int) -> list[dict[str, float]]:
    study = optuna.create_study(direction="maximize", sampler=sampler)
    for t in study_with_curves(seed):
        study.add_trial(t)
    points = []
    for _ in range(4):  # each sees the ones before it running (constant liar)
        trial = study.ask()
        points.append({name: trial._suggest(name, d) for name, d in SPACE.items()})
    return points


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fast_tpe_samples_what_optunas_tpe_samples(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    def tpe(cls: type[optuna.samplers.TPESampler]) -> optuna.samplers.BaseSampler:
        inner = cls(multivariate=False, constant_liar=True, seed=seed, n_startup_trials=10)
        return FidelitySampler(inner, mode="rung", min_points=MIN_POINTS)

    assert fast_tpe.install()
    fast = sample_next(tpe(fast_tpe.TPESampler), seed)
    monkeypatch.setattr(_truncnorm, "_log_ndtr", fast_tpe._ORIGINAL)
    monkeypatch.setattr(tpe_module, "_split_trials", fast_tpe._ORIGINAL_SPLIT)
    assert not fast_tpe.installed()
    plain = sample_next(tpe(optuna.samplers.TPESampler), seed)
    assert fast == plain
    assert len({p["lr"] for p in fast}) == 4  # real samples, not one point repeated
