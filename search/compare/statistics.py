"""The statistics of `hpsearch compare`'s report, from what the studies hold (`collect`).

Per strategy: the best value of each repeat (the best COMPLETE trial, as `status` and Optuna's
``best_value`` say), their mean, standard deviation and a 95% bootstrap interval of the mean,
the distinct values tried per parameter, the epochs trained (one validation report per epoch,
pruned trials included) and the epochs trained until a repeat first reached the target.

The statistics are deliberately modest. Strategies are compared two by two with a two-sided
Mann-Whitney rank test on their final bests, Holm-adjusted for the number of pairs; a
difference is called significant only below 0.05 after adjustment, and with one repeat no
test is made and nothing is called better. The target for "epochs to target" is fixed from
all runs pooled before any strategy's epochs are counted: the 25th percentile of every run's
final best (for minimize, the 75th), i.e. a score three runs in four reached, whatever their
strategy; `--target` sets it by hand.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from search.compare.collect import RunResult
from search.compare.plan import CompareRequest
from search.study.space import Param

__all__ = [
    "ALPHA",
    "BOOTSTRAP_RESAMPLES",
    "TARGET_QUANTILE",
    "effect_words",
    "fmt",
    "pooled_target",
    "summarize",
]

TARGET_QUANTILE = 0.25
"""The target of "epochs to target": the score that 1 - TARGET_QUANTILE of all runs reached."""


ALPHA = 0.05
"""Significance level, after Holm's adjustment for the number of pairs."""


BOOTSTRAP_RESAMPLES = 10_000


def _bootstrap_ci(values: list[float]) -> list[float] | None:
    """95% percentile bootstrap interval of the mean (fixed seed: the report is reproducible)."""
    if len(values) < 2:
        return None
    rng = np.random.default_rng(0)
    data = np.asarray(values, dtype=float)
    means = data[rng.integers(0, len(data), size=(BOOTSTRAP_RESAMPLES, len(data)))].mean(axis=1)
    return [float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))]


def _bootstrap_difference(a: list[float], b: list[float]) -> list[float]:
    """95% percentile bootstrap interval of mean(a) - mean(b), each side resampled on its own
    (fixed seed: the report is reproducible)."""
    rng = np.random.default_rng(1)
    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    ma = xa[rng.integers(0, len(xa), size=(BOOTSTRAP_RESAMPLES, len(xa)))].mean(axis=1)
    mb = xb[rng.integers(0, len(xb), size=(BOOTSTRAP_RESAMPLES, len(xb)))].mean(axis=1)
    diff = ma - mb
    return [float(np.quantile(diff, 0.025)), float(np.quantile(diff, 0.975))]


def _effect(a: str, xa: list[float], b: str, xb: list[float], maximize: bool) -> dict[str, Any]:
    """Which of the two strategies leads (the better mean final best), by how much (leader's
    mean minus the other's, in the metric's units, with a 95% bootstrap interval) and in how
    many of the (run, run) pairings a run of the leader scored better."""
    better = (lambda x, y: x > y) if maximize else (lambda x, y: x < y)
    mean_a, mean_b = float(np.mean(xa)), float(np.mean(xb))
    if better(mean_b, mean_a):
        a, xa, b, xb, mean_a, mean_b = b, xb, a, xa, mean_b, mean_a
    wins = sum(better(x, y) for x in xa for y in xb)
    ties = sum(x == y for x in xa for y in xb)
    return {
        "leader": a,
        "other": b,
        "difference": mean_a - mean_b,
        "difference_ci95": _bootstrap_difference(xa, xb),
        "leader_ahead": wins,
        "ties": ties,
        "pairings": len(xa) * len(xb),
    }


def pooled_target(bests: list[float], maximize: bool) -> float:
    """The score that 1 - TARGET_QUANTILE of the runs reached: an observed final best."""
    if maximize:
        return float(np.quantile(bests, TARGET_QUANTILE, method="lower"))
    return float(np.quantile(bests, 1 - TARGET_QUANTILE, method="higher"))


def _median_reached(values: list[int | None]) -> float | None:
    """Median of epochs to target, a repeat that never reached it counting as infinite; None
    if half the repeats or more never reached it."""
    if not values:
        return None
    median = float(np.median([math.inf if v is None else v for v in values]))
    return None if math.isinf(median) or math.isnan(median) else median


def _holm(pvalues: list[float]) -> list[float]:
    order = sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    adjusted = [0.0] * len(pvalues)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(pvalues) - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def _smallest_p(n1: int, n2: int) -> float:
    """The smallest two-sided p an exact Mann-Whitney test can give for these sizes."""
    return min(1.0, 2 / math.comb(n1 + n2, n1))


def summarize(
    results: Sequence[RunResult],
    request: CompareRequest,
    params: Sequence[Param],
    grid: dict[str, list[Any]] | None,
) -> dict[str, Any]:
    """summary.json: per strategy and pairwise, computed from `results` only."""
    from scipy.stats import mannwhitneyu  # scipy loads only when a report is computed

    config = request.config
    maximize = config.study.direction == "maximize"
    labels = [s.label for s in request.strategies]
    by_label = {label: [r for r in results if r.label == label] for label in labels}
    bests_all = [r.best for r in results if r.best is not None]
    if request.target is not None:
        target = request.target
        rule = "given with --target"
    elif bests_all:
        target = pooled_target(bests_all, maximize)
        rule = (
            f"the {'25th' if maximize else '75th'} percentile of all {len(bests_all)} runs' final "
            "bests, pooled over every strategy and fixed before any strategy's epochs were "
            f"counted: {'at least 3 runs in 4' if len(bests_all) >= 4 else 'most runs'} reached it"
        )
    else:
        target, rule = None, "no run has a complete trial"

    strategies: dict[str, Any] = {}
    for s in request.strategies:
        runs = by_label[s.label]
        bests = [r.best for r in runs]
        have = [b for b in bests if b is not None]
        to_target = [r.epochs_to(target) if target is not None else None for r in runs]
        strategies[s.label] = {
            "sampler": s.sampler,
            "pruner": s.pruner,
            "studies": [r.name for r in runs],
            "seeds": [r.seed for r in runs],
            "best_per_repeat": bests,
            "mean": float(np.mean(have)) if have else None,
            "sd": float(np.std(have, ddof=1)) if len(have) >= 2 else None,
            "ci95": _bootstrap_ci(have),
            "trials_finished": [len(r.trials) for r in runs],
            "distinct_values": {p.name: [r.distinct(p.name) for r in runs] for p in params},
            "epochs_trained": [r.epochs for r in runs],
            "epochs_trained_total": sum(r.epochs for r in runs),
            "epochs_to_target": to_target,
            "epochs_to_target_median": _median_reached(to_target),
            "reached_target": sum(v is not None for v in to_target),
        }

    tests = []
    for a, b in itertools.combinations(labels, 2):
        xa = [v for v in strategies[a]["best_per_repeat"] if v is not None]
        xb = [v for v in strategies[b]["best_per_repeat"] if v is not None]
        if len(xa) < 2 or len(xb) < 2:
            continue
        u, p = mannwhitneyu(xa, xb, alternative="two-sided")
        share = float(u) / (len(xa) * len(xb))  # P(a run of a scores higher), ties count half
        tests.append(
            {
                "a": a,
                "b": b,
                "u": float(u),
                "p": float(p),
                "a_better_share": share if maximize else 1 - share,
                "smallest_possible_p": _smallest_p(len(xa), len(xb)),
                **_effect(a, xa, b, xb, maximize),
            }
        )
    for test, adjusted in zip(tests, _holm([t["p"] for t in tests]), strict=True):
        test["p_holm"] = adjusted
        test["significant"] = adjusted < ALPHA

    summary = {
        "config": request.config_path,
        "study": config.study.name,
        "metric": config.study.metric,
        "direction": config.study.direction,
        "budget": request.budget,
        "budget_epochs": request.budget_epochs,
        "repeats": request.repeats,
        "epochs_per_trial": config.task.epochs,
        "grid": grid,
        "target": {"value": target, "rule": rule},
        "strategies": strategies,
        "tests": tests,
        "alpha": ALPHA,
    }
    summary["conclusions"] = _conclusions(summary)
    return summary


def fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"


def effect_words(test: dict[str, Any], direction: str) -> str:
    """The effect in words that read the right way round, whatever the test says: 'random
    ends 0.04 higher than grid (95% interval 0.021 to 0.059); random ahead in 9 of 9
    pairings'. For minimize, 'lower' (the better way), the interval signed the same way."""
    leader, other = test["leader"], test["other"]
    low, high = test["difference_ci95"]
    difference = test["difference"]
    if direction == "minimize":
        difference, low, high = -difference, -high, -low
    way = "higher" if direction == "maximize" else "lower"
    if difference == 0:
        words = f"{leader} and {other} end level on average"
    else:
        words = f"{leader} ends {difference:.3g} {way} than {other}"
    ties = test["ties"]
    tied = "" if not ties else f" ({ties} tied)"
    return (
        f"{words} (95% interval {low:.3g} to {high:.3g}); {leader} ahead in "
        f"{test['leader_ahead']} of {test['pairings']} pairings{tied}"
    )


def _conclusions(summary: dict[str, Any]) -> list[str]:
    strategies = summary["strategies"]
    out = []
    if summary["repeats"] < 2:
        out.append(
            "One repeat per strategy: one run says nothing about which strategy is better, so "
            "no test was made and no strategy is named better; use --repeats 5 or more."
        )
    for t in summary["tests"]:
        a, b = t["a"], t["b"]
        stats = (
            f"Mann-Whitney U = {t['u']:g}, p = {t['p']:.3g}, Holm-adjusted p = {t['p_holm']:.3g}"
        )
        effect = effect_words(t, summary["direction"])
        if t["significant"]:
            out.append(f"{t['leader']} beats {t['other']}: {effect}; significant ({stats}).")
        else:
            n_a, n_b = len(strategies[a]["best_per_repeat"]), len(strategies[b]["best_per_repeat"])
            repeats = f"{n_a} repeats" if n_a == n_b else f"{n_a} and {n_b} repeats"
            line = f"{effect}; not significant with {repeats} ({stats})."
            if t["smallest_possible_p"] * len(summary["tests"]) >= summary["alpha"]:
                line += f" With {repeats} no difference could be significant; use more repeats."
            out.append(line)
    if summary["tests"]:
        labels = list(strategies)
        winners = [
            s
            for s in labels
            if all(
                t["significant"] and (t["a_better_share"] > 0.5) == (t["a"] == s)
                for t in summary["tests"]
                if s in (t["a"], t["b"])
            )
        ]
        if len(labels) > 1 and winners:
            out.append(f"{winners[0]} is significantly better than every other strategy here.")
        elif len(labels) > 2:
            out.append("No strategy is significantly better than all the others.")
    target = summary["target"]
    if target["value"] is not None:
        parts = []
        for label, s in strategies.items():
            median = s["epochs_to_target_median"]
            shown = "not reached by half" if median is None else f"median {median:g} epochs"
            parts.append(f"{label} {shown} ({s['reached_target']}/{len(s['studies'])} reached)")
        out.append(f"Epochs to target {target['value']:.4g}: " + "; ".join(parts) + ".")
    return out
