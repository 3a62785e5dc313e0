"""The report of `hpsearch compare`, computed from what the studies in the storage hold.

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

import base64
import html
import itertools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import optuna
from optuna.trial import TrialState

from search.db.storage import Storage
from search.study.space import FloatParam, IntParam, Param
from search.study.studies import StudyRef
from search.worker.artifacts import DirectoryArtifactStore, artifact_store_for

if TYPE_CHECKING:
    from search.compare.run import CompareRequest, CompareRun

__all__ = [
    "TARGET_QUANTILE",
    "RunResult",
    "WrittenReport",
    "attach_report",
    "collect",
    "summarize",
    "write_report",
]

TARGET_QUANTILE = 0.25
"""The target of "epochs to target": the score that 1 - TARGET_QUANTILE of all runs reached."""
ALPHA = 0.05
"""Significance level, after Holm's adjustment for the number of pairs."""
BOOTSTRAP_RESAMPLES = 10_000
REPORT_ATTR = "hpsearch:compare_report"
"""Study system attribute: the artifact ids of the attached report (replaced on a rerun)."""


@dataclass
class TrialPoint:
    """A finished trial, as the report needs it."""

    number: int
    state: str
    value: float | None
    params: dict[str, Any]
    epochs: int
    """Epochs trained: the trial's validation reports (one per epoch)."""


@dataclass
class RunResult:
    """One study of the comparison, its finished trials in the order they finished."""

    name: str
    label: str
    repeat: int
    seed: int
    maximize: bool
    trials: list[TrialPoint] = field(default_factory=list)

    def better(self, a: float, b: float) -> bool:
        return a > b if self.maximize else a < b

    def best_so_far(self) -> list[float | None]:
        """After each finished trial: the best COMPLETE value so far (None before the first)."""
        out: list[float | None] = []
        best: float | None = None
        for t in self.trials:
            complete = t.state == "COMPLETE" and t.value is not None
            if complete and (best is None or self.better(t.value, best)):  # type: ignore[arg-type]
                best = t.value
            out.append(best)
        return out

    @property
    def best(self) -> float | None:
        so_far = self.best_so_far()
        return so_far[-1] if so_far else None

    def cumulative_epochs(self) -> list[int]:
        return list(itertools.accumulate(t.epochs for t in self.trials))

    @property
    def epochs(self) -> int:
        return sum(t.epochs for t in self.trials)

    def epochs_to(self, target: float) -> int | None:
        """Epochs trained by all trials finished up to the first COMPLETE one that reached
        `target` (that trial included); None if none did."""
        for best, spent in zip(self.best_so_far(), self.cumulative_epochs(), strict=True):
            if best is not None and not self.better(target, best):
                return spent
        return None

    def distinct(self, param: str) -> int:
        return len({repr(t.params[param]) for t in self.trials if param in t.params})


def collect(
    storage: Storage, runs: Sequence[CompareRun], refs: Sequence[StudyRef]
) -> list[RunResult]:
    """Every study's finished trials, read through Optuna from the storage."""
    results = []
    for run, ref in zip(runs, refs, strict=True):
        study = optuna.load_study(study_name=ref.name, storage=storage.optuna_storage())
        finished = study.get_trials(
            deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
        )
        finished.sort(key=lambda t: (t.datetime_complete or t.datetime_start, t.number))
        results.append(
            RunResult(
                name=ref.name,
                label=run.strategy.label,
                repeat=run.repeat,
                seed=run.seed,
                maximize=run.config.study.direction == "maximize",
                trials=[
                    TrialPoint(
                        number=t.number,
                        state=t.state.name,
                        value=t.value if t.state != TrialState.FAIL else None,
                        params=dict(t.params),
                        epochs=len(t.intermediate_values),
                    )
                    for t in finished
                ],
            )
        )
    return results


# -- statistics --------------------------------------------------------------------------------


def _bootstrap_ci(values: list[float]) -> list[float] | None:
    """95% percentile bootstrap interval of the mean (fixed seed: the report is reproducible)."""
    if len(values) < 2:
        return None
    rng = np.random.default_rng(0)
    data = np.asarray(values, dtype=float)
    means = data[rng.integers(0, len(data), size=(BOOTSTRAP_RESAMPLES, len(data)))].mean(axis=1)
    return [float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))]


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
    from scipy.stats import mannwhitneyu

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


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"


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
        if t["significant"]:
            better, worse = (a, b) if t["a_better_share"] > 0.5 else (b, a)
            share = max(t["a_better_share"], 1 - t["a_better_share"])
            out.append(
                f"{better} beats {worse}: mean final best {_fmt(strategies[better]['mean'])} vs "
                f"{_fmt(strategies[worse]['mean'])} ({stats}; a run of {better} scored higher "
                f"than a run of {worse} in {share:.0%} of pairings)."
            )
        else:
            line = f"{a} vs {b}: no significant difference ({stats})."
            if t["smallest_possible_p"] * len(summary["tests"]) >= summary["alpha"]:
                line += (
                    f" With {len(strategies[a]['best_per_repeat'])} and "
                    f"{len(strategies[b]['best_per_repeat'])} repeats no difference could be "
                    "significant here; use more repeats."
                )
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


# -- plots ---------------------------------------------------------------------------------------


def _score_param(params: Sequence[Param]) -> Param | None:
    """The parameter for the score-against-parameter plot: lr if there is one, else the first
    log-scale numeric one, else the first numeric one."""
    numeric = [p for p in params if isinstance(p, (FloatParam, IntParam))]
    for p in numeric:
        if p.name == "lr":
            return p
    logs = [p for p in numeric if p.log]
    return (logs or numeric or [None])[0]


def _plots(
    results: Sequence[RunResult], summary: dict[str, Any], params: Sequence[Param], out: Path
) -> list[tuple[str, str]]:
    """Write the PNGs; returns (file name, caption) pairs."""
    import matplotlib

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
    import warnings

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


# -- the report files --------------------------------------------------------------------------


@dataclass
class WrittenReport:
    markdown: Path
    html: Path
    summary: Path
    plots: list[Path]
    conclusions: list[str]


def write_report(
    storage: Storage,
    request: CompareRequest,
    runs: Sequence[CompareRun],
    refs: Sequence[StudyRef],
) -> WrittenReport:
    """Read the studies, write summary.json, the plots, report.md and report.html."""
    out = request.out_dir
    out.mkdir(parents=True, exist_ok=True)
    params = request.config.space
    grid_runs = [r for r in runs if r.strategy.sampler == "grid"]
    grid = {k: list(v) for k, v in grid_runs[0].config.grid_values().items()} if grid_runs else None
    results = collect(storage, runs, refs)
    summary = summarize(results, request, params, grid)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    plots = _plots(results, summary, params, out)
    blocks = _blocks(summary, plots)
    (out / "report.md").write_text(_markdown(blocks))
    (out / "report.html").write_text(_html(blocks, out))
    return WrittenReport(
        markdown=out / "report.md",
        html=out / "report.html",
        summary=out / "summary.json",
        plots=[out / name for name, _ in plots],
        conclusions=summary["conclusions"],
    )


Block = tuple[Any, ...]


def _blocks(summary: dict[str, Any], plots: list[tuple[str, str]]) -> list[Block]:
    s = summary
    metric = s["metric"]
    strategies = s["strategies"]
    names = [p for p in next(iter(strategies.values()))["distinct_values"]] if strategies else []
    blocks: list[Block] = [
        ("h1", f"Search strategies compared: {s['study']}"),
        (
            "p",
            f"Config `{s['config']}`: {len(strategies)} strategies, {s['repeats']} repeats each, "
            + (
                f"a budget of {s['budget']} trials per study ({s['epochs_per_trial']} epochs per "
                "trial unless pruned)"
                if not s.get("budget_epochs")
                else f"at equal compute: a budget of {s['budget_epochs']} epochs trained per "
                f"study, pruned and paused trials' epochs included ({s['epochs_per_trial']} "
                "epochs per fully trained trial; strategies that prune spend what they save on "
                "more trials)"
            )
            + f", {metric} to {s['direction']}. Each repeat is a study of "
            f"its own, named `{s['study']}-<strategy>-r<k>`, with its own seed.",
        ),
    ]
    if s["grid"] is not None:
        sizes = " x ".join(str(len(v)) for v in s["grid"].values())
        total = math.prod(len(v) for v in s["grid"].values())
        shown = "; ".join(
            f"{k}: " + ", ".join(f"{x:.3g}" if isinstance(x, float) else str(x) for x in v)
            for k, v in s["grid"].items()
        )
        fill = (
            "every point is run"
            if total == s["budget"]
            else f"the budget is no product of the counts, so {s['budget']} of its points are "
            "run, those the grid sampler's seeded shuffle picks first"
        )
        blocks.append(
            (
                "p",
                f"The grid: {sizes} = {total} points ({shown}); {fill}. Numeric parameters get "
                "points one at a time, the one with the fewest first, until the grid holds the "
                "budget; categorical ones keep all their choices.",
            )
        )
    blocks.append(("h2", "Conclusions"))
    blocks.append(("ul", s["conclusions"]))
    blocks.append(("h2", "Final best per strategy"))
    rows = []
    for label, st in strategies.items():
        ci = st["ci95"]
        rows.append(
            [
                label,
                ", ".join(_fmt(b) for b in st["best_per_repeat"]),
                _fmt(st["mean"]),
                _fmt(st["sd"]),
                "-" if ci is None else f"[{ci[0]:.4g}, {ci[1]:.4g}]",
            ]
        )
    blocks.append(("table", ["strategy", "best per repeat", "mean", "sd", "95% CI of mean"], rows))
    blocks.append(
        (
            "p",
            "The best of a repeat is its best complete trial (pruned trials stopped early and do "
            "not count), as `hpsearch status` reports it. The interval is a percentile bootstrap "
            f"of the mean ({BOOTSTRAP_RESAMPLES} resamples); with few repeats it is rough.",
        )
    )
    blocks.append(("h2", "Cost and coverage"))
    rows = []
    for label, st in strategies.items():
        per = st["epochs_to_target"]
        median = st["epochs_to_target_median"]
        reached = [v for v in per if v is not None]
        spread = f" ({min(reached)}-{max(reached)})" if reached else ""
        rows.append(
            [
                label,
                *(
                    f"{np.mean(st['distinct_values'][n]):.3g}" if st["studies"] else "-"
                    for n in names
                ),
                str(st["epochs_trained_total"]),
                ("not reached" if median is None else f"{median:g}") + spread,
                f"{st['reached_target']}/{len(st['studies'])}",
            ]
        )
    blocks.append(
        (
            "table",
            [
                "strategy",
                *(f"distinct {n}" for n in names),
                "epochs trained (all repeats)",
                "epochs to target: median (range)",
                "reached",
            ],
            rows,
        )
    )
    target = s["target"]
    blocks.append(
        (
            "p",
            f"Distinct values: the mean over repeats of the values each study tried. Target: "
            f"{_fmt(target['value'])}, {target['rule']}. Epochs to target counts every epoch "
            "of every trial finished up to the first complete trial that reached it; a repeat "
            "that never reached it counts as infinite in the median.",
        )
    )
    if s["tests"]:
        blocks.append(("h2", "Pairwise tests"))
        rows = [
            [
                f"{t['a']} vs {t['b']}",
                f"{t['u']:g}",
                f"{t['p']:.3g}",
                f"{t['p_holm']:.3g}",
                f"{t['a_better_share']:.0%}",
                "yes" if t["significant"] else "no significant difference",
            ]
            for t in s["tests"]
        ]
        blocks.append(
            (
                "table",
                ["pair", "U", "p", "Holm p", "first better in", f"significant at {s['alpha']}"],
                rows,
            )
        )
        blocks.append(
            (
                "p",
                "Two-sided Mann-Whitney rank tests on the final bests (scipy), Holm-adjusted for "
                "the number of pairs. 'First better in' is the share of (run, run) pairings in "
                "which the first strategy's run scored better (ties count half).",
            )
        )
    blocks.append(("h2", "Plots"))
    for name, caption in plots:
        blocks.append(("img", name, caption))
    blocks.append(("h2", "Studies"))
    blocks.append(
        (
            "table",
            ["strategy", "studies", "seeds", "trials finished", "epochs trained"],
            [
                [
                    label,
                    ", ".join(st["studies"]),
                    ", ".join(str(x) for x in st["seeds"]),
                    ", ".join(str(x) for x in st["trials_finished"]),
                    ", ".join(str(x) for x in st["epochs_trained"]),
                ]
                for label, st in strategies.items()
            ],
        )
    )
    return blocks


def _markdown(blocks: list[Block]) -> str:
    lines: list[str] = []
    for block in blocks:
        kind = block[0]
        if kind == "h1":
            lines += [f"# {block[1]}", ""]
        elif kind == "h2":
            lines += [f"## {block[1]}", ""]
        elif kind == "p":
            lines += [block[1], ""]
        elif kind == "ul":
            lines += [f"- {item}" for item in block[1]] + [""]
        elif kind == "table":
            header, rows = block[1], block[2]
            lines.append("| " + " | ".join(header) + " |")
            lines.append("|" + " --- |" * len(header))
            lines += ["| " + " | ".join(row) + " |" for row in rows]
            lines.append("")
        elif kind == "img":
            lines += [f"![{block[2]}]({block[1]})", "", f"*{block[2]}*", ""]
    return "\n".join(lines)


def _inline_code(text: str) -> str:
    parts = html.escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def _html(blocks: list[Block], out: Path) -> str:
    body: list[str] = []
    title = "hpsearch compare"
    for block in blocks:
        kind = block[0]
        if kind == "h1":
            title = block[1]
            body.append(f"<h1>{html.escape(block[1])}</h1>")
        elif kind == "h2":
            body.append(f"<h2>{html.escape(block[1])}</h2>")
        elif kind == "p":
            body.append(f"<p>{_inline_code(block[1])}</p>")
        elif kind == "ul":
            items = "".join(f"<li>{_inline_code(i)}</li>" for i in block[1])
            body.append(f"<ul>{items}</ul>")
        elif kind == "table":
            head = "".join(f"<th>{html.escape(h)}</th>" for h in block[1])
            rows = "".join(
                "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
                for row in block[2]
            )
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
        elif kind == "img":
            data = base64.b64encode((out / block[1]).read_bytes()).decode()
            body.append(
                f'<figure><img alt="{html.escape(block[1])}" src="data:image/png;base64,{data}">'
                f"<figcaption>{html.escape(block[2])}</figcaption></figure>"
            )
    style = (
        "body{font-family:sans-serif;max-width:1100px;margin:2em auto;line-height:1.45}"
        "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;"
        "padding:4px 8px;text-align:left}th{background:#f4f4f4}img{max-width:100%}"
        "figcaption{color:#555;font-size:90%}code{background:#f4f4f4;padding:0 3px}"
    )
    return (
        f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{style}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


# -- attaching the report to the studies -----------------------------------------------------


def attach_report(
    storage: Storage, refs: Sequence[StudyRef], report: WrittenReport, artifacts_dir: str | None
) -> None:
    """Upload report.html and summary.json to every compared study as Optuna artifacts, so
    that optuna-dashboard shows them with the study (`hpsearch dashboard --artifacts DIR` for a
    directory; on PostgreSQL without one, the database itself, as checkpoints). A rerun
    writes the new report into the artifacts it attached before."""
    store = (
        DirectoryArtifactStore(artifacts_dir)
        if artifacts_dir
        else artifact_store_for(storage, None)
    )
    optuna_storage = storage.optuna_storage()
    files = (report.html, report.summary)
    for ref in refs:
        previous = optuna_storage.get_study_system_attrs(ref.study_id).get(REPORT_ATTR)
        if previous and len(previous) == len(files):
            # A rerun: the same artifacts get the new content (Optuna's API has no way to
            # remove an artifact's entry from a study; optuna-dashboard leaves a null behind,
            # which optuna.artifacts.get_all_artifact_meta cannot read).
            for artifact_id, path in zip(previous, files, strict=True):
                with open(path, "rb") as body:
                    store.write(artifact_id, body)
            continue
        study = optuna.load_study(study_name=ref.name, storage=optuna_storage)
        ids = [
            optuna.artifacts.upload_artifact(
                artifact_store=store, file_path=str(path), study_or_trial=study
            )
            for path in files
        ]
        optuna_storage.set_study_system_attr(ref.study_id, REPORT_ATTR, ids)
