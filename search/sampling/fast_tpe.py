"""Optuna's TPE, the same samples at a fraction of the CPU: its log of the normal CDF vectorized.

Optuna 5's TPE weighs every candidate against every trial's kernel; for int and stepped
params that is the log of a Gaussian mass between two bounds, whose `_log_ndtr` calls a Python
function per element (`np.frompyfunc(_log_ndtr_single)`). On a few hundred trials that is
millions of Python calls per sampled trial, most of the real path's sampling time
(bench/BENCHMARKS.md, "The real path, per trial: issue 27 item 3, second pass").

`log_ndtr` computes the same function over whole arrays: the same branches, the same IEEE
operations in the same order, and the same libm `erf`, `erfc`, `log` and `pow` (Python's `math`
functions mapped over the elements without a Python frame each; NumPy's own `log` and `power`
where they are libm's, see `_numpy_is_libms`); the far left tail's asymptotic series
(a <= -20) runs for the elements still in Optuna's loop at once, each leaving it where
Optuna's loop stops it. The results are bit for bit Optuna's
(`tests/search/sampling/test_fast_tpe.py` compares them, and the sampled params, with Optuna's
own), so the search decides exactly what it decided before.

`log_gauss_mass` and `log_gauss_mass_unique` are Optuna's Gaussian masses between two bounds
(`_truncnorm._log_gauss_mass`, `probability_distributions._log_gauss_mass_unique`) bit for bit:
both tails' bounds in one `log_ndtr` call, and without sorting every (candidate, kernel) pair to
find repeats (the mass of a pair does not depend on the others, except through Optuna's erf,
which changes method at 2,000 elements: the central pairs are still made distinct). Below 40
elements `log_ndtr` calls Optuna's own per-element function, cheaper there than array
operations.

`TPESampler` is Optuna's TPE that splits the trials into its good and bad sets once per
trial it samples instead of once per parameter: Optuna's `_sample` splits (sorts, reads every
trial's constraints and reports) for each parameter, and the split depends only on the trials
and their count, the same for every parameter of one trial. Its memo holds the trials it split
and answers only for the very same trial objects in the same order (identity, not equality), so
it returns what Optuna's split would. hpsearch makes one sampler per trial
(`search.sampling.samplers.make_sampler`), so the memo lives as long as one trial's sampling.
For a parameter sampled on its own (univariate TPE, hpsearch's default across fidelities) it
reads the trials' values of that parameter without Optuna's per-trial `_get_params` (which
returns `trial.params` there). Plain Optuna's own `TPESampler` (the benchmarks' baselines) is
left as it is.

`install()` puts both in place, once per process, and only for the Optuna whose functions they
reproduce (a `_truncnorm` with `_log_ndtr_single`, a TPE module with `_split_trials`);
otherwise it leaves Optuna as it is, and `TPESampler` is then Optuna's.
"""

from __future__ import annotations

import contextvars
import itertools
import math
import operator
import sys
from typing import Any

import numpy as np
import optuna
from optuna.distributions import FloatDistribution, IntDistribution
from optuna.samplers._tpe import _truncnorm
from optuna.samplers._tpe import probability_distributions as _distributions
from optuna.samplers._tpe import sampler as _tpe_sampler
from optuna.trial import FrozenTrial

__all__ = [
    "TPESampler",
    "install",
    "installed",
    "log_gauss_mass",
    "log_gauss_mass_unique",
    "log_ndtr",
]

_ORIGINAL = _truncnorm._log_ndtr
_SINGLE = getattr(_truncnorm, "_log_ndtr_single", None)
_ORIGINAL_SPLIT = getattr(_tpe_sampler, "_split_trials", None)
_ORIGINAL_MASS = getattr(_truncnorm, "_log_gauss_mass", None)
_ORIGINAL_MASS_UNIQUE = getattr(_distributions, "_log_gauss_mass_unique", None)
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
_EPS = sys.float_info.epsilon
_SQRT2 = 2**0.5
_EDGE = 1 / 2**0.5
_FEW = 40
"""Below this many elements `log_ndtr` calls Optuna's per-element function (measured)."""


def _map(f: Any, a: np.ndarray, *more: Any) -> np.ndarray:
    """`f` (one of Python's `math` functions: libm) of each element, as floats."""
    return np.fromiter(map(f, a.tolist(), *more), dtype=float, count=a.size)


def _numpy_is_libms() -> bool:
    """Whether NumPy's float64 `log` and `power` are the C library's `log` and `pow`, the ones
    `math.log` and `math.pow` (and Python's `**`) call: NumPy 1.x calls them element by element
    on a CPU without AVX512F (with AVX512F it has vectorized ones of its own, whose last bit
    may differ). Checked on a few values besides."""
    try:
        from numpy.core._multiarray_umath import __cpu_features__
    except ImportError:
        return False
    if not np.__version__.startswith("1.") or __cpu_features__.get("AVX512F", True):
        return False
    probe = np.concatenate([np.logspace(-300, 300, 601), np.linspace(0.5, 1.0, 1001)])
    square = -np.linspace(20.0, 1e5, 2001)
    with np.errstate(all="ignore"):
        return bool(
            np.array_equal(np.log(probe), _map(math.log, probe))
            and np.array_equal(np.power(square, 2.0), _map(math.pow, square, itertools.repeat(2.0)))
        )


def _log(a: np.ndarray) -> np.ndarray:
    """`math.log` of each element (libm's log)."""
    return _map(math.log, a)


def _square(a: np.ndarray) -> np.ndarray:
    """`math.pow(x, 2.0)` of each element (libm's pow: Python's x**2, not always x * x)."""
    return _map(math.pow, a, itertools.repeat(2.0))


if _numpy_is_libms():  # the same libm functions, without a Python call each
    _log = np.log  # type: ignore[assignment]

    def _square(a: np.ndarray) -> np.ndarray:
        return np.power(a, 2.0)


def _ndtr(a: np.ndarray) -> np.ndarray:
    """`_truncnorm._ndtr_single` element-wise (not Optuna's vectorized `_ndtr`, which uses its
    own erf: the single version is the one `_log_ndtr_single` calls)."""
    x = a / _SQRT2
    y = np.empty_like(x)
    low = x < -_EDGE
    mid = ~low & (x < _EDGE)
    high = ~(low | mid)
    if low.any():
        y[low] = 0.5 * _map(math.erfc, -x[low])
    if mid.any():
        y[mid] = 0.5 + 0.5 * _map(math.erf, x[mid])
    if high.any():
        y[high] = 1.0 - 0.5 * _map(math.erfc, x[high])
    return y


def log_ndtr(a: np.ndarray) -> np.ndarray:
    """Optuna's `_truncnorm._log_ndtr(a)`, bit for bit, without a Python call per element
    (below `_FEW` elements, Optuna's own per-element function: cheaper than the array
    operations there, as in TPE's sampling, which inverts the CDF of 24 candidates at a time)."""
    a = np.asarray(a, dtype=float)
    if a.size < _FEW and _SINGLE is not None:
        return np.fromiter(map(_SINGLE, a.ravel().tolist()), dtype=float, count=a.size).reshape(
            a.shape
        )
    out = np.empty(a.shape, dtype=float)
    right = a > 6
    mid = ~right & (a > -20)
    tail = ~(right | mid)  # a <= -20, or NaN
    if right.any():
        out[right] = -_ndtr(-a[right])
    if mid.any():
        out[mid] = _log(_ndtr(a[mid]))
    if tail.any():
        out[tail] = _log_ndtr_tail(a[tail])
    return out


def _log_ndtr_tail(a: np.ndarray) -> np.ndarray:
    """`_log_ndtr_single`'s asymptotic series for a <= -20 (or NaN), the elements in step, each
    leaving the loop where Optuna's loop stops it (the numerator is the same for all)."""
    square = _square(a)  # Python's a**2 is C's pow(a, 2.0)
    log_lhs = -0.5 * square - _log(-a) - _HALF_LOG_2PI
    right_hand_side = np.empty_like(a)
    going = np.arange(a.size)  # the elements still in the loop
    denom_cons = 1 / square
    denom_factor = np.ones_like(a)
    total = np.ones_like(a)  # right_hand_side of the elements still going
    numerator = 1.0
    sign = 1
    i = 0
    while going.size:  # Optuna's first test, |0 - 1| > eps, holds for every element
        i += 1
        sign = -sign
        last_total = total
        denom_factor = denom_factor * denom_cons
        numerator *= 2 * i - 1
        total = total + sign * numerator * denom_factor
        more = np.abs(last_total - total) > _EPS
        if not more.all():
            right_hand_side[going[~more]] = total[~more]
            going, denom_cons = going[more], denom_cons[more]
            denom_factor, total = denom_factor[more], total[more]
    return log_lhs + _log(right_hand_side)


def _mass(a: np.ndarray, b: np.ndarray, central_unique: bool) -> np.ndarray:
    """`_truncnorm._log_gauss_mass` element by element (see `log_gauss_mass`)."""
    a, b = np.asarray(a), np.asarray(b)
    right = a > 0  # Optuna's case_right, written after its case_left: it wins where both hold
    left = (b <= 0) & ~right
    central = ~(left | right)
    out = np.full(a.shape, np.nan)
    if left.any() or right.any():
        # Optuna's mass_case_left(a, b) = log_diff(log_ndtr(b), log_ndtr(a)), and the right
        # case is the left one of (-b, -a): one log_ndtr over both sides' both bounds.
        upper = np.concatenate([b[left], -a[right]])
        n, k = upper.size, int(np.count_nonzero(left))
        both = log_ndtr(np.concatenate([upper, a[left], -b[right]]))
        mass = _truncnorm._log_diff(both[:n], both[n:])
        out[left], out[right] = mass[:k], mass[k:]
    if central.any():
        a_c, b_c = a[central], b[central]
        if central_unique:
            a_c, b_c, inverse = _distributions._unique_inverse_2d(a_c, b_c)
        # Optuna's vectorized erf switches method at 2,000 elements: the same elements as
        # Optuna's call get here, so the same method runs.
        mass = np.log1p(-_truncnorm._ndtr(a_c) - _truncnorm._ndtr(-b_c))
        out[central] = mass[inverse] if central_unique else mass
    return out


def log_gauss_mass(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Optuna's `_truncnorm._log_gauss_mass(a, b)` (the log of a standard Gaussian's mass
    between a and b), bit for bit: the left and right tails' four bounds in one `log_ndtr` call
    instead of four, into a float array (Optuna fills a complex one and takes its real part)."""
    return _mass(a, b, central_unique=False)


def log_gauss_mass_unique(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Optuna's `probability_distributions._log_gauss_mass_unique(a, b)`, bit for bit, without
    sorting every (a, b) pair to find the repeated ones. Optuna computes the mass once per
    distinct pair; the mass of a pair does not depend on the other pairs in the call, except
    that Optuna's erf (the central case) switches method at 2,000 elements: so only the central
    pairs are made distinct, and they are as many as in Optuna's call. On a TPE grid (candidate
    values against kernels) pairs rarely repeat, and sorting them was a quarter of the cost."""
    return _mass(a, b, central_unique=True)


class _SplitMemo:
    """The last split of one sampler: its inputs (held, so that identity means the same
    objects) and its result."""

    def __init__(self) -> None:
        self.key: tuple[Any, list[FrozenTrial], int] | None = None
        self.result: tuple[list[FrozenTrial], list[FrozenTrial]] | None = None

    def split(
        self, study: optuna.Study, trials: list[FrozenTrial], n_below: int
    ) -> tuple[list[FrozenTrial], list[FrozenTrial]]:
        key = self.key
        if (
            key is not None
            and key[0] is study
            and key[2] == n_below
            and len(key[1]) == len(trials)
            and all(map(operator.is_, key[1], trials))
        ):
            assert self.result is not None
            return self.result
        assert _ORIGINAL_SPLIT is not None
        result = _ORIGINAL_SPLIT(study, trials, n_below)
        self.key, self.result = (study, list(trials), n_below), result
        return result


_MEMO: contextvars.ContextVar[_SplitMemo | None] = contextvars.ContextVar(
    "hpsearch_tpe_split_memo", default=None
)


def _split_trials(
    study: optuna.Study, trials: list[FrozenTrial], n_below: int
) -> tuple[list[FrozenTrial], list[FrozenTrial]]:
    """Optuna's `_split_trials`; inside `TPESampler._sample`, through that sampler's memo."""
    memo = _MEMO.get()
    if memo is None:
        assert _ORIGINAL_SPLIT is not None
        return _ORIGINAL_SPLIT(study, trials, n_below)
    return memo.split(study, trials, n_below)


class TPESampler(optuna.samplers.TPESampler):
    """Optuna's TPE, its trials split once per sampled trial (see the module's docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._split_memo = _SplitMemo()

    def _sample(self, study: optuna.Study, trial: FrozenTrial, search_space: Any) -> Any:
        if not installed():
            return super()._sample(study, trial, search_space)
        token = _MEMO.set(self._split_memo)
        try:
            return super()._sample(study, trial, search_space)
        finally:
            _MEMO.reset(token)

    def _get_internal_repr(
        self, trials: list[FrozenTrial], search_space: dict[str, Any], study: optuna.Study
    ) -> dict[str, np.ndarray]:
        """Optuna's, for one parameter sampled on its own (univariate TPE): each trial's
        params are then `trial.params` (Optuna's `_get_params` reads more only for the
        multivariate TPE), and a trial counts where it has that parameter."""
        if self._multivariate is not False or len(search_space) != 1:
            return super()._get_internal_repr(trials, search_space, study)
        ((name, distribution),) = search_space.items()
        params = [t.params for t in trials]
        if isinstance(distribution, (FloatDistribution, IntDistribution)):
            # Their internal repr is float(value), for a value neither NaN nor, on a log
            # scale, <= 0: all at once; anything else goes one by one below, which raises
            # Optuna's error.
            try:
                values = np.fromiter((p[name] for p in params if name in p), dtype=float)
            except (TypeError, ValueError, OverflowError):
                values = None
            if (
                values is not None
                and not np.isnan(values).any()
                and not (distribution.log and (values <= 0).any())
            ):
                return {name: values}
        internal = distribution.to_internal_repr
        return {name: np.asarray([internal(p[name]) for p in params if name in p])}


def installed() -> bool:
    """Whether Optuna's TPE uses `log_ndtr`, `log_gauss_mass`, `log_gauss_mass_unique` and the
    split memo in this process."""
    return (
        _truncnorm._log_ndtr is log_ndtr
        and _truncnorm._log_gauss_mass is log_gauss_mass
        and _distributions._log_gauss_mass_unique is log_gauss_mass_unique
        and _tpe_sampler._split_trials is _split_trials
    )


def install() -> bool:
    """Put `log_ndtr` and the split memo in place in Optuna's TPE (idempotent); False where
    this Optuna's functions are not the ones reproduced here (then nothing changes)."""
    if installed():
        return True
    if (
        _SINGLE is None
        or _ORIGINAL.__module__ != _truncnorm.__name__
        or _ORIGINAL_SPLIT is None
        or _ORIGINAL_SPLIT.__module__ != _tpe_sampler.__name__
        or _ORIGINAL_MASS is None
        or _ORIGINAL_MASS.__module__ != _truncnorm.__name__
        or _ORIGINAL_MASS_UNIQUE is None
        or _ORIGINAL_MASS_UNIQUE.__module__ != _distributions.__name__
        or not all(
            hasattr(m, f)
            for m, f in (
                (_truncnorm, "_log_diff"),
                (_truncnorm, "_ndtr"),
                (_distributions, "_unique_inverse_2d"),
            )
        )
    ):
        return False
    _truncnorm._log_ndtr = log_ndtr
    _truncnorm._log_gauss_mass = log_gauss_mass
    _distributions._log_gauss_mass_unique = log_gauss_mass_unique
    _tpe_sampler._split_trials = _split_trials
    return True
