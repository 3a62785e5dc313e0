"""The default's design on LCBench's development suite, in simulation: candidates side by side.

Every study runs in this process on YAHPO's LCBench surrogate (bench/efficiency/lcbench.py):
hpsearch's default (TPE behind search/sampling/multifidelity.py, promotion ASHA min 1, eta 3,
one worker) and candidate changes to it by `asha_study` (bench/efficiency/simulate.py, the rule
of search/pruning/ on a simulated clock), and the cheap references: ``random`` (no pruning:
the target is its mean final), ``optuna-tpe`` (no pruning), ``optuna-tpe-hyperband`` (min 1,
eta 3) and ``sh-bracket`` (synchronous successive halving, no model: 243 random configurations
for 1 epoch, the best third on to 3, 9, 27 and 50 epochs, bracket after bracket).

    python -m bench.efficiency.design                      # the 24 development instances, 5 seeds
    python -m bench.efficiency.design --strategies default,adaptive --seeds 3 --jobs 2
    python -m bench.efficiency.design --metric val_cross_entropy --instances 3945,7593

Only the development instances may be run (`DEV`): the other ten of LCBench are the test set.
Studies are cached in `--cache` (JSON lines), keyed by a hash of the code that makes them (this
file's study functions, simulate.py, lcbench.py, variants.py, search/pruning/adaptive.py,
search/sampling/), the strategy's settings, instance, seed, budget and metric. The table:
per instance, each strategy's speedup (budget / epochs until its mean incumbent reaches
random's mean final; bench/efficiency/stats.py) and final mean; then the distribution over
instances.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import math
import multiprocessing as mp
import os
import signal
import statistics
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from optuna.samplers import TPESampler as _TPE

from bench.efficiency.lcbench import METRICS
from bench.efficiency.simulate import rungs
from bench.efficiency.stats import Run, epochs_to, speedup
from bench.efficiency.targets import tolerance_label, tpe_tolerance
from bench.efficiency.variants import RandomFraction as _RandomFraction
from bench.signals import RunSignals, exit_with_parent
from bench.stamp import append_line, open_to_append, read_lines, unwritable, write_json
from search.pruning.adaptive import RungSchedule as _RungSchedule
from search.sampling import hedge

REPO = Path(__file__).resolve().parents[2]

DEV = [
    *("126026", "126029", "146212", "167152", "167168", "167181", "167185", "167190"),
    *("167200", "167201", "168329", "168331", "168908", "189354", "189862", "189865"),
    *("189873", "189905", "189906", "189908", "189909", "34539", "3945", "7593"),
]
"""LCBench's development instances (issue 27): every choice is made on these only."""

REFERENCES = ("random", "optuna-tpe", "optuna-tpe-hyperband", "sh-bracket")
PEERS = ("optuna-tpe", "optuna-tpe-hyperband", "sh-bracket")

STRATEGIES: dict[str, dict[str, Any]] = {
    "random": {"kind": "optuna", "sampler": "random", "pruner": "none"},
    "optuna-tpe": {"kind": "optuna", "sampler": "tpe", "pruner": "none"},
    "optuna-tpe-hyperband": {"kind": "optuna", "sampler": "tpe", "pruner": "hyperband"},
    "sh-bracket": {"kind": "sh", "n": 243, "eta": 3, "levels": [1, 3, 9, 27, 50]},
    # main's default (663c1df): univariate TPE across fidelities, min_points 5, ASHA min 1 eta 3.
    # (These first candidates, like every "asha" one, take the prior weight of `make_variant`,
    # the default's: since PRIOR_WEIGHT became 3 they no longer run as their tables were made.)
    "main-default": {"kind": "asha", "min_points": 5},
    # Candidates: rungs retired when they rank trials unlike the next rung.
    "adaptive-0.3": {"kind": "asha", "min_points": 5, "adapt": {"threshold": 0.3}},
    "adaptive-0.5": {"kind": "asha", "min_points": 5, "adapt": {"threshold": 0.5}},
    "adaptive-0.3-rf": {
        "kind": "asha",
        "min_points": 5,
        "adapt": {"threshold": 0.3},
        "random_fraction": 0.2,
    },
    "main-rf": {"kind": "asha", "min_points": 5, "random_fraction": 0.2},
    # What search/ runs now (search.sampling.samplers.make_sampler, search.pruning.adaptive's
    # defaults, and now and then a trial a hedge: search.sampling.hedge, drawn at random and
    # judged first at rung 9 of LCBench's 1, 3, 9, 27, the gap to the next hedge doubling from
    # 10 to 40 trials while hedges are not promoted past it): hedge10-r9-backoff below, the
    # same studies, the product's default since commit 3ee74ae (bench/BENCHMARKS.md, "A hedge
    # that spaces out while it loses"). The default before it, one trial in ten a hedge (taken
    # on 2026-12-06: "A cheaper hedge, and the rule that decides one"), is hedge10-r9.
    "default": {
        "kind": "asha",
        "real": True,
        "hedge": hedge.EVERY,
        # The third of asha_study's rungs (min_resource 1, eta 3, below LCBench's 50 epochs).
        "hedge_level": hedge.hedge_level(rungs(1, 3)[:-1]),
        "hedge_backoff": hedge.LONGEST,
    },
    # The default before the hedge: TPE across fidelities and ASHA with the rung rule. Every
    # candidate below without "hedge" in its spec is a change to this one (they were measured
    # against it when it was the default).
    "unhedged": {"kind": "asha", "real": True},
    # Candidates on top of the unhedged default: a good set of at least 3 trials; 20 or 5
    # random trials first; the best 3% as the good set.
    "good-floor3": {"kind": "asha", "real": True, "good": "floor3"},
    "startup20": {"kind": "asha", "real": True, "startup": 20},
    "startup5": {"kind": "asha", "real": True, "startup": 5},
    "good-0.03": {"kind": "asha", "real": True, "good": "0.03"},
    # The default with TPE's view bounded past `start` trials (search/sampling/bounded.py).
    "bounded": {"kind": "asha", "real": True, "bound": {"best": 50, "recent": 200, "start": 300}},
    "bounded-tight": {
        "kind": "asha",
        "real": True,
        "bound": {"best": 30, "recent": 100, "start": 150},
    },
    # The default on another ASHA schedule (`run_candidate`): rungs 1, 4, 16 (eta 4); 2, 6, 18
    # (min 2).
    "eta4": {"kind": "asha", "real": True, "schedule": {"eta": 4}},
    "min2": {"kind": "asha", "real": True, "schedule": {"min_resource": 2}},
    # Hyperband with promotion: some trials start at rung 3 (bracket 1) or 9 (bracket 2),
    # ranked only against their bracket, so a configuration that starts slowly is not judged
    # after one epoch (no rung rule: it adapts one bracket only).
    "hb2": {"kind": "asha", "real": True, "schedule": {"brackets": 2}},
    "hb3": {"kind": "asha", "real": True, "schedule": {"brackets": 3}},
    # The default ranking trials at rungs 3, 9 and 27 by a learning curve's extrapolation:
    # the value there plus `extrapolate` times its gain since the rung before (`run_candidate`).
    "lc05": {"kind": "asha", "real": True, "extrapolate": 0.5},
    "lc1": {"kind": "asha", "real": True, "extrapolate": 1.0},
    "lc025": {"kind": "asha", "real": True, "extrapolate": 0.25},
    # ... at rung 3 only (9 and 27 ranked on their own values).
    "lc05-3": {"kind": "asha", "real": True, "extrapolate": 0.5, "extrapolate_at": [3]},
    # The default with a tenth of its trials drawn at random (BOHB's safeguard, by a hash of
    # the trial number; `run_candidate`): against a model that commits early.
    "rf10": {"kind": "asha", "real": True, "random_share": 0.1},
    # The default with TPE's prior weighing 2, 2.5 or 3 trials instead of Optuna's 1
    # (`prior_weight`): its good density (a handful of trials: the best 5%) keeps mass on the
    # whole range of every parameter, against a model that commits early (167181's stuck
    # seeds). Measured when the default's was 1; 3 is the default's since
    # (search.sampling.multifidelity.PRIOR_WEIGHT), and pw3 the same studies as `default`.
    "pw2": {"kind": "asha", "real": True, "tpe": {"prior_weight": 2.0}},
    "pw25": {"kind": "asha", "real": True, "tpe": {"prior_weight": 2.5}},
    "pw3": {"kind": "asha", "real": True, "tpe": {"prior_weight": 3.0}},
    # The prior weighing `prior_decay` / (good trials), between 1 and 3 trials: the default's 3
    # while the good set is a handful of trials (when a few agreeing trials could pin a
    # parameter), down to Optuna's 1 once it holds `prior_decay` trials (`run_candidate`).
    "pd15": {"kind": "asha", "real": True, "prior_decay": 15.0},
    "pd10": {"kind": "asha", "real": True, "prior_decay": 10.0},
    # The default with multivariate TPE (one joint density over the parameters, Falkner et
    # al.'s BOHB; the default's is one per parameter): 167181's five-layer networks need a
    # small batch and a high weight decay with them, which per-parameter densities fitted on
    # one-layer trials do not propose together. Measured before with prior weight 1 on three
    # instances (stuck on 189873); here with the default's prior of 3.
    "mv": {"kind": "asha", "real": True, "tpe": {"multivariate": True}},
    # The default's rung rule judging a kept rung on its first 10 trials only (as before
    # d92ba35), or again on the first 20 (the default: again on 20 and 40; `rung_rule`: keyword
    # arguments of search.pruning.adaptive.RungSchedule over the default's).
    "recheck0": {"kind": "asha", "real": True, "rung_rule": {"rechecks": 0}},
    "recheck1": {"kind": "asha", "real": True, "rung_rule": {"rechecks": 1}},
    # The default hedged: every `hedge`-th trial drawn at random and trained fully, past every
    # rung (against a model and rungs that both settle on configurations that start fast:
    # 167181's stuck seeds, where one-layer networks lead after an epoch and end 13 points
    # below the five-layer ones).
    "hedge20": {"kind": "asha", "real": True, "hedge": 20},
    "hedge40": {"kind": "asha", "real": True, "hedge": 40},
    # ... from trial `hedge_from` on only: none among the first trials, where the speedup to
    # random search's final is decided (a hedge at trial 39 costs 50 of its ~500 epochs).
    "hedge40-late": {"kind": "asha", "real": True, "hedge": 40, "hedge_from": 79},
    # ... started at rung ``hedge_level`` (judged there like the others) instead of trained
    # fully: one trial in `hedge` in a Hyperband bracket that starts higher. hedge10-r9: the
    # default from 2026-12-06 until commit 3ee74ae (the studies cached as "default" then).
    "hedge10-r9": {"kind": "asha", "real": True, "hedge": 10, "hedge_level": 9},
    "hedge20-r9": {"kind": "asha", "real": True, "hedge": 20, "hedge_level": 9},
    "hedge20-r27": {"kind": "asha", "real": True, "hedge": 20, "hedge_level": 27},
    # ... first judged at rung 3: 2 epochs past rung 1 per hedged trial where rung 9 costs 8.
    "hedge10-r3": {"kind": "asha", "real": True, "hedge": 10, "hedge_level": 3},
    "hedge5-r3": {"kind": "asha", "real": True, "hedge": 5, "hedge_level": 3},
    # hedge10-r9 (the default then) with its hedged trials out of TPE's view until they finish
    # (`_hide_hedged`): a random draw paused at rung 9 neither enters the good set nor sets the
    # epoch the model is fitted at; one that trains to the end is seen with its final value.
    "hedge10-r9-hidden": {
        "kind": "asha",
        "real": True,
        "hedge": 10,
        "hedge_level": 9,
        "hedge_hidden": True,
    },
    # hedge10-r9's hedge from trial 99 on only: none among the first ~100 trials, where the
    # speedup to random search's final is decided; one in ten at rung 9 after that, to rescue
    # a seed settled on what starts fast before its budget ends.
    "hedge10-r9-from99": {
        "kind": "asha",
        "real": True,
        "hedge": 10,
        "hedge_level": 9,
        "hedge_from": 99,
    },
    # ... out of TPE's view only while they have not been promoted past the rung they are
    # first judged at (`_hide_hedged` with ``hedge_shown_past``): a random draw paused or
    # stopped at rung 9 is never seen; one promoted from it is seen from epoch 10 on, not only
    # once it ends.
    "hedge10-r9-promoted": {
        "kind": "asha",
        "real": True,
        "hedge": 10,
        "hedge_level": 9,
        "hedge_hidden": True,
        "hedge_shown_past": 9,
    },
    # hedge10-r9's hedge spaced out while it loses (`_BackoffHedge`): the gap to the next
    # hedged trial doubles, 10, 20, 40 trials at most, after each hedge in a row that has not
    # been promoted past the rung it is first judged at, and is 10 again once one has. A
    # measured signal (random draws against TPE's at rung 9) for where early epochs mislead.
    # The default since commit 3ee74ae (its spec is "default"'s: the same studies).
    "hedge10-r9-backoff": {
        "kind": "asha",
        "real": True,
        "hedge": 10,
        "hedge_level": 9,
        "hedge_backoff": 40,
    },
    # What hedge10-r9-backoff does where its hedges are never promoted (nearly everywhere):
    # hedged trials 9, 29, 69, 109, ... (the gap from 10 trials doubling to 40 and staying
    # there; `tapered`), with no measurement behind the spacing.
    "hedge10-r9-tapered": {
        "kind": "asha",
        "real": True,
        "hedge": 10,
        "hedge_level": 9,
        "hedge_longest": 40,
    },
}

# The default with TPE drawing 48 candidates a sample instead of Optuna's 24 (greedier in its
# ratio of densities). On 20 seeds: 10.8x against the default's 11.2x, 468 seeds reaching
# against 474 (faster where TPE's first region is the right one, slower where it is not;
# bench/BENCHMARKS.md, "More candidates per TPE sample"). Not taken.
STRATEGIES["ei48"] = {**STRATEGIES["default"], "tpe": {"n_ei_candidates": 48}}

# The default without a rung within a factor eta of the full length (`run_last_step`): on
# LCBench (min 1, eta 3, 50 epochs) rungs at 1, 3 and 9 epochs, no pause at 27. A trial
# promoted from 9 epochs trains to 50 at once: a promotion past 27 epochs saves 23 at most (a
# step of 1.85x, where every other rung's is 3x), and waiting for three rivals at 27 delays the
# first fully trained trials. On 5 seeds: 9.4x against the default's 10.6x (slower on 18 of
# 24; bench/BENCHMARKS.md, "Without the rung at 27 epochs"). Not taken.
STRATEGIES["last-step"] = {**STRATEGIES["default"], "last_step": True}

# The best trial at the last rung below the full length (27 epochs on LCBench) goes on at once,
# before three have arrived there (asha_study's `free_top`): the first fully trained trials
# come sooner, for at most two promotions more a study (the ranking at 27 epochs is nearly the
# final one: Spearman's rho 0.94-0.99 over random configurations, bench/efficiency/landscape.py).
# On 5 seeds: 8.9x against 10.6x, 114 seeds reaching against 118: the first finished trial,
# picked on fewer rivals, steers TPE (bench/BENCHMARKS.md, "the best trial there finished at
# once"). Not taken.
STRATEGIES["free-top"] = {**STRATEGIES["default"], "schedule": {"free_top": True}}

# Parallel workers on the simulated clock (`asha_study`'s `workers`; LCBench's runtimes decide
# the order in which trials end), with and without TPE's constant liar (running trials that
# have reported nothing shown to it as bad results, so that workers spread out). On 10 seeds of
# six instances, 8 workers: 5.4x with the liar, 6.6x without, slower without on 4 of the 6;
# not taken (bench/BENCHMARKS.md, "parallel workers on a clock that is truly parallel").
for _w in (8, 32):
    STRATEGIES[f"w{_w}"] = {**STRATEGIES["default"], "schedule": {"workers": _w}}
    STRATEGIES[f"w{_w}-noliar"] = {**STRATEGIES[f"w{_w}"], "tpe": {"constant_liar": False}}

CHANGES = ("schedule", "extrapolate", "random_share", "tpe", "prior_decay", "rung_rule")
"""The changes to the default `run_candidate` makes (keys of a strategy's spec)."""

CODE = {
    "optuna": ["bench/efficiency/simulate.py", "bench/efficiency/lcbench.py"],
    "sh": ["bench/efficiency/lcbench.py"],
    "asha": [
        "bench/efficiency/simulate.py",
        "bench/efficiency/lcbench.py",
        "bench/efficiency/variants.py",
        "search/pruning/adaptive.py",
        "search/sampling/multifidelity.py",
        "search/sampling/samplers.py",
        "search/sampling/bounded.py",
    ],
}
"""The files whose code makes a study of each kind (its cache key holds their hash)."""


def code_version(kind: str, adaptive: bool = True) -> str:
    """A hash of the code that makes a study of `kind`: its files and this module's study
    functions (not the reporting, so a change to the table keeps the cache). `adaptive`:
    whether search/pruning/adaptive.py decides anything in it (else it only reports)."""
    import inspect

    h = hashlib.sha256(library_versions().encode())
    for fn in (random_config, sh_bracket, run_one):
        h.update(inspect.getsource(fn).encode())
    for rel in CODE[kind]:
        if rel == "search/pruning/adaptive.py" and not adaptive:
            continue
        path = REPO / rel
        h.update(rel.encode())
        h.update(path.read_bytes() if path.exists() else b"")
    return h.hexdigest()[:16]


def library_versions() -> str:
    """The versions of the libraries whose arithmetic makes a study: the same code under
    another optuna, numpy or onnxruntime (the surrogate) need not give the same trials (seen:
    a study cached under one environment diverged from its rerun under another after a few
    dozen trials), so they are part of the cache key; so is the SIMD NumPy's float64 math uses
    on this CPU (`bench.efficiency.numerics`; named only where it uses some, so the keys of
    studies made without it stay what they were)."""
    from importlib.metadata import PackageNotFoundError, version

    from bench.efficiency.numerics import numpy_simd

    out = []
    for lib in ("optuna", "numpy", "scipy", "onnxruntime"):
        try:
            out.append(f"{lib} {version(lib)}")
        except PackageNotFoundError:
            out.append(f"{lib} -")
    simd = numpy_simd()
    if simd:
        out.append(f"numpy SIMD {simd}")
    return "; ".join(out)


def cache_key(name: str, instance: str, seed: int, budget: int, metric: str) -> str:
    settings = json.dumps(STRATEGIES[name], sort_keys=True)
    spec = STRATEGIES[name]
    version = code_version(spec["kind"], bool(spec.get("adapt") or spec.get("real")))
    # A candidate's own code, only in its keys: a good set (`run_one`); `run_candidate`.
    if spec.get("good"):
        version = f"{version}+{_source_hash(good_set)}"
    if any(spec.get(change) for change in CHANGES):
        version = f"{version}+{_source_hash(run_candidate)}"
    if spec.get("hedge"):
        hedging = "".join(
            _source_hash(f)
            for f in (run_candidate, run_hedged, _Hedge, _HedgedSchedule, _HedgedAtRung)
        )
        version = f"{version}+{hedging}"
    if spec.get("hedge_hidden"):
        version = f"{version}+{_source_hash(run_hedged_hidden)}{_source_hash(_hide_hedged)}"
    if spec.get("hedge_backoff") or spec.get("hedge_longest"):
        spacing = (_BackoffHedge,) if spec.get("hedge_backoff") else (_TaperedHedge, tapered)
        version = f"{version}+{''.join(_source_hash(f) for f in (run_hedged_spaced, *spacing))}"
    if spec.get("last_step"):
        version = f"{version}+{_source_hash(run_last_step)}"
    return f"{version}|{name}|{settings}|{instance}|{seed}|{budget}|{metric}"


def run_last_step(
    name: str, instance: str, seed: int, budget: int, metric: str, data: str | None
) -> Run:
    """`run_hedged_spaced` with `asha_study`'s rungs short of any that lies within a factor
    eta of the full length (a trial promoted from the rung below trains fully)."""
    import bench.efficiency.simulate as simulate

    made = simulate.rungs

    def kept(min_resource: int, eta: int, max_resource: int = simulate.EPOCHS) -> list[int]:
        levels = made(min_resource, eta, max_resource)
        return [r for r in levels[:-1] if r * eta <= max_resource] + levels[-1:]

    simulate.rungs = kept
    try:
        return run_hedged_spaced(name, instance, seed, budget, metric, data)
    finally:
        simulate.rungs = made


def _source_hash(fn: Any) -> str:
    """A short hash of a function's source."""
    import inspect

    return hashlib.sha256(inspect.getsource(fn).encode()).hexdigest()[:8]


_BENCHES: dict[tuple[str, str], Any] = {}


def _bench(instance: str, metric: str, data: str | None) -> Any:
    from bench.efficiency.lcbench import LCBench

    key = (instance, metric)
    if key not in _BENCHES:
        _BENCHES.clear()  # one instance at a time per process: the surrogate's cache grows
        _BENCHES[key] = LCBench(instance, data, metric=metric)
    return _BENCHES[key]


def random_config(rng: np.random.Generator) -> dict[str, Any]:
    """A configuration drawn uniformly from LCBench's space (log-uniform where log)."""
    from bench.efficiency.lcbench import SPACE

    out: dict[str, Any] = {}
    for name, p in SPACE.items():
        lo, hi = p["low"], p["high"]
        if p.get("log"):
            x = math.exp(rng.uniform(math.log(lo), math.log(hi)))
        else:
            x = rng.uniform(lo, hi)
        out[name] = min(hi, max(lo, round(x))) if p["type"] == "int" else float(x)
    return out


def sh_bracket(curve_of: Any, budget: int, seed: int, n: int, eta: int, levels: list[int]) -> Run:
    """Synchronous successive halving, bracket after bracket, random configurations; epochs
    counted as trained (a promoted configuration resumes), the budget cuts the last one."""
    rng = np.random.default_rng(seed)
    used, finished = 0, []
    while used < budget:
        alive = [(curve_of(random_config(rng)), 0) for _ in range(n)]
        for i, level in enumerate(levels):
            scored = []
            for curve, done in alive:
                train = min(level - done, budget - used)
                used += train
                if train < level - done:
                    return Run(finished, used)
                value = curve.accuracy[level - 1]
                if level == levels[-1]:
                    finished.append((used, value))
                scored.append((value, curve))
            if i + 1 < len(levels):
                scored.sort(key=lambda x: -x[0])
                alive = [(c, level) for _, c in scored[: max(1, len(scored) // eta)]]
    return Run(finished, used)


def good_set(name: str) -> Any:
    """A candidate good set for TPE across fidelities (its `gamma`: trials -> good trials).
    ``floor3``: the default's best 5%, but never fewer than 3 trials (the default fits its
    good density on one trial until 20 have reported); ``0.03``: the best 3%."""
    from search.sampling.multifidelity import GOOD_CAP, good_trials

    if name == "floor3":
        return lambda n: min(max(good_trials(n), min(3, n)), GOOD_CAP)
    if name == "0.03":
        return lambda n: min(math.ceil(0.03 * n), GOOD_CAP)
    raise ValueError(f"unknown good set {name!r}")


def run_one(name: str, instance: str, seed: int, budget: int, metric: str, data: str | None) -> Run:
    import optuna

    from bench.efficiency.simulate import asha_study, optuna_study
    from bench.efficiency.variants import RandomFraction, make_variant

    warnings.simplefilter("ignore")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    spec = STRATEGIES[name]
    curve_of = _bench(instance, metric, data).curve
    if spec["kind"] == "optuna":
        return optuna_study(curve_of, spec["sampler"], spec["pruner"], budget, seed)
    if spec["kind"] == "sh":
        return sh_bracket(curve_of, budget, seed, spec["n"], spec["eta"], spec["levels"])
    if spec.get("real"):
        from search.pruning.adaptive import MIN_PAIRS, THRESHOLD
        from search.sampling.multifidelity import MIN_POINTS

        tpe: dict[str, Any] = {"multivariate": False, "constant_liar": True}
        if spec.get("good"):
            tpe["gamma"] = good_set(spec["good"])
        if spec.get("startup"):
            tpe["n_startup_trials"] = spec["startup"]
        sampler = make_variant({"tpe": tpe, "min_points": MIN_POINTS}, seed)
        if spec.get("bound") is not None:
            from search.sampling.bounded import bound

            sampler = bound(sampler, **spec["bound"])
        adapt = {"threshold": THRESHOLD, "min_pairs": MIN_PAIRS}
        return asha_study(curve_of, sampler, budget, seed, adapt=adapt)
    sampler = make_variant(
        {"tpe": {"multivariate": False, "constant_liar": True}, "min_points": spec["min_points"]},
        seed,
    )
    if spec.get("random_fraction"):
        sampler = RandomFraction(sampler, seed, spec["random_fraction"])
    return asha_study(curve_of, sampler, budget, seed, adapt=spec.get("adapt"))


def run_candidate(
    name: str, instance: str, seed: int, budget: int, metric: str, data: str | None
) -> Run:
    """The default (as `run_one` runs it) with the changes the strategy's spec names (`CHANGES`):

    - ``schedule``: `asha_study`'s ``eta``, ``min_resource`` or ``brackets`` (another ASHA
      schedule; Hyperband with promotion);
    - ``extrapolate``: the rung values at ``extrapolate_at`` epochs (3, 9 and 27 unless given)
      replaced by the value plus ``extrapolate`` x the gain since the rung before (a straight
      line in log epochs, damped): ASHA promotes, the rung rule judges and TPE fits on that
      score; a fully trained trial's value is its own;
    - ``random_share``: that share of trials drawn uniformly at random
      (`variants.RandomFraction`), ranked at the rungs and seen by TPE like the others;
    - ``tpe``: Optuna `TPESampler` keyword arguments over the default's (``prior_weight``);
    - ``rung_rule``: `RungSchedule` keyword arguments over the default's (``rechecks``).
    """
    import optuna

    from bench.efficiency.lcbench import Curve
    from bench.efficiency.simulate import asha_study
    from bench.efficiency.variants import RandomFraction, make_variant
    from search.pruning.adaptive import MIN_PAIRS, THRESHOLD
    from search.sampling.multifidelity import MIN_POINTS

    warnings.simplefilter("ignore")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    spec = STRATEGIES[name]
    curve_of = _bench(instance, metric, data).curve
    if spec.get("extrapolate"):
        base, weight = curve_of, spec["extrapolate"]
        levels = sorted(spec.get("extrapolate_at", (3, 9, 27)), reverse=True)

        def curve_of(params: dict[str, Any]) -> Curve:
            curve = base(params)
            values = list(curve.values)
            for level in levels:  # from the top: the gain is from the rung's raw value below
                values[level - 1] += weight * (values[level - 1] - values[level // 3 - 1])
            return Curve(tuple(values), curve.seconds, curve.maximize)

    tpe: dict[str, Any] = {"multivariate": False, "constant_liar": True, **spec.get("tpe", {})}
    sampler = make_variant({"tpe": tpe, "min_points": MIN_POINTS}, seed)
    if spec.get("prior_decay"):
        sampler.inner.__class__ = _DecayingPrior
        sampler.inner.prior_decay = spec["prior_decay"]
    if spec.get("random_share"):
        sampler = RandomFraction(sampler, seed, spec["random_share"])
    adapt = {"threshold": THRESHOLD, "min_pairs": MIN_PAIRS, **spec.get("rung_rule", {})}
    return asha_study(curve_of, sampler, budget, seed, adapt=adapt, **spec.get("schedule", {}))


def run_hedged(
    name: str, instance: str, seed: int, budget: int, metric: str, data: str | None
) -> Run:
    """The default (`run_candidate`) hedged: trials number h - 1, 2h - 1, ... (h: the spec's
    ``hedge``; from ``hedge_from`` on, if given) drawn at random and trained fully without
    pausing at a rung, or first judged at rung ``hedge_level`` if given; TPE sees them like
    the others. `asha_study` is left as it is: the sampler `make_variant` returns is wrapped
    (`_Hedge`), and the rung rule it builds (`_HedgedSchedule`, `_HedgedAtRung`) reads no rung
    (or that one) for such a trial."""
    import bench.efficiency.variants as variants
    import search.pruning.adaptive as adaptive

    spec = STRATEGIES[name]
    every, first = spec["hedge"], spec.get("hedge_from", 0)
    made = variants.make_variant

    def hedged(variant: dict[str, Any], seed: int) -> Any:
        return _Hedge(made(variant, seed), seed, every, first)

    schedule: Any = _HedgedSchedule
    if spec.get("hedge_level"):
        schedule = functools.partial(_HedgedAtRung, at=spec["hedge_level"])
    variants.make_variant, adaptive.RungSchedule = hedged, schedule
    try:
        return run_candidate(name, instance, seed, budget, metric, data)
    finally:
        variants.make_variant, adaptive.RungSchedule = made, _RungSchedule


def run_hedged_hidden(
    name: str, instance: str, seed: int, budget: int, metric: str, data: str | None
) -> Run:
    """`run_hedged` with the hedged trials out of the sampler's view until they finish or,
    with ``hedge_shown_past`` in the spec, report an epoch past it (`_hide_hedged` over
    `multifidelity.fidelity_view`)."""
    import search.sampling.multifidelity as multifidelity

    spec = STRATEGIES[name]
    view = multifidelity.fidelity_view
    # Which trials are hedged: the rule of the `_Hedge` that `run_hedged` wraps the sampler in.
    hedged = _Hedge(None, seed, spec["hedge"], spec.get("hedge_from", 0))._at_random
    multifidelity.fidelity_view = functools.partial(
        _hide_hedged, view, hedged, spec.get("hedge_shown_past")
    )
    try:
        return run_hedged(name, instance, seed, budget, metric, data)
    finally:
        multifidelity.fidelity_view = view


def _hide_hedged(
    view: Any, hedged: Any, past: int | None, trials: Any, mode: Any, min_points: int
) -> list[Any]:
    """`view` (multifidelity.fidelity_view) of `trials` without the ones `hedged` (a trial ->
    bool) that have not finished (nor, with `past`, reported an epoch past it)."""
    from optuna.trial import TrialState

    def seen(t: Any) -> bool:
        if t.state == TrialState.COMPLETE or not hedged(t):
            return True
        return past is not None and max(t.intermediate_values, default=0) > past

    return view([t for t in trials if seen(t)], mode, min_points)


def run_hedged_spaced(
    name: str, instance: str, seed: int, budget: int, metric: str, data: str | None
) -> Run:
    """`run_hedged` with its hedged trials spaced out: decided by `_BackoffHedge` (the spec's
    ``hedge_backoff``: the longest gap, reached while hedges are not promoted past
    ``hedge_level``) or by `_TaperedHedge` (``hedge_longest``: the same gaps by number)."""
    global _Hedge
    spec = STRATEGIES[name]
    fixed = _Hedge
    _Hedge = (  # type: ignore[misc]
        functools.partial(_BackoffHedge, longest=spec["hedge_backoff"], level=spec["hedge_level"])
        if spec.get("hedge_backoff")
        else functools.partial(_TaperedHedge, longest=spec["hedge_longest"])
    )
    try:
        return run_hedged(name, instance, seed, budget, metric, data)
    finally:
        _Hedge = fixed


_HEDGE = {"next": False}
"""Set by `_Hedge` when it draws a trial at random; read by `_HedgedSchedule` once."""


class _Hedge(_RandomFraction):
    """Trials number every - 1, 2 x every - 1, ... from `first` on drawn at random (and flagged
    `_HEDGE`)."""

    def __init__(self, inner: Any, seed: int, every: int, first: int = 0) -> None:
        super().__init__(inner, seed, 0.0)
        self.every, self.first = every, first

    def _at_random(self, trial: Any) -> bool:
        return trial.number >= self.first and trial.number % self.every == self.every - 1

    def before_trial(self, study: Any, trial: Any) -> None:
        _HEDGE["next"] = self._at_random(trial)
        super().before_trial(study, trial)


class _BackoffHedge(_Hedge):
    """`_Hedge` whose gap between hedged trials starts at `every` and doubles, up to `longest`,
    for each hedged trial in a row (the latest first) that has reported no epoch past `level`
    (not promoted past the rung it is first judged at) when the next trial starts; a
    promoted one ends the run of losses. With one worker a hedge has been judged at `level`
    before the next trial starts."""

    def __init__(self, *args: Any, longest: int, level: int, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.longest, self.level = longest, level
        self.hedges: list[int] = []

    def _at_random(self, trial: Any) -> bool:
        return trial.number in self.hedges

    def before_trial(self, study: Any, trial: Any) -> None:
        if trial.number - (self.hedges[-1] if self.hedges else -1) >= self._gap(study):
            self.hedges.append(trial.number)
        super().before_trial(study, trial)

    def _gap(self, study: Any) -> int:
        trials = {t.number: t for t in study.get_trials(deepcopy=False)}
        gap = self.every
        for number in reversed(self.hedges):
            if max(trials[number].intermediate_values, default=0) > self.level:
                break
            gap = min(2 * gap, self.longest)
        return gap


def tapered(number: int, every: int, longest: int) -> bool:
    """Whether trial `number` is hedged when the gap between hedged trials starts at `every`
    and doubles up to `longest`: numbers every - 1, then gaps 2 x every, 4 x every, ...,
    `longest`, `longest`, ... (10 and 40: 9, 29, 69, 109, 149, ...)."""
    at, gap = every - 1, every
    while gap < longest and at < number:  # the gaps that double
        gap = min(2 * gap, longest)
        at += gap
    return at == number or (number > at and (number - at) % longest == 0)


class _TaperedHedge(_Hedge):
    """`_Hedge` whose hedged trials are `tapered`'s: the gap between them doubles from
    `every` up to `longest`."""

    def __init__(self, *args: Any, longest: int, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.longest = longest

    def _at_random(self, trial: Any) -> bool:
        return tapered(trial.number, self.every, self.longest)


class _HedgedSchedule(_RungSchedule):
    """The rung rule, whose lowest rung reads None (no pause: train fully) once for a trial
    `_Hedge` drew at random; `asha_study` reads it right after asking for the trial."""

    @property
    def level(self) -> int | None:
        if _HEDGE["next"]:
            _HEDGE["next"] = False
            return self.hedged_level()
        return self._level

    @level.setter
    def level(self, value: int | None) -> None:
        self._level = value

    def hedged_level(self) -> int | None:
        """The first rung of a hedged trial: none (it trains fully)."""
        return None

    def update(self, rows: Any) -> int | None:
        flag, _HEDGE["next"] = _HEDGE["next"], False
        try:
            return super().update(rows)
        finally:
            _HEDGE["next"] = flag


class _HedgedAtRung(_HedgedSchedule):
    """`_HedgedSchedule` whose hedged trial is first judged at rung `at` (or the lowest kept
    rung, if higher) instead of training fully."""

    def __init__(self, *args: Any, at: int, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.at = at

    def hedged_level(self) -> int | None:
        if self._level is None or self.at not in self.levels:
            return self._level
        return max(self._level, self.at)


class _DecayingPrior(_TPE):
    """Optuna's TPE whose prior weighs `prior_decay` / (good trials), clipped to 1..3."""

    prior_decay = 15.0

    def _build_parzen_estimator(
        self, study: Any, search_space: Any, trials: Any, handle_below: bool
    ) -> Any:
        if handle_below:  # built first; the bad density's prior weighs the same
            weight = min(3.0, max(1.0, self.prior_decay / max(1, len(trials))))
            params = self._parzen_estimator_parameters._replace(prior_weight=weight)
            self._parzen_estimator_parameters = params
        return super()._build_parzen_estimator(study, search_space, trials, handle_below)


def run_study(
    name: str, instance: str, seed: int, budget: int, metric: str, data: str | None
) -> Run:
    """One simulated study of strategy `name`, by the function its spec needs."""
    spec = STRATEGIES[name]
    study = run_candidate if any(spec.get(change) for change in CHANGES) else run_one
    if spec.get("hedge"):
        study = run_hedged_hidden if spec.get("hedge_hidden") else run_hedged
        if spec.get("hedge_backoff") or spec.get("hedge_longest"):
            study = run_hedged_spaced
        if spec.get("last_step"):
            study = run_last_step
    return study(name, instance, seed, budget, metric, data)


def _job(args: tuple[str, str, int, int, str, str | None, str]) -> tuple[str, dict[str, Any]]:
    name, instance, seed, budget, metric, data, key = args
    t0 = time.perf_counter()
    run = run_study(name, instance, seed, budget, metric, data)
    return key, {
        "finished": run.finished,
        "epochs": run.epochs,
        "extra": run.extra,
        "seconds": time.perf_counter() - t0,
    }


def _read(path: str) -> dict[str, dict[str, Any]]:
    """The cached studies by key (`bench.stamp.read_lines`: a line cut short is left out)."""
    return {row["key"]: row for row in read_lines(path)}


def _fmt(x: float | None) -> str:
    return "never" if not x else f"{x:.1f}x"


def _value(x: float, metric: str) -> str:
    """A final value as the tables show it: accuracy in percent to 0.1, the others to 0.001."""
    return f"{x:.1f}" if metric == "val_accuracy" else f"{x:.3f}"


def report(
    results: dict[tuple[str, str, int], Run],
    names: list[str],
    instances: list[str],
    seeds: int,
    budget: int,
    metric: str = "val_accuracy",
) -> dict[str, Any]:
    """Print the per-instance table and the distribution; return the summary."""
    per: dict[str, dict[str, dict[str, Any]]] = {}
    for inst in instances:
        target = float(np.mean([results[("random", inst, s)].final for s in range(seeds)]))
        per[inst] = {"target": target}  # type: ignore[dict-item]
        for name in names:
            runs = [results[(name, inst, s)] for s in range(seeds)]
            per[inst][name] = {
                "speedup": speedup(runs, budget, target),
                "final": statistics.fmean(r.final for r in runs),
                "reached": sum(math.isfinite(epochs_to(r, target)) for r in runs),
                "worst": min(r.final for r in runs),
            }
    shown = [n for n in names if n != "random"]
    print(f"\n{len(instances)} instances x {seeds} seeds, {budget} epochs, one worker\n")
    print("| instance | target | " + " | ".join(shown) + " |")
    print("| --- | --- |" + " --- |" * len(shown))
    for inst in instances:
        cells = [
            f"{_fmt(per[inst][n]['speedup'])} {_value(per[inst][n]['final'], metric)}"
            f" ({per[inst][n]['reached']}/{seeds})"
            for n in shown
        ]
        print(f"| {inst} | {_value(per[inst]['target'], metric)} | " + " | ".join(cells) + " |")
    summary: dict[str, Any] = {}
    tol = tolerance_label(metric)
    print(f"\n| strategy | median | p10 | min | reached | >= best peer | final >= tpe-{tol} |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name in shown:
        sp = [per[i][name]["speedup"] or 0.0 for i in instances]
        reached = sum(per[i][name]["reached"] for i in instances)
        peers = [p for p in PEERS if p in names]
        best_peer = [max([per[i][p]["speedup"] or 0.0 for p in peers] or [0.0]) for i in instances]
        ge_peer = sum(s >= b for s, b in zip(sp, best_peer, strict=True))
        ge_tpe = sum(
            per[i][name]["final"]
            >= per[i]["optuna-tpe"]["final"] - tpe_tolerance(metric, per[i]["optuna-tpe"]["final"])
            for i in instances
            if "optuna-tpe" in names
        )
        below_random = sum(per[i][name]["final"] < per[i]["target"] for i in instances)
        summary[name] = {
            "median": statistics.median(sp),
            "p10": float(np.quantile(sp, 0.1)),
            "min": min(sp),
            "reached": reached / (len(instances) * seeds),
            "ge_best_peer": ge_peer,
            "final_ge_tpe_minus_tolerance": ge_tpe,
            "tpe_tolerance": tol,
            "final_below_random": below_random,
            "median_ratio_to_best_peer": statistics.median(
                s / b if b else math.inf for s, b in zip(sp, best_peer, strict=True)
            ),
        }
        print(
            f"| {name} | {statistics.median(sp):.1f}x | {np.quantile(sp, 0.1):.1f}x | "
            f"{min(sp):.1f}x | {reached}/{len(instances) * seeds} | {ge_peer}/{len(instances)} | "
            f"{ge_tpe}/{len(instances)} (below random: {below_random}) |"
        )
    return {"per_instance": per, "summary": summary}


def _run(
    todo: list[tuple[tuple[str, str, int], str]],
    cached: dict[str, dict[str, Any]],
    args: argparse.Namespace,
) -> None:
    """Run the studies not cached yet, appending each to the cache as it ends."""
    jobs = [
        (name, inst, seed, args.budget_epochs, args.metric, args.data, key)
        for (name, inst, seed), key in todo
        if key not in cached
    ]
    print(f"{len(todo) - len(jobs)} studies cached, {len(jobs)} to run", flush=True)
    if not jobs:
        return
    t0 = time.perf_counter()
    Path(args.cache).parent.mkdir(parents=True, exist_ok=True)
    with (
        mp.Pool(args.jobs, _ignore_ctrl_c, maxtasksperchild=40) as pool,
        open_to_append(args.cache) as fh,
    ):
        for i, (key, row) in enumerate(pool.imap_unordered(_job, jobs, chunksize=1)):
            cached[key] = {"key": key, **row}
            append_line(fh, {"key": key, **row})  # stamped: commit, command, date, load
            if (i + 1) % 10 == 0:
                print(f"  {i + 1}/{len(jobs)} ({time.perf_counter() - t0:.0f} s)", flush=True)


def _run_all(
    keys: dict[tuple[str, str, int], str],
    first: list[tuple[str, str, int]],
    derived: bool,
    cached: dict[str, dict[str, Any]],
    args: argparse.Namespace,
) -> None:
    """Run what is not cached: `first`, then main-default's studies that cannot be derived."""
    if not args.report_only:
        _run([(k, keys[k]) for k in first], cached, args)
    if derived:
        rest = []
        for (name, inst, seed), key in keys.items():
            if name != "main-default" or key in cached:
                continue
            mine = cached.get(keys[("unhedged", inst, seed)])
            if mine is not None and mine["extra"].get("first_rung") == 1:
                cached[key] = {**mine, "key": key, "derived": True}
            else:
                rest.append(((name, inst, seed), key))
        if not args.report_only:
            _run(rest, cached, args)


def _ignore_ctrl_c() -> None:
    """A pool process leaves Ctrl-C to the harness, which ends the pool (no traceback each),
    and ends when the harness does (`exit_with_parent`: SIGKILL, which the harness cannot
    pass on)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    exit_with_parent()


def suite_arguments(parser: argparse.ArgumentParser) -> None:
    """``--instances`` (default: the development suite) and ``--metric``, as the suite's
    harnesses take them; check the instances with `dev_instances`."""
    parser.add_argument("--instances", default=",".join(DEV))
    parser.add_argument("--metric", default="val_accuracy", choices=list(METRICS))


def dev_instances(parser: argparse.ArgumentParser, instances: str) -> list[str]:
    """The comma-separated `instances`, or a usage error (exit 2) naming any that is not a
    development instance: the test set is not run."""
    out = instances.split(",")
    bad = [i for i in out if i not in DEV]
    if bad:
        parser.error(f"not a development instance (the test set is not run): {','.join(bad)}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    suite_arguments(parser)
    parser.add_argument("--strategies", default="default," + ",".join(REFERENCES))
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--budget-epochs", type=int, default=5000)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--data", default=None)
    parser.add_argument("--cache", default=str(REPO / "bench" / "results" / "design-cache.jsonl"))
    parser.add_argument("--json", default=None, help="write the summary here")
    parser.add_argument(
        "--report-only", action="store_true", help="the table from the cache, nothing run"
    )
    args = parser.parse_args(argv)
    instances = dev_instances(parser, args.instances)
    names = args.strategies.split(",")
    unknown = [n for n in names if n not in STRATEGIES]
    if unknown:
        parser.error(f"unknown strategy {unknown[0]!r}: one of {', '.join(STRATEGIES)}")
    if "random" not in names:
        names.append("random")
    wrong = (unwritable("--json", args.json) if args.json else None) or (
        None if args.report_only else unwritable("--cache", args.cache)
    )
    if wrong:
        parser.error(wrong)
    try:
        cached = _read(args.cache)
    except (OSError, ValueError) as exc:
        parser.error(f"--cache: {exc}")
    keys = {
        (name, inst, seed): cache_key(name, inst, seed, args.budget_epochs, args.metric)
        for seed in range(args.seeds)
        for inst in instances
        for name in names
    }
    # main-default is derived from the unhedged default where that never retired a rung: the
    # two are then the same study, decision by decision (the schedule is the only difference).
    derived = "main-default" in names and "unhedged" in names
    first = [k for k in keys if not (derived and k[0] == "main-default")]
    t0 = time.perf_counter()
    signals = RunSignals()
    try:
        _run_all(keys, first, derived, cached, args)
    except BaseException:
        signals.stopped("design", f"the studies finished are in {args.cache}")
        raise
    finally:
        signals.close()
    have = {k: key for k, key in keys.items() if key in cached}
    if args.report_only:
        # What is there: instances with every strategy and seed cached.
        instances = [
            i for i in instances if all((n, i, s) in have for n in names for s in range(args.seeds))
        ]
    results = {
        k: Run([tuple(x) for x in cached[key]["finished"]], cached[key]["epochs"])  # type: ignore[misc]
        for k, key in have.items()
    }
    if "default" in names:
        retired = {
            f"{i}/{s}": cached[have[("default", i, s)]]["extra"].get("first_rung")
            for i in instances
            for s in range(args.seeds)
        }
        moved = {k: v for k, v in retired.items() if v != 1}
        print(f"default retired its first rung in {len(moved)} studies: {moved}")
    if not instances:
        print("no instance has every strategy and seed cached yet")
        return 0
    out = report(
        results, [n for n in names], instances, args.seeds, args.budget_epochs, args.metric
    )
    print(f"\n{time.perf_counter() - t0:.0f} s; load {os.getloadavg()[0]:.1f}")
    if args.json:
        write_json(args.json, json.loads(json.dumps(out, default=str)))  # stamped
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
