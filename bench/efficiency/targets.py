"""Issue 27's targets for a strategy (item 5; item 8 on the other metrics and budgets), read off
one run of `python -m bench.efficiency` on LCBench: the table its report ends with, and the
`targets` of its JSON.

The targets, for instances n (24 on the development suite; counts out of 24 are scaled):

- the median speedup over the instances >= 12x;
- on every instance at least the best of the peers measured in the same run (plain Optuna TPE,
  TPE + Hyperband, the SH bracket), within the strategy's 90% interval: the interval's top
  reaches the best peer's speedup;
- 1.3x that best peer on the median of the per-instance ratios;
- with `smac-mf` in the run: ahead of it on the median speedup and on 20 of 24 instances, and a
  final within 1 point of its final on the median;
- a final no worse than plain TPE's minus 0.5 points on 22 of 24 instances (`tpe_tolerance`),
  and never below random search's (the target itself);
- at least 97% of the instance-seeds reach the target.

A target whose strategies are not in the run is left out.

    >>> tpe_tolerance("val_accuracy", 91.0), tpe_tolerance("val_cross_entropy", -0.8)
    (0.5, 0.004)
"""

from __future__ import annotations

import math
import statistics
from typing import Any

__all__ = ["PEERS", "TPE_TOLERANCE", "item5", "print_item5", "tolerance_label", "tpe_tolerance"]

PEERS = ("optuna-tpe", "optuna-tpe-hyperband", "sh-bracket")
"""The peers item 5 asks the strategy to be at least as fast as, on every instance."""

TPE_TOLERANCE: dict[str, tuple[float, bool]] = {
    "val_accuracy": (0.5, False),
    "val_balanced_accuracy": (0.005, False),
    "val_cross_entropy": (0.005, True),
}
"""Issue 27's "final no worse than plain TPE's minus 0.5 points", per metric, as (amount,
relative): half a point of accuracy in percent (`val_accuracy`), the same half point as a
fraction (`val_balanced_accuracy`); cross-entropy has no points: half a percent of plain TPE's
final."""


def tpe_tolerance(metric: str, tpe_final: float) -> float:
    """How far below plain TPE's final value a strategy's final may end and still count as no
    worse, in the metric's own units (its score: cross-entropy negated)."""
    amount, relative = TPE_TOLERANCE[metric]
    return amount * abs(tpe_final) if relative else amount


def tolerance_label(metric: str) -> str:
    """The tolerance as the tables print it: "0.5", "0.005", "0.5%" (of plain TPE's final)."""
    amount, relative = TPE_TOLERANCE[metric]
    return f"{100 * amount:g}%" if relative else f"{amount:g}"


def _share(count: int, n: int) -> int:
    """`count` of 24 instances, scaled to `n`."""
    return math.ceil(count * n / 24)


def item5(
    instances: dict[str, dict[str, Any]],
    metric: str,
    maximize: bool,
    budget: int,
    strategy: str = "default",
) -> list[dict[str, Any]]:
    """Each target as {"target", "measured", "met"}, from a run's per-instance summaries
    (`instances[i]["target"]` and `instances[i]["strategies"][name]` as the runner's JSON holds
    them: speedup, speedup_ci90, final_mean, seeds, seeds_reached). The 12x median is set for
    5,000 epochs: at another budget it is shown, and `met` is None (a budget of a few full
    trainings cannot reach it: the first full training ends after ~170 epochs)."""
    sign = 1.0 if maximize else -1.0
    runs = {i: v["strategies"] for i, v in instances.items() if strategy in v["strategies"]}
    if not runs:
        return []
    n = len(runs)
    mine = {i: s[strategy] for i, s in runs.items()}
    speed = {i: s["speedup"] or 0.0 for i, s in mine.items()}
    score = {i: sign * s["final_mean"] for i, s in mine.items()}
    rows: list[dict[str, Any]] = []

    def row(target: str, measured: str, met: bool | None) -> None:
        rows.append({"target": target, "measured": measured, "met": met})

    median = statistics.median(speed.values())
    if budget == 5000:
        row("median speedup >= 12x", f"{median:.1f}x", median >= 12)
    else:
        row("median speedup >= 12x (set for 5,000 epochs)", f"{median:.1f}x", None)
    peers = [p for p in PEERS if all(p in s for s in runs.values())]
    if peers:
        best = {i: max(runs[i][p]["speedup"] or 0.0 for p in peers) for i in runs}
        within = [i for i in runs if mine[i]["speedup_ci90"][1] >= best[i]]
        behind = sorted(set(runs) - set(within))
        row(
            f"at least the best of {', '.join(peers)} within the 90% interval, every instance",
            f"{len(within)}/{n}" + (f" (behind: {', '.join(behind)})" if behind else ""),
            len(within) == n,
        )
        ratios = [
            speed[i] / best[i] if best[i] else (1.0 if not speed[i] else math.inf) for i in runs
        ]
        ratio = statistics.median(ratios)
        row("1.3x the best peer on the median", f"{ratio:.2f}x", ratio >= 1.3)
    if all("smac-mf" in s for s in runs.values()):
        smac = {i: runs[i]["smac-mf"] for i in runs}
        smac_median = statistics.median(s["speedup"] or 0.0 for s in smac.values())
        row(
            "ahead of smac-mf on the median speedup",
            f"{median:.1f}x against {smac_median:.1f}x",
            median > smac_median,
        )
        ahead = sum(speed[i] > (smac[i]["speedup"] or 0.0) for i in runs)
        row(
            f"ahead of smac-mf on at least {_share(20, n)} of {n} instances",
            f"{ahead}/{n}",
            ahead >= _share(20, n),
        )
        gaps = [
            (score[i] - sign * smac[i]["final_mean"])
            / (2 * tpe_tolerance(metric, sign * smac[i]["final_mean"]))
            for i in runs
        ]
        gap = statistics.median(gaps)
        row(
            "final within 1 point of smac-mf's on the median",
            f"{gap:+.2f} points" + ("" if metric == "val_accuracy" else " (in 1-point units)"),
            gap >= -1,
        )
    if all("optuna-tpe" in s for s in runs.values()):
        tpe = {i: sign * runs[i]["optuna-tpe"]["final_mean"] for i in runs}
        near = [i for i in runs if score[i] >= tpe[i] - tpe_tolerance(metric, tpe[i])]
        row(
            f"final >= plain TPE's - {tolerance_label(metric)} on at least {_share(22, n)} "
            f"of {n} instances",
            f"{len(near)}/{n}",
            len(near) >= _share(22, n),
        )
    below = sorted(i for i in runs if score[i] < sign * instances[i]["target"])
    row(
        "never below random search's final",
        f"{len(below)} below" + (f" ({', '.join(below)})" if below else ""),
        not below,
    )
    seeds = sum(s["seeds"] for s in mine.values())
    reached = sum(s["seeds_reached"] for s in mine.values())
    row(
        ">= 97% of instance-seeds reach the target",
        f"{reached}/{seeds} ({100 * reached / seeds:.1f}%)",
        reached >= 0.97 * seeds,
    )
    return rows


def print_item5(rows: list[dict[str, Any]], strategy: str) -> None:
    """The targets as a table."""
    if not rows:
        return
    print(f"\nissue 27's targets (item 5) for {strategy}\n")
    print("| target | measured | |")
    print("| --- | --- | --- |")
    for r in rows:
        met = "-" if r["met"] is None else "met" if r["met"] else "missed"
        print(f"| {r['target']} | {r['measured']} | {met} |")
