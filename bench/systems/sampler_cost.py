"""The default sampler's cost per trial as a study grows: TPE across fidelities, whole or bounded.

A study of N trials as promotion ASHA (min 1, eta 3, rungs 1, 3, 9, 27, 50) leaves them, in
Optuna's in-memory storage, over LCBench's space (7 parameters, 3 of them integers); values
are synthetic (a smooth function of the parameters plus noise): what is measured is the
sampler's work, not what it finds. Then, per size and sampler, `--samples` trials are sampled
one after another, a new finished trial added between two (the study changes as in a running
study); each sample's CPU time (`time.process_time`, steadier than wall time on a shared
machine) and wall time are printed, the first (which builds the bounded view's index of the
study: once per worker process) apart from the rest.

    python -m bench.systems.sampler_cost --sizes 1000,5000,10000 --samples 5
    python -m bench.systems.sampler_cost --sizes 10000 --samples 3 --profile

Samplers: ``whole`` is `FidelitySampler(TPE)` as it was (every trial read before every
sample); ``bounded`` is what `search.sampling.samplers.make_sampler` builds now
(search/sampling/bounded.py).
"""

from __future__ import annotations

import argparse
import cProfile
import math
import os
import pstats
import random
import statistics
import time
import warnings
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState, create_trial

from search.sampling.bounded import bound
from search.sampling.multifidelity import MIN_POINTS, FidelitySampler
from search.sampling.samplers import STARTUP_TRIALS

SPACE: dict[str, BaseDistribution] = {
    "batch_size": IntDistribution(16, 512, log=True),
    "learning_rate": FloatDistribution(1e-4, 1e-1, log=True),
    "max_dropout": FloatDistribution(0.0, 1.0),
    "max_units": IntDistribution(64, 1024, log=True),
    "momentum": FloatDistribution(0.1, 0.99),
    "num_layers": IntDistribution(1, 5),
    "weight_decay": FloatDistribution(1e-5, 1e-1),
}
RUNGS = (1, 3, 9, 27, 50)


def _draw(rng: random.Random) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, d in SPACE.items():
        assert isinstance(d, FloatDistribution | IntDistribution)
        if d.log:
            x = math.exp(rng.uniform(math.log(d.low), math.log(d.high)))
        else:
            x = rng.uniform(d.low, d.high)
        out[name] = min(d.high, max(d.low, round(x))) if isinstance(d, IntDistribution) else x
    return out


def _quality(p: dict[str, Any]) -> float:
    return (
        90
        - 8 * (math.log10(p["learning_rate"]) + 2.5) ** 2
        - 5 * p["max_dropout"]
        - 3 * abs(p["num_layers"] - 2)
    )


def asha_trial(rng: random.Random, params: dict[str, Any] | None = None) -> FrozenTrial:
    """One finished trial as ASHA leaves it: a third of the trials at each rung go on."""
    p = params or _draw(rng)
    q = _quality(p)
    reports: dict[int, float] = {}
    for step in RUNGS:
        reports[step] = q - 20 / step + rng.gauss(0, 1)
        if rng.random() > 1 / 3:
            break
    done = RUNGS[-1] in reports
    return create_trial(
        state=TrialState.COMPLETE if done else TrialState.PRUNED,
        value=reports[RUNGS[-1]] if done else None,
        params=p,
        distributions=SPACE,
        intermediate_values=reports,
    )


def make_study(n: int, running: int, seed: int = 0) -> optuna.Study:
    rng = random.Random(seed)
    study = optuna.create_study(direction="maximize")
    study.add_trials([asha_trial(rng) for _ in range(n)])
    for _ in range(running):
        study.add_trial(
            create_trial(state=TrialState.RUNNING, params=_draw(rng), distributions=SPACE)
        )
    return study


def sampler_of(name: str, seed: int) -> optuna.samplers.BaseSampler:
    tpe = optuna.samplers.TPESampler(
        multivariate=False, constant_liar=True, seed=seed, n_startup_trials=STARTUP_TRIALS["tpe"]
    )
    whole = FidelitySampler(tpe, mode="rung", min_points=MIN_POINTS)
    return whole if name == "whole" else bound(whole)


def sample_one(study: optuna.Study) -> dict[str, Any]:
    trial = study.ask()
    params = {}
    for name, d in SPACE.items():
        if isinstance(d, IntDistribution):
            params[name] = trial.suggest_int(name, d.low, d.high, log=d.log)
        else:
            assert isinstance(d, FloatDistribution)
            params[name] = trial.suggest_float(name, d.low, d.high, log=d.log)
    study.tell(trial, state=TrialState.FAIL)  # left out of the next samples
    return params


def measure(n: int, name: str, samples: int, profile: bool) -> dict[str, Any]:
    study = make_study(n, running=8)
    rng = random.Random(1)
    cpu: list[float] = []
    wall: list[float] = []
    prof = cProfile.Profile() if profile else None
    for i in range(samples):
        study.sampler = sampler_of(name, seed=i)  # one sampler per trial, as make_sampler
        if prof is not None and i == samples - 1:
            prof.enable()
        c0, w0 = time.process_time(), time.perf_counter()
        params = sample_one(study)
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
        if prof is not None and i == samples - 1:
            prof.disable()
        study.add_trial(asha_trial(rng, params))  # the study moves on
    if prof is not None:
        pstats.Stats(prof).sort_stats("cumulative").print_stats(18)
    steady = cpu[1:] or cpu
    return {
        "trials": n,
        "sampler": name,
        "first_cpu_ms": round(cpu[0] * 1000, 1),
        "steady_cpu_ms": round(statistics.median(steady) * 1000, 1),
        "steady_wall_ms": round(statistics.median(wall[1:] or wall) * 1000, 1),
        "load": round(os.getloadavg()[0], 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,5000,10000")
    parser.add_argument("--samplers", default="whole,bounded")
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    print("| trials | sampler | first sample, CPU ms | per sample after, CPU ms | wall ms | load |")
    print("| --- | --- | --- | --- | --- | --- |")
    for n in (int(x) for x in args.sizes.split(",")):
        for name in args.samplers.split(","):
            r = measure(n, name, args.samples, args.profile)
            print(
                f"| {r['trials']} | {r['sampler']} | {r['first_cpu_ms']} | "
                f"{r['steady_cpu_ms']} | {r['steady_wall_ms']} | {r['load']} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
