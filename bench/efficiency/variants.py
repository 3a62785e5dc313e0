"""Sampler settings under promotion ASHA, compared in the simulation (bench/efficiency/simulate.py).

How the settings of `search/sampling/multifidelity.py` were chosen (bench/BENCHMARKS.md,
"Which sampler learns across fidelities"): each variant is TPE behind `FidelitySampler`,
run by `asha_study` (promotion ASHA, min 1, eta 3, on a simulated clock) on YAHPO's LCBench
surrogate; the target is the mean final of hpsearch's random search from an efficiency.py
cache (`--reference`, e.g. bench/results/efficiency-lcbench.jsonl).

    python -m bench.efficiency.variants --instances 189906,167168,189873 --seeds 10 \
        --variants base,univariate,univariate-rank,univariate-min20,chosen --workers 1

Studies are appended to `--cache` (JSON lines) and reused from it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing as mp
import os
import warnings
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

import numpy as np  # noqa: E402
import optuna  # noqa: E402

from bench.efficiency.runner import _read_cache  # noqa: E402
from bench.efficiency.stats import Run, summarize  # noqa: E402
from bench.stamp import append_line  # noqa: E402

BUDGET = 5000

UNIVARIATE = {"multivariate": False, "constant_liar": True}
VARIANTS: dict[str, dict[str, Any]] = {
    "base": {"min_points": 10},  # multivariate TPE, constant liar, fitted at 10 trials
    "base-min5": {"min_points": 5},
    "univariate": {"tpe": UNIVARIATE, "min_points": 10},
    "univariate-rank": {"tpe": UNIVARIATE, "mode": "rank"},
    "univariate-min20": {"tpe": UNIVARIATE, "min_points": 20},
    "random-third": {"min_points": 10, "random_fraction": 1 / 3},  # BOHB's random fraction
    "chosen": {"tpe": UNIVARIATE, "min_points": 5},  # what make_sampler builds
}


class RandomFraction(optuna.samplers.BaseSampler):
    """BOHB's safeguard: a fixed fraction of trials (by a hash of the number) drawn at random."""

    def __init__(self, inner: optuna.samplers.BaseSampler, seed: int, fraction: float) -> None:
        self.inner, self.seed, self.fraction = inner, seed, fraction
        self.random = optuna.samplers.RandomSampler(seed=seed)

    def _at_random(self, trial: Any) -> bool:
        digest = hashlib.blake2b(f"{self.seed}:{trial.number}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big") / 2**64 < self.fraction

    def infer_relative_search_space(self, study: Any, trial: Any) -> dict[str, Any]:
        if self._at_random(trial):
            return {}
        return self.inner.infer_relative_search_space(study, trial)

    def sample_relative(self, study: Any, trial: Any, space: dict[str, Any]) -> dict[str, Any]:
        return self.inner.sample_relative(study, trial, space) if space else {}

    def sample_independent(self, study: Any, trial: Any, name: str, dist: Any) -> Any:
        chosen = self.random if self._at_random(trial) else self.inner
        return chosen.sample_independent(study, trial, name, dist)

    def before_trial(self, study: Any, trial: Any) -> None:
        self.inner.before_trial(study, trial)

    def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
        self.inner.after_trial(study, trial, state, values)


def make_variant(variant: dict[str, Any], seed: int) -> optuna.samplers.BaseSampler:
    from search.sampling.multifidelity import PRIOR_WEIGHT, FidelitySampler, good_trials
    from search.sampling.samplers import STARTUP_TRIALS

    tpe_kw: dict[str, Any] = {
        "seed": seed,
        "multivariate": True,
        "constant_liar": True,
        "n_startup_trials": STARTUP_TRIALS["tpe"],
        # hpsearch's good set across fidelities and its prior (a variant's "gamma" or
        # "prior_weight": None is Optuna's own).
        "gamma": good_trials,
        "prior_weight": PRIOR_WEIGHT,
    }
    tpe_kw.update(variant.get("tpe", {}))
    for name in ("gamma", "prior_weight"):
        if tpe_kw[name] is None:
            del tpe_kw[name]
    sampler: optuna.samplers.BaseSampler = FidelitySampler(
        optuna.samplers.TPESampler(**tpe_kw),
        mode=variant.get("mode", "rung"),
        min_points=variant.get("min_points", 10),
    )
    if variant.get("random_fraction"):
        sampler = RandomFraction(sampler, seed, variant["random_fraction"])
    return sampler


def _job(args: tuple[str, str, int, int, str | None]) -> tuple[str, str, int, int, list]:
    instance, name, seed, workers, data = args
    warnings.simplefilter("ignore")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    from bench.efficiency.lcbench import LCBench
    from bench.efficiency.simulate import asha_study

    sampler = make_variant(VARIANTS[name], seed)
    run = asha_study(LCBench(instance, data).curve, sampler, BUDGET, seed, workers=workers)
    return instance, name, seed, workers, run.finished


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", default="189906,167168,189873")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--data", default=None)
    parser.add_argument(
        "--reference", default=str(REPO / "bench" / "results" / "efficiency-lcbench.jsonl")
    )
    parser.add_argument(
        "--cache", default=str(REPO / "bench" / "results" / "efficiency-variants.jsonl")
    )
    args = parser.parse_args(argv)
    instances, names = args.instances.split(","), args.variants.split(",")
    reference = _read_cache(args.reference)  # efficiency.py's studies, by its cache key
    done: dict[tuple[str, str, int, int], list] = {}
    if os.path.exists(args.cache):
        for line in Path(args.cache).read_text().splitlines():
            d = json.loads(line)
            done[(d["instance"], d["variant"], d["seed"], d["workers"])] = d["finished"]
    jobs = [
        (i, n, s, args.workers, args.data)
        for i in instances
        for n in names
        for s in range(args.seeds)
        if (i, n, s, args.workers) not in done
    ]
    with mp.Pool(args.jobs) as pool, open(args.cache, "a") as fh:
        for instance, name, seed, workers, finished in pool.imap_unordered(_job, jobs):
            done[(instance, name, seed, workers)] = finished
            row = {"instance": instance, "variant": name, "seed": seed, "workers": workers}
            append_line(fh, {**row, "finished": finished})
    for instance in instances:
        ref = [reference[f"lcbench/{instance}/random/{s}/{BUDGET}/1"] for s in range(args.seeds)]
        target = float(np.mean([r.final for r in ref]))
        print(f"\n{instance}: target {target:.2f}, {args.workers} worker(s)\n")
        print("| variant | final mean (sd) | speedup (90% CI) | seeds reached | median epochs |")
        print("| --- | --- | --- | --- | --- |")
        for name in names:
            runs = [Run(done[(instance, name, s, args.workers)], BUDGET) for s in range(args.seeds)]
            sm = summarize(runs, BUDGET, target)
            lo, hi = sm["speedup_ci90"]
            print(
                f"| {name} | {sm['final_mean']:.2f} ({sm['final_sd']:.2f}) | "
                f"{sm['speedup'] or 0:.1f}x ({lo:.1f}-{hi:.1f}) | {sm['seeds_reached']}/"
                f"{args.seeds} | {sm['median_epochs_to_target']} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
