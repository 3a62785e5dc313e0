"""The PNG plots of `hpsearch compare`'s report (matplotlib loads only when they are drawn)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from search.compare.collect import RunResult
from search.study.space import FloatParam, IntParam, Param

__all__ = ["write_plots"]


def _score_param(params: Sequence[Param]) -> Param | None:
    """The parameter for the score-against-parameter plot: lr if there is one, else the first
    log-scale numeric one, else the first numeric one."""
    numeric = [p for p in params if isinstance(p, (FloatParam, IntParam))]
    for p in numeric:
        if p.name == "lr":
            return p
    logs = [p for p in numeric if p.log]
    return (logs or numeric or [None])[0]


def write_plots(
    results: Sequence[RunResult], summary: dict[str, Any], params: Sequence[Param], out: Path
) -> list[tuple[str, str]]:
    """Write the PNGs; returns (file name, caption) pairs."""
    import matplotlib  # loads only when plots are drawn (seconds of import otherwise)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(summary["strategies"])
    colors = {label: plt.get_cmap("tab10")(i % 10) for i, label in enumerate(labels)}
    metric, target = summary["metric"], summary["target"]["value"]
    written: list[tuple[str, str]] = []

    def save(fig: Any, name: str, caption: str) -> None:
        fig.tight_layout()
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        written.append((name, caption))

    # Best so far against trials finished.
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for label in labels:
        runs = [r for r in results if r.label == label]
        n = max((len(r.trials) for r in runs), default=0)
        if n == 0:
            continue
        curves = np.full((len(runs), n), np.nan)
        for i, r in enumerate(runs):
            for j, v in enumerate(r.best_so_far()):
                curves[i, j] = np.nan if v is None else v
        x = np.arange(1, n + 1)
        _band(ax, x, curves, colors[label], label)
    _finish_axes(ax, "trials finished", metric, target)
    save(
        fig,
        "best_vs_trials.png",
        "Best so far against trials finished: mean over repeats (line) and the range from the "
        "worst to the best repeat (band).",
    )

    # Best so far against epochs trained.
    fig, ax = plt.subplots(figsize=(7, 4.2))
    longest = max((r.epochs for r in results), default=0)
    x = np.linspace(0, max(longest, 1), 300)
    for label in labels:
        runs = [r for r in results if r.label == label and r.trials]
        if not runs:
            continue
        curves = np.full((len(runs), len(x)), np.nan)
        for i, r in enumerate(runs):
            spent = np.asarray(r.cumulative_epochs(), dtype=float)
            best = np.asarray([np.nan if v is None else v for v in r.best_so_far()], dtype=float)
            idx = np.searchsorted(spent, x, side="right") - 1
            ok = (idx >= 0) & (x <= spent[-1])
            curves[i, ok] = best[idx[ok]]
        _band(ax, x, curves, colors[label], label)
    _finish_axes(ax, "epochs trained (all trials of the study)", metric, target)
    save(
        fig,
        "best_vs_epochs.png",
        "Best so far against epochs trained, pruned trials' epochs included: mean over repeats "
        "and the worst-to-best band (a curve ends where its shortest repeat ended).",
    )

    # Distribution of final bests.
    fig, ax = plt.subplots(figsize=(7, 4.2))
    rng = np.random.default_rng(0)
    for i, label in enumerate(labels):
        bests = [b for b in summary["strategies"][label]["best_per_repeat"] if b is not None]
        if not bests:
            continue
        if len(bests) >= 3:
            ax.boxplot([bests], positions=[i], widths=0.5, showfliers=False)
        jitter = rng.uniform(-0.12, 0.12, len(bests))
        ax.scatter(np.full(len(bests), i) + jitter, bests, color=colors[label], zorder=3)
    ax.set_xticks(range(len(labels)), labels, rotation=20)
    ax.set_ylabel(f"final best {metric}")
    ax.grid(alpha=0.3)
    save(fig, "final_bests.png", "Final best of each repeat (dots), and their quartiles (box).")

    # Score against the learning rate, per strategy: what each sampler actually tried.
    param = _score_param(params)
    if param is not None:
        fig, axes = plt.subplots(
            1,
            len(labels),
            figsize=(3.4 * len(labels), 3.6),
            sharex=True,
            sharey=True,
            squeeze=False,
        )
        for ax, label in zip(axes[0], labels, strict=True):
            for state, marker, face in (("COMPLETE", "o", None), ("PRUNED", "o", "none")):
                pts = [
                    (t.params[param.name], t.value)
                    for r in results
                    if r.label == label
                    for t in r.trials
                    if t.state == state and t.value is not None and param.name in t.params
                ]
                if pts:
                    xs, ys = zip(*pts, strict=True)
                    ax.scatter(
                        xs,
                        ys,
                        s=18,
                        marker=marker,
                        facecolors=face or colors[label],
                        edgecolors=colors[label],
                        alpha=0.7,
                        label=state.lower(),
                    )
            if param.log:
                ax.set_xscale("log")
            ax.set_xlim(param.low, param.high)
            if target is not None:
                ax.axhline(target, color="grey", lw=0.8, ls="--")
            ax.set_title(label)
            ax.set_xlabel(param.name)
            ax.grid(alpha=0.3)
        axes[0][0].set_ylabel(metric)
        axes[0][0].legend(fontsize=7)
        save(
            fig,
            f"score_vs_{param.name}.png",
            f"{metric} of every trial against {param.name}, all repeats (hollow: pruned, at the "
            "epoch it stopped; dashed: the target).",
        )
    return written


def _band(ax: Any, x: Any, curves: Any, color: Any, label: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # columns where no repeat has a value
        mean = np.nanmean(curves, axis=0)
        low, high = np.nanmin(curves, axis=0), np.nanmax(curves, axis=0)
    ax.plot(x, mean, color=color, label=label)
    ax.fill_between(x, low, high, color=color, alpha=0.18, linewidth=0)


def _finish_axes(ax: Any, xlabel: str, metric: str, target: float | None) -> None:
    if target is not None:
        ax.axhline(target, color="grey", lw=0.8, ls="--", label=f"target {target:.4g}")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(f"best {metric} so far")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
