"""The statistics of bench/efficiency/runner.py: incumbents against epochs, speedup, bootstrap CI.

A run (one study, one seed) is its list of fully trained trials, each as (the study's cumulative
trained epochs when it finished, its value), and the epochs it spent. Its incumbent at epoch e is
the best value among the trials finished by then (-inf before the first). Over the seeds of a
strategy, the mean incumbent at e is defined once every seed has finished a trial.

speedup = budget / the first epoch at which the strategy's mean incumbent reaches the target
(random search's mean final value in the same run); None if it never does. Its confidence
interval resamples the strategy's seeds with replacement (the target stays fixed); a resample
that never reaches the target counts as speedup 0.

A minimised metric (`maximize=False` in `summarize`) is the same computation on the negated
values: the incumbent is the lowest value, the target is reached from above, and the finals are
reported as the metric's own values.

Across instances (`distribution`): the median, 10th percentile and minimum of the per-instance
speedups (an instance whose mean incumbent never reaches the target counts as 0), and the share
of all instance-seeds whose own incumbent reached their instance's target.

Example::

    >>> runs = [Run([(100, 0.8), (300, 0.9)], 400), Run([(200, 0.85)], 400)]
    >>> incumbents(runs, 400)[:, [99, 199, 299]].tolist()
    [[0.8, 0.8, 0.9], [-inf, 0.85, 0.85]]
    >>> round(speedup(runs, 400, target=0.85), 2)  # the mean reaches 0.85 at epoch 300
    1.33
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "Run",
    "distribution",
    "epochs_to",
    "incumbents",
    "negated",
    "speedup",
    "speedup_ci",
    "summarize",
]


@dataclass
class Run:
    """One study: its fully trained trials as (cumulative epochs at their end, value), and the
    epochs it trained in all."""

    finished: list[tuple[int, float]]
    epochs: int
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def final(self) -> float:
        return max((v for _, v in self.finished), default=-math.inf)


def incumbents(runs: Sequence[Run], budget: int) -> np.ndarray:
    """[seed, e - 1] -> best value finished by epoch e (maximized; -inf before any)."""
    out = np.full((len(runs), budget), -np.inf)
    for i, run in enumerate(runs):
        for at, value in run.finished:
            at = max(1, min(at, budget))
            out[i, at - 1] = max(out[i, at - 1], value)
        np.maximum.accumulate(out[i], out=out[i])
    return out


def _first_reach(mean: np.ndarray, target: float) -> int | None:
    hits = np.nonzero(mean >= target)[0]
    return int(hits[0]) + 1 if len(hits) else None


def speedup(runs: Sequence[Run], budget: int, target: float) -> float | None:
    """budget / the first epoch at which the mean incumbent reaches `target` (None: never)."""
    first = _first_reach(incumbents(runs, budget).mean(axis=0), target)
    return budget / first if first else None


def speedup_ci(
    runs: Sequence[Run],
    budget: int,
    target: float,
    *,
    n_boot: int = 2000,
    level: float = 0.9,
    seed: int = 0,
) -> tuple[float, float]:
    """A percentile bootstrap interval of `speedup` over the seeds (0: never reached)."""
    curves = incumbents(runs, budget)
    rng = np.random.default_rng(seed)
    n = len(runs)
    values = np.empty(n_boot)
    for start in range(0, n_boot, 200):
        idx = rng.integers(0, n, size=(min(200, n_boot - start), n))
        means = curves[idx].mean(axis=1)  # [boot, budget]
        reached = means >= target
        first = np.where(reached.any(axis=1), reached.argmax(axis=1) + 1, 0)
        values[start : start + len(first)] = np.where(first > 0, budget / np.maximum(first, 1), 0)
    lo, hi = np.quantile(values, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def epochs_to(run: Run, target: float) -> float:
    """The run's cumulative epochs when a trial first reached `target` (inf: never)."""
    hits = [at for at, value in run.finished if value >= target]
    return float(min(hits)) if hits else math.inf


def negated(run: Run) -> Run:
    """The run with every value negated (a minimised metric as a maximised one)."""
    return Run([(at, -value) for at, value in run.finished], run.epochs, run.extra)


def summarize(
    runs: Sequence[Run], budget: int, target: float, *, maximize: bool = True
) -> dict[str, Any]:
    """One strategy's entry of the JSON: final mean and sd, speedup and its CI, seeds that
    reached the target, median epochs to it (None when most seeds never did). The final mean
    and sd are None when a seed trained no trial fully within the budget. With
    `maximize=False` lower values are better (the finals stay the metric's own values)."""
    if not maximize:
        out = summarize([negated(r) for r in runs], budget, -target)
        if out["final_mean"] is not None:
            out["final_mean"] = -out["final_mean"]
        return out
    # A seed that trained no trial fully within the budget has no final: the strategy's mean
    # final is then undefined (None), not -inf, and `seeds_without_final` says how many.
    without = sum(1 for r in runs if not r.finished)
    final_mean = final_sd = None
    if not without:
        finals = [r.final for r in runs]
        final_mean = statistics.fmean(finals)
        final_sd = statistics.stdev(finals) if len(finals) > 1 else 0.0
    to = sorted(epochs_to(r, target) for r in runs)
    median = statistics.median(to)
    ci = speedup_ci(runs, budget, target)
    return {
        "seeds": len(runs),
        "final_mean": final_mean,
        "final_sd": final_sd,
        "seeds_without_final": without,
        "speedup": speedup(runs, budget, target),
        "speedup_ci90": list(ci),
        "seeds_reached": sum(1 for t in to if math.isfinite(t)),
        "median_epochs_to_target": median if math.isfinite(median) else None,
        "epochs_mean": statistics.fmean(r.epochs for r in runs),
        "fully_trained_mean": statistics.fmean(len(r.finished) for r in runs),
    }


def distribution(per_instance: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Across instances, from `summarize`'s entries of one strategy (one per instance): median,
    10th percentile and minimum speedup (never reached: 0), instances reached, instance-seeds
    that reached the target and their share, the median final mean (of the instances where
    every seed trained a trial fully) and how many instances are left out of it."""
    speedups = np.array([s["speedup"] or 0.0 for s in per_instance], dtype=float)
    finals = [s["final_mean"] for s in per_instance if s["final_mean"] is not None]
    seeds = sum(s["seeds"] for s in per_instance)
    reached = sum(s["seeds_reached"] for s in per_instance)
    return {
        "instances": len(per_instance),
        "speedup_median": float(np.median(speedups)) if len(speedups) else None,
        "speedup_p10": float(np.quantile(speedups, 0.1)) if len(speedups) else None,
        "speedup_min": float(speedups.min()) if len(speedups) else None,
        "instances_reached": int((speedups > 0).sum()),
        "instance_seeds": seeds,
        "instance_seeds_reached": reached,
        "reached_share": reached / seeds if seeds else None,
        "final_mean_median": float(np.median(finals)) if finals else None,
        "instances_without_final": len(per_instance) - len(finals),
    }
