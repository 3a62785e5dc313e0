"""Samplers that learn across fidelities: every trial's epochs inform the next point.

Under a pruner most trials never finish: they stop (or pause) at a rung after a few epochs.
A sampler that learns only from finished trials learns from few; Optuna's Hyperband shows
each bracket's sampler only the trials of that bracket. `FidelitySampler` wraps a model-based
sampler (TPE, GP) and shows it every trial of the study, each with what it reported so far,
before every sample, in one of two ways (`mode`):

- ``"rung"`` (BOHB, Falkner et al. 2018): the model is fitted on the highest epoch that at
  least `min_points` trials have reported; those trials are shown finished (COMPLETE) with their
  value at that epoch. Trials that stopped below it are shown pruned at their last report (the
  inner sampler ranks them below every complete one), running trials without reports as
  running (TPE's constant liar counts them as bad).
- ``"rank"``: every trial that reported but did not finish is shown pruned at its last report
  (paused and running trials included); TPE ranks pruned trials by the epoch reached, then by
  the value there, below the complete ones.

Which one hpsearch uses, and the settings, were measured in bench/efficiency/runner.py on YAHPO's
LCBench surrogate (bench/BENCHMARKS.md, "Search efficiency"). `make_sampler` wraps TPE and GP in
it when the pruner is hyperband, successive halving or asha.

Example::

    >>> import optuna
    >>> from optuna.trial import TrialState, create_trial
    >>> from optuna.distributions import FloatDistribution
    >>> d = {"x": FloatDistribution(0, 1)}
    >>> paused = create_trial(state=TrialState.RUNNING, params={"x": 0.3}, distributions=d,
    ...                       intermediate_values={1: 0.5, 3: 0.7})
    >>> done = create_trial(state=TrialState.COMPLETE, value=0.9, params={"x": 0.5},
    ...                     distributions=d, intermediate_values={1: 0.6, 3: 0.8, 9: 0.9})
    >>> [(t.state.name, t.value) for t in fidelity_view([paused, done], "rung", min_points=2)]
    [('COMPLETE', 0.7), ('COMPLETE', 0.8)]
"""

from __future__ import annotations

import copy
import math
from collections import Counter
from collections.abc import Container, Sequence
from typing import Any, Literal

import optuna
from optuna.distributions import BaseDistribution
from optuna.trial import FrozenTrial, TrialState

__all__ = [
    "FIDELITY_PRUNERS",
    "MODES",
    "FidelitySampler",
    "across_fidelities",
    "fidelity_view",
    "good_trials",
    "trial_as",
    "uses_fidelities",
]

MODES = ("rung", "rank")

FIDELITY_PRUNERS = frozenset({"hyperband", "successive_halving", "asha"})
"""Pruners under which TPE and GP learn across fidelities: trials stop (or pause) at rungs."""

FIDELITY_SAMPLERS = frozenset({"tpe", "gp"})

GOOD_FRACTION = 0.05
"""The share of trials TPE across fidelities counts as good (Optuna's default is 10%, capped at
25 trials). Measured on LCBench's development suite (bench/BENCHMARKS.md, "A narrower good
set"): with 10% the model settled on a region that is good after a few epochs and stayed
there on some instances (167181: every new trial had one layer and ended 5-11 points below
random search); with 5% it reached random search's final sooner on 17 of 24 instances and
ended below it on none."""

GOOD_CAP = 25

PRIOR_WEIGHT = 3.0
"""How many trials TPE across fidelities counts its prior as (Optuna's `prior_weight`, 1 by
default): each parameter's good density is its few good trials (the best 5%: 1 to 25) plus a
broad prior over the whole range, weighted like this many trials. With Optuna's 1 the good
density of a handful of trials could settle on one value of a parameter within ~50 trials and
never leave it (LCBench 167181: one-layer networks lead after one epoch, only five-layer ones
reach 90%; 2 of 10 seeds kept sampling one layer and ended 11-13 points below random
search). Measured on LCBench's development suite, 10 seeds (bench/BENCHMARKS.md, "A heavier
prior"): with 3, no instance of the 24 ends below random search and 237 of 240 seeds reach its
final (with 1: 167181 below, 233), at a lower median speedup (9.1x against 12.3x); 2 was
faster on the median (11.6x) but reached the final on fewer seeds (229), 2.5 on neither."""


def good_trials(n: int) -> int:
    """How many of `n` trials TPE across fidelities fits its good density on (its `gamma`).

    >>> [good_trials(n) for n in (1, 20, 100, 1000)]
    [1, 1, 5, 25]
    """
    return min(math.ceil(GOOD_FRACTION * n), GOOD_CAP)


MIN_POINTS = 5
"""Trials that must have reached an epoch before the model is fitted there ("rung" mode).
Measured on LCBench (bench/BENCHMARKS.md): 5 reached good configurations sooner than 10 and
20, with final values as good; TPE ranks the rest (pruned below complete) meanwhile."""


def uses_fidelities(config: Any) -> bool:
    """Whether a study config's sampler learns across fidelities (a StudyConfig)."""
    return config.study.sampler in FIDELITY_SAMPLERS and config.pruner.type in FIDELITY_PRUNERS


Mode = Literal["rung", "rank"]


def trial_as(trial: FrozenTrial, state: TrialState, value: float | None) -> FrozenTrial:
    """A copy of `trial` shown to a sampler in `state` with `value` (no deep copy)."""
    return FrozenTrial(
        number=trial.number,
        state=state,
        value=value,
        values=None,
        datetime_start=trial.datetime_start,
        datetime_complete=trial.datetime_complete,
        params=trial.params,
        distributions=trial.distributions,
        user_attrs=trial.user_attrs,
        system_attrs=trial.system_attrs,
        intermediate_values=trial.intermediate_values,
        trial_id=trial._trial_id,
    )


def _reports(trial: FrozenTrial) -> dict[int, float]:
    """A trial's reports; a complete trial that reported nothing counts its value at step 0."""
    if trial.intermediate_values:
        return trial.intermediate_values
    if trial.state == TrialState.COMPLETE and trial.value is not None:
        return {0: trial.value}
    return {}


def fidelity_view(trials: Sequence[FrozenTrial], mode: Mode, min_points: int) -> list[FrozenTrial]:
    """The trials as the inner sampler should see them (see the module's docstring).

    Failed trials and trials without params are left out; the order is kept."""
    usable = [
        t for t in trials if t.params and t.state not in (TrialState.FAIL, TrialState.WAITING)
    ] + [t for t in trials if t.params and t.state == TrialState.WAITING]
    usable.sort(key=lambda t: t.number)
    out: list[FrozenTrial] = []
    if mode == "rank":
        for t in usable:
            reports = _reports(t)
            if t.state == TrialState.COMPLETE or not reports:
                out.append(
                    t if t.state != TrialState.WAITING else trial_as(t, TrialState.RUNNING, None)
                )
            else:
                out.append(trial_as(t, TrialState.PRUNED, None))
        return out
    # "rung": the highest step that at least min_points trials reported.
    counts: Counter[int] = Counter()
    for t in usable:
        counts.update(_reports(t).keys())
    level = max((step for step, n in counts.items() if n >= min_points), default=None)
    for t in usable:
        reports = _reports(t)
        if level is not None and level in reports:
            out.append(trial_as(t, TrialState.COMPLETE, reports[level]))
        elif t.state == TrialState.COMPLETE and level is None:
            out.append(t)
        elif reports:
            out.append(trial_as(t, TrialState.PRUNED, None))
        else:
            out.append(trial_as(t, TrialState.RUNNING, None))
    return out


class _StudyView(optuna.Study):
    """The study as the inner sampler reads it: Optuna's study, with the trials replaced."""

    def __init__(self, study: optuna.Study, trials: list[FrozenTrial]) -> None:
        self.__dict__.update(study.__dict__)
        self._view = trials

    def _get_trials(
        self,
        deepcopy: bool = True,
        states: Container[TrialState] | None = None,
        use_cache: bool = False,
    ) -> list[FrozenTrial]:
        trials = self._view if states is None else [t for t in self._view if t.state in states]
        return copy.deepcopy(trials) if deepcopy else trials

    def get_trials(
        self,
        deepcopy: bool = True,
        states: Container[TrialState] | None = None,
    ) -> list[FrozenTrial]:
        return self._get_trials(deepcopy=deepcopy, states=states)


class FidelitySampler(optuna.samplers.BaseSampler):
    """`inner` (TPE, GP) fitted on every trial's reports, as `fidelity_view` shows them.

    `min_points`: for mode "rung", how many trials must have reached an epoch for the model to
    be fitted there. Until `startup` trials have reported anything, the inner sampler's own
    start-up (random points) decides.
    """

    def __init__(
        self, inner: optuna.samplers.BaseSampler, mode: Mode = "rung", min_points: int = 10
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        self.inner, self.mode, self.min_points = inner, mode, min_points
        self._cached: tuple[int, int, optuna.Study] | None = None

    def _view(self, study: optuna.Study, trial: FrozenTrial) -> optuna.Study:
        trials = study._get_trials(deepcopy=False, use_cache=True)
        # One view per trial being sampled: its params are sampled with the same trials.
        key = (trial.number, len(trials))
        if self._cached is None or self._cached[:2] != key:
            view = _StudyView(study, fidelity_view(trials, self.mode, self.min_points))
            self._cached = (*key, view)
        return self._cached[2]

    def infer_relative_search_space(
        self, study: optuna.Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        return self.inner.infer_relative_search_space(self._view(study, trial), trial)

    def sample_relative(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        search_space: dict[str, BaseDistribution],
    ) -> dict[str, Any]:
        return self.inner.sample_relative(self._view(study, trial), trial, search_space)

    def sample_independent(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        return self.inner.sample_independent(
            self._view(study, trial), trial, param_name, param_distribution
        )

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self.inner.before_trial(study, trial)

    def after_trial(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        state: TrialState,
        values: Sequence[float] | None,
    ) -> None:
        self.inner.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.inner.reseed_rng()


def across_fidelities(
    config: Any, inner: optuna.samplers.BaseSampler
) -> optuna.samplers.BaseSampler:
    """`inner` wrapped in a `FidelitySampler` when the study's pruner stops trials at rungs."""
    if not uses_fidelities(config):
        return inner
    return FidelitySampler(inner, mode="rung", min_points=MIN_POINTS)
