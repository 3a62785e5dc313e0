"""Samplers: the study config's `sampler` name made into an Optuna sampler.

Trials are sampled one at a time by whichever worker holds the study's sampling lock
(`search.sampling.sample_ahead`), so the process that samples changes over a study's life. A
sampler seeded once per process would make two processes draw the same sequence from one seed;
instead each trial's sampler is seeded from (study seed, trial number). Random search is
therefore reproducible trial by trial, and no two trials share a random stream. (Grid and QMC
are the exception: they walk one seeded sequence by trial number, so they keep the study seed.)

Example::

    >>> from search.study.space import FloatParam
    >>> distribution(FloatParam(name="lr", low=1e-4, high=1e-1, log=True))
    FloatDistribution(high=0.1, log=True, low=0.0001, step=None)
"""

from __future__ import annotations

import hashlib
import warnings
from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from search.sampling import fast_tpe
from search.sampling.bounded import bound
from search.sampling.multifidelity import (
    PRIOR_WEIGHT,
    across_fidelities,
    good_trials,
    uses_fidelities,
)
from search.study.settings import StudyConfig
from search.study.space import CategoricalParam, FloatParam, Param

__all__ = [
    "LEARNS_FROM_RESULTS",
    "STARTUP_TRIALS",
    "derived_seed",
    "distribution",
    "make_sampler",
    "suggest",
]

LEARNS_FROM_RESULTS = frozenset({"tpe", "cmaes", "gp"})
"""Samplers whose next point depends on finished trials: the queue ahead of them is kept short."""

STARTUP_TRIALS = {"tpe": 10, "gp": 10, "cmaes": 1}
"""Finished trials these samplers need before they learn (Optuna's `n_startup_trials`
defaults, passed by `make_sampler`; TPE's 10 was measured against 5 in bench/efficiency/runner.py,
see bench/BENCHMARKS.md); until then they sample at random, so their queue can be as deep as
random search's."""


def derived_seed(seed: int, number: int, purpose: str = "sampler") -> int:
    """A 32-bit seed for trial `number` of a study seeded with `seed`, independent per purpose."""
    digest = hashlib.blake2b(f"{purpose}:{seed}:{number}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "little")


def distribution(param: Param) -> BaseDistribution:
    """The Optuna distribution of a parameter spec."""
    if isinstance(param, FloatParam):
        return FloatDistribution(param.low, param.high, log=param.log, step=param.step)
    if isinstance(param, CategoricalParam):
        return CategoricalDistribution(param.choices)
    return IntDistribution(param.low, param.high, log=param.log, step=param.step)


def suggest(trial: optuna.Trial, param: Param) -> Any:
    """Sample one parameter into an Optuna trial (fixed params of enqueued trials win)."""
    dist = distribution(param)
    if isinstance(dist, FloatDistribution):
        return trial.suggest_float(param.name, dist.low, dist.high, log=dist.log, step=dist.step)
    if isinstance(dist, IntDistribution):
        return trial.suggest_int(param.name, dist.low, dist.high, log=dist.log, step=dist.step)
    return trial.suggest_categorical(param.name, dist.choices)


class _ConfigSpaceQMCSampler(optuna.samplers.QMCSampler):
    """Optuna's QMC sampler over the config's whole `[space]`, from the first trial on.

    Optuna's infers the space from the first finished trial (or from running trials that have
    params). hpsearch samples trials ahead, before any has run: every early trial fell back to
    the independent sampler, seeded alike, and drew the same point. The config's space is known
    and never conditional, so it is the space.
    """

    def __init__(self, search_space: dict[str, BaseDistribution], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._config_space = search_space

    def infer_relative_search_space(
        self, study: optuna.Study, trial: optuna.trial.FrozenTrial
    ) -> dict[str, BaseDistribution]:
        return dict(self._config_space)


def make_sampler(
    config: StudyConfig, trial_number: int, *, hedge: bool = False
) -> optuna.samplers.BaseSampler:
    """The sampler that picks trial `trial_number`'s parameters; `hedge`: the trial is a hedge
    (search.sampling.hedge), drawn at random."""
    name = config.study.sampler
    seed = derived_seed(config.study.seed, trial_number)
    with warnings.catch_warnings():
        # Multivariate TPE and QMC are marked experimental; their warnings are noise per trial.
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        # Optuna 4.9 marked TPE's `gamma` and `prior_weight` for removal in 6.0; hpsearch pins
        # optuna < 6 and passes both on purpose (the good set and its prior across
        # fidelities), so workers' logs stay clean.
        warnings.filterwarnings(
            "ignore",
            message=r"`(gamma|prior_weight)` has been deprecated",
            category=FutureWarning,
        )
        # Now and then a trial of a study fitted across fidelities is a hedge, drawn at random
        # (search.sampling.hedge: against a model that settles on what starts fast).
        if name == "random" or hedge:
            return optuna.samplers.RandomSampler(seed=seed)
        if name == "tpe":
            # Constant liar: running trials count as bad results, so parallel workers spread
            # out instead of piling onto the current best point. Under a pruner that stops
            # trials at rungs, TPE models each parameter on its own (Optuna's default): fitted
            # on every trial's epochs it was faster and never stuck on LCBench, where the joint
            # model settled on poor regions in some seeds (bench/BENCHMARKS.md).
            # Across fidelities its good set is the best 5% (Optuna's 10% settled on regions
            # that only look good early; search.sampling.multifidelity.GOOD_FRACTION), and
            # its prior weighs more than Optuna's one trial, so that a few good trials do
            # not pin a parameter to one value (multifidelity.PRIOR_WEIGHT).
            # Optuna's TPE, the same samples for less CPU (search.sampling.fast_tpe).
            fidelities = uses_fidelities(config)
            fast_tpe.install()
            tpe = fast_tpe.TPESampler(
                multivariate=not fidelities,
                constant_liar=True,
                seed=seed,
                n_startup_trials=STARTUP_TRIALS["tpe"],
                **({"gamma": good_trials, "prior_weight": PRIOR_WEIGHT} if fidelities else {}),
            )
            # Past 1,000 trials TPE sees a bounded view of the study (its good set
            # kept whole): its cost per trial stops growing (search/sampling/bounded.py).
            return bound(across_fidelities(config, tpe))
        # Grid and QMC walk one sequence (a shuffled grid, a scrambled Sobol sequence) indexed
        # by trial number or a counter in the study: every process must use the same seed.
        if name == "grid":
            return optuna.samplers.GridSampler(config.grid_values(), seed=config.study.seed)
        if name == "qmc":
            return _ConfigSpaceQMCSampler(
                {p.name: distribution(p) for p in config.space},
                scramble=True,
                seed=config.study.seed,
                independent_sampler=optuna.samplers.RandomSampler(seed=seed),
                warn_asynchronous_seeding=False,
            )
        if name == "cmaes":
            return optuna.samplers.CmaEsSampler(
                seed=seed,
                n_startup_trials=STARTUP_TRIALS["cmaes"],
                warn_independent_sampling=False,
            )
        if name == "gp":
            gp = optuna.samplers.GPSampler(
                seed=seed,
                n_startup_trials=STARTUP_TRIALS["gp"],
                warn_independent_sampling=False,
            )
            return across_fidelities(config, gp)
    raise ValueError(f"unknown sampler {name!r}")  # the config was validated: unreachable
