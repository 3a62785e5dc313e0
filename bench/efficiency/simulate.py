"""In-process studies on a surrogate, for bench/efficiency/runner.py: plain Optuna, and a
simulation of
promotion-based ASHA (Li et al. 2020) on a simulated clock, to choose settings quickly.

`optuna_study` is plain Optuna 5.0 in one process, as its docs run it: `study.ask()`, report
every epoch, `trial.should_prune()`, `study.tell()`; the study stops when its trained epochs
(pruned trials' included) reach the budget: the trial running then is cut off there (PRUNED).

`asha_study` simulates W asynchronous workers on a simulated clock: a job (a trial trained from
one rung to the next) lasts the surrogate's recorded runtime of those epochs. A free worker
promotes the best paused trial that ranks in the top 1/eta of its rung (highest rung first),
else starts a new trial; epochs are reserved when a job starts, so the study never trains more
than the budget. Trials are sampled by a real Optuna sampler on an in-memory Optuna study:
paused and running trials are RUNNING there with their reports, finished ones COMPLETE.
"""

from __future__ import annotations

import heapq
import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import optuna
from optuna.trial import TrialState

from bench.efficiency.lcbench import EPOCHS, SPACE, Curve
from bench.efficiency.stats import Run

__all__ = ["asha_study", "make_optuna_sampler", "optuna_study", "rungs", "suggest_space"]

CurveOf = Callable[[dict[str, Any]], Curve]


def suggest_space(trial: optuna.Trial, space: dict[str, dict[str, Any]] = SPACE) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, p in space.items():
        if p["type"] == "float":
            out[name] = trial.suggest_float(name, p["low"], p["high"], log=p.get("log", False))
        elif p["type"] == "int":
            out[name] = trial.suggest_int(name, p["low"], p["high"], log=p.get("log", False))
        else:
            out[name] = trial.suggest_categorical(name, p["choices"])
    return out


def make_optuna_sampler(name: str, seed: int, **kw: Any) -> optuna.samplers.BaseSampler:
    """'random', 'tpe' (Optuna's defaults), 'tpe-mv' (multivariate + constant liar, as hpsearch),
    'tpe-mv-rung' / 'tpe-mv-rank' (that TPE behind search.sampling.multifidelity)."""
    from search.sampling.multifidelity import FidelitySampler

    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed)
    startup = kw.get("startup", 10)
    mv = optuna.samplers.TPESampler(
        seed=seed, multivariate=True, constant_liar=True, n_startup_trials=startup
    )
    if name == "tpe-mv":
        return mv
    if name.startswith("tpe-mv-"):
        mode = name.removeprefix("tpe-mv-")
        return FidelitySampler(mv, mode=mode, min_points=kw.get("min_points", 10))  # type: ignore[arg-type]
    raise ValueError(f"unknown sampler {name!r}")


def optuna_study(
    curve_of: CurveOf, sampler: str, pruner: str, budget: int, seed: int, **kw: Any
) -> Run:
    """Plain Optuna, one process; pruner 'none', 'hyperband' (min 1, eta 3) or 'median'."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    pruners = {
        "none": optuna.pruners.NopPruner(),
        "hyperband": optuna.pruners.HyperbandPruner(
            min_resource=kw.get("min_resource", 1), max_resource=EPOCHS, reduction_factor=3
        ),
        "median": optuna.pruners.MedianPruner(),
    }
    study = optuna.create_study(
        # Named by the seed: Optuna's Hyperband assigns a trial's bracket from a hash of the
        # study's name and the trial's number, and a generated name (a UUID) made every run of
        # the same seed another study.
        study_name=f"optuna-{sampler}-{pruner}-seed{seed}",
        direction="maximize",
        sampler=make_optuna_sampler(sampler, seed, **kw),
        pruner=pruners[pruner],
    )
    used, finished = 0, []
    while used < budget:
        trial = study.ask()
        curve = curve_of(suggest_space(trial))
        for epoch in range(1, EPOCHS + 1):
            if used >= budget:
                study.tell(trial, state=TrialState.PRUNED)
                break
            used += 1
            value = curve.accuracy[epoch - 1]
            trial.report(value, epoch)
            if epoch == EPOCHS:
                study.tell(trial, value)
                finished.append((used, value))
            elif trial.should_prune():
                study.tell(trial, state=TrialState.PRUNED)
                break
    return Run(finished, used, {"trials": len(study.trials)})


def rungs(min_resource: int, eta: int, max_resource: int = EPOCHS) -> list[int]:
    """Rung epochs: min_resource * eta**k below max_resource, then max_resource."""
    out, r = [], min_resource
    while r < max_resource:
        out.append(r)
        r *= eta
    return [*out, max_resource]


def asha_study(
    curve_of: CurveOf,
    sampler: str | optuna.samplers.BaseSampler,
    budget: int,
    seed: int,
    *,
    workers: int = 1,
    min_resource: int = 1,
    eta: int = 3,
    brackets: int = 1,
    adapt: dict[str, Any] | None = None,
    free_top: bool = False,
    **kw: Any,
) -> Run:
    """Promotion ASHA (several brackets: Hyperband with promotion) on a simulated clock.
    `sampler`: a name for `make_optuna_sampler`, or a sampler to use as it is. `adapt`:
    retire rungs whose ranking misleads (`search.pruning.adaptive.first_active_level`, with
    these keyword arguments), decided when a trial starts, as the workers do; one bracket.
    `free_top`: at the last rung below the full length, the best trial recorded there goes on
    before eta trials have arrived (the top 1/eta, or at least the best)."""
    from search.pruning.adaptive import RungSchedule

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if isinstance(sampler, str):
        sampler = make_optuna_sampler(sampler, seed, **kw)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    levels = rungs(min_resource, eta)
    brackets = max(1, min(brackets, len(levels) - 1))
    # rung k of the study: trials recorded there as (value, number); paused ones by number.
    recorded: list[list[tuple[float, int]]] = [[] for _ in levels]
    paused: list[set[int]] = [set() for _ in levels]
    trials: dict[int, tuple[optuna.Trial, Curve]] = {}
    rng = np.random.default_rng(seed)
    retired: list[int] = []  # per new trial (adapt): the index of its first rung
    schedule = (
        RungSchedule(levels[:-1], maximize=True, **adapt)
        if adapt is not None and brackets == 1
        else None
    )
    # Hyperband's bracket sizes: bracket s starts at rung s; weights as Li et al.'s n_s.
    s_max = len(levels) - 1
    weights = np.array(
        [(s_max + 1) / (s_max + 1 - s) * eta ** (s_max - s) for s in range(brackets)]
    )
    weights /= weights.sum()

    def next_job() -> tuple[int, int, int] | None:
        """(trial number, from rung index or -1 for a new trial, to rung index)."""
        for k in range(len(levels) - 2, -1, -1):
            rec = recorded[k]
            if not paused[k]:
                continue
            goes_on = len(rec) // eta
            if free_top and k == len(levels) - 2:
                goes_on = max(goes_on, 1)
            top = sorted(rec, reverse=True)[:goes_on]
            for _, number in top:
                if number in paused[k]:
                    paused[k].discard(number)
                    # Past rungs retired since it paused (adapt), as a worker's pauses_at.
                    active = levels.index(schedule.level) if schedule and schedule.level else 0
                    return number, k, max(k + 1, active)
        trial = study.ask()
        trials[trial.number] = (trial, curve_of(suggest_space(trial)))
        start = int(rng.choice(brackets, p=weights)) if brackets > 1 else 0
        if schedule is not None:
            if not schedule.settled:
                schedule.update(
                    (n, levels[k], v) for k in range(len(levels) - 1) for v, n in recorded[k]
                )
            first = schedule.level
            start = levels.index(first) if first is not None else len(levels) - 1
            retired.append(start)
        return trial.number, -1, start

    clock, reserved = 0.0, 0
    events: list[tuple[float, int, int, int, int]] = []  # (end time, seq, number, to rung, epochs)
    epoch_times: list[float] = []
    done_at: list[tuple[float, float]] = []
    seq = 0
    free = workers
    while True:
        while free and reserved < budget:
            number, src, dst = next_job()
            first = levels[src] + 1 if src >= 0 else 1
            last = min(levels[dst], first - 1 + budget - reserved)
            trial, curve = trials[number]
            t = clock
            for e in range(first, last + 1):
                t += curve.seconds[e - 1]
                epoch_times.append(t)
            reserved += last - first + 1
            heapq.heappush(events, (t, seq, number, dst, last))
            seq += 1
            free -= 1
        if not events:
            break
        clock, _, number, dst, last = heapq.heappop(events)
        free += 1
        trial, curve = trials[number]
        start = max(trial.storage.get_trial(trial._trial_id).intermediate_values, default=0)
        for e in range(start + 1, last + 1):
            trial.report(curve.accuracy[e - 1], e)
        value = curve.accuracy[last - 1]
        if last == EPOCHS:
            study.tell(trial, value)
            done_at.append((clock, value))
        elif last < levels[dst]:
            study.tell(trial, state=TrialState.PRUNED)  # cut off by the budget
        else:
            recorded[dst].append((value, number))
            paused[dst].add(number)
    # Budget left unspent (nothing to promote or start): none, new trials always fit.
    times = np.sort(np.array(epoch_times))
    finished = [(int(np.searchsorted(times, t, side="right")), v) for t, v in done_at]
    for t, _ in done_at:
        assert math.isfinite(t)
    extra: dict[str, Any] = {"trials": len(trials), "clock_s": clock}
    if brackets == 1:
        from search.pruning.adaptive import rung_correlations

        rows = [(n, levels[k], v) for k in range(len(levels) - 1) for v, n in recorded[k]]
        extra["rung_rho"] = {
            str(m): rung_correlations(levels[:-1], rows, maximize=True, min_pairs=m)
            for m in (10, 20, 1000)
        }
    if adapt is not None:
        extra["first_rung"] = levels[max(retired, default=0)]
        extra["retired_at_trial"] = next((i for i, r in enumerate(retired) if r > 0), None)
    return Run(sorted(finished), reserved, extra)
