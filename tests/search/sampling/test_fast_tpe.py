"""hpsearch's faster TPE picks exactly the points Optuna's TPE picks: the log of the normal CDF
is Optuna's bit for bit, and a trial's split into good and bad trials is the one Optuna makes."""

from __future__ import annotations

import math

import numpy as np
import optuna
import pytest
from optuna.distributions import FloatDistribution, IntDistribution
from optuna.samplers._tpe import _truncnorm, probability_distributions
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


def _bitwise_same(want: np.ndarray, got: np.ndarray) -> np.ndarray:
    """Element by element: the same float64 bits (any NaN counts as the same)."""
    return (want.view(np.int64) == got.view(np.int64)) | (np.isnan(want) & np.isnan(got))


def _same_bits(want: np.ndarray, got: np.ndarray) -> bool:
    return want.shape == got.shape and bool(_bitwise_same(want, got).all())


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
    same = _bitwise_same(want, got)
    assert same.all(), x[~same][:10]
    for n in (1, 2, 7, 24, fast_tpe._FEW - 1, fast_tpe._FEW, fast_tpe._FEW + 1):  # both paths
        for start in range(0, x.size - n, x.size // 50):
            few = x[start : start + n]
            assert _same_bits(want[start : start + n], fast_tpe.log_ndtr(few))
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
    monkeypatch.setattr(_truncnorm, "_log_gauss_mass", fast_tpe._ORIGINAL_MASS)
    monkeypatch.setattr(
        probability_distributions, "_log_gauss_mass_unique", fast_tpe._ORIGINAL_MASS_UNIQUE
    )
    assert not fast_tpe.installed()
    plain = sample_next(tpe(optuna.samplers.TPESampler), seed)
    assert fast == plain
    assert len({p["lr"] for p in fast}) == 4  # real samples, not one point repeated


def _bounds(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(a, b) pairs as TPE makes them: candidate values' cells against kernels, standardized;
    every case (left tail, right tail, central, far tails, empty and reversed intervals, NaN)."""
    rng = np.random.default_rng(seed)
    values = np.unique(np.round(np.exp(rng.uniform(np.log(16), np.log(1024), 24))))
    mu = rng.uniform(np.log(16), np.log(1024), 300)
    sigma = np.concatenate([rng.uniform(0.01, 2.0, 299), [1e-4]])
    a = (np.log(values - 0.5)[:, None] - mu) / sigma
    b = (np.log(values + 0.5)[:, None] - mu) / sigma
    odd = np.array([[0.0, -0.0, 1.0, -50.0, 30.0, math.nan, -1.0, 2.0, -25.0, 0.5]])
    odd_b = np.array([[0.0, 0.0, -1.0, -40.0, 31.0, 0.0, math.nan, 2.0, -21.0, 0.5]])
    pad = np.zeros((1, a.shape[1] - odd.shape[1]))
    a = np.concatenate([a, np.concatenate([odd, pad], axis=1)])
    b = np.concatenate([b, np.concatenate([odd_b, pad + 1.0], axis=1)])
    return a, b


@pytest.mark.parametrize("seed", [0, 1])
def test_log_gauss_mass_is_optunas_bit_for_bit(seed: int) -> None:
    a, b = _bounds(seed)
    with np.errstate(all="ignore"):
        want = fast_tpe._ORIGINAL_MASS(a, b)
        want_unique = fast_tpe._ORIGINAL_MASS_UNIQUE(a, b)
        got = fast_tpe.log_gauss_mass(a, b)
        got_unique = fast_tpe.log_gauss_mass_unique(a, b)
        # A continuous parameter's kernels: mostly the central case, past the 2,000 elements
        # where Optuna's erf changes method.
        wide_a, wide_b = -np.abs(a[:, :120]).ravel(), np.abs(b[:, :120]).ravel()
        want_wide = fast_tpe._ORIGINAL_MASS(wide_a, wide_b)
        got_wide = fast_tpe.log_gauss_mass(wide_a, wide_b)
        # Repeated pairs: 3,000 central ones, 1,500 distinct: Optuna's erf sees 1,500.
        twice_a, twice_b = np.tile(wide_a[:1_500], 2), np.tile(wide_b[:1_500], 2)
        want_twice = fast_tpe._ORIGINAL_MASS_UNIQUE(twice_a, twice_b)
        got_twice = fast_tpe.log_gauss_mass_unique(twice_a, twice_b)
    assert _same_bits(want, got)
    assert _same_bits(want_unique, got_unique)
    assert _same_bits(want_wide, got_wide)
    assert wide_a.size > 2_000 and np.isfinite(got_wide).mean() > 0.9
    assert _same_bits(want_twice, got_twice)


def test_a_trials_values_are_optunas_internal_ones_and_bad_ones_raise_its_error() -> None:
    sampler = fast_tpe.TPESampler(multivariate=False, seed=0)
    study = optuna.create_study()
    trials = study_with_curves(0)
    for name, distribution in SPACE.items():
        space = {name: distribution}
        got = sampler._get_internal_repr(trials, space, study)[name]
        want = optuna.samplers.TPESampler._get_internal_repr(sampler, trials, space, study)[name]
        assert got.dtype == want.dtype and np.array_equal(got, want)
    bad = create_trial(
        state=TrialState.COMPLETE,
        value=0.0,
        params={"lr": 0.01},
        distributions={"lr": SPACE["lr"]},
    )
    bad._params["lr"] = -1.0  # what a corrupted row would hold
    with pytest.raises(ValueError, match="invalid value for the case log=True"):
        sampler._get_internal_repr([*trials, bad], {"lr": SPACE["lr"]}, study)


def test_a_workers_next_trial_is_the_same_with_the_masses_before_and_after() -> None:
    """A worker's sampling step on a 120-trial ASHA study (bench.systems.tpe_cost): the TPE of
    fast_tpe before its Gaussian masses and the one now sample the same params."""
    from bench.systems import tpe_cost

    result = tpe_cost.measure(120, rounds=2)
    assert result["same_params"] and result["before_cpu_ms"] > 0
