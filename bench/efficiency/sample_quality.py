"""Sample quality: does sampling ahead, in batches, in a fleet, cost TPE its results?

The best value after N trials, with W workers and with 1 worker, over several seeds, for
hpsearch's TPE (sampled ahead by whichever worker holds the sampling lock, a batch per lock,
constant liar) and for plain Optuna's TPE in the same setting (multivariate, constant liar:
what hpsearch configures), on the same cheap objective, PostgreSQL on both sides. Random search
at the same budget is the floor.

The objective is a smooth, digits-like response surface over the config's kind of space (a
learning rate on a log scale whose best value depends on the batch size, a width on a log scale,
dropout, a categorical batch size), best 1.0; each trial reports three times, `--step-s` apart,
so that W workers really run side by side. Workers are threads of this process (W `Worker`s,
each with its own connection pool and sampler; Optuna: `study.optimize(n_jobs=W)` on its RDB
storage): the figure is about what the samplers see, not about speed.

    python -m bench.efficiency.sample_quality                          # N=60, W=1 and 8, seeds 0-4
    python -m bench.efficiency.sample_quality --trials 80 --seeds 10
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import threading
import time
import uuid
import warnings
from typing import Any

from bench.stamp import write_json
from bench.systems.scheduler import BENCH_STORAGE, _ensure_database

STEPS = 3

SPACE = {
    "lr": {"type": "float", "low": 1e-5, "high": 1e-1, "log": True},
    "width": {"type": "int", "low": 8, "high": 256, "log": True},
    "dropout": {"type": "float", "low": 0.0, "high": 0.5},
    "batch_size": {"type": "categorical", "choices": [16, 32, 64, 128, 256]},
}


def score(params: dict[str, Any]) -> float:
    """Validation accuracy of a made-up model: best lr grows with the batch size (linear
    scaling), wider is better up to 64, a little dropout helps. Best: 1.0."""
    best_lr = 1e-3 * params["batch_size"] / 64
    lr_term = (math.log10(params["lr"]) - math.log10(best_lr)) ** 2
    width_term = (math.log2(params["width"]) - 6) ** 2 / 10
    dropout_term = 4 * (params["dropout"] - 0.15) ** 2
    return 1.0 - lr_term - width_term - dropout_term


def run_hpsearch(url: str, sampler: str, n_trials: int, workers: int, seed: int, step_s: float):
    from search.db.migrate import upgrade
    from search.db.storage import open_storage
    from search.sampling.sample_ahead import queue_first_trials
    from search.study.parse_config import parse_config
    from search.study.studies import create_study, open_study
    from search.worker.loop import Worker
    from search.worker.trial import TrialOutcome

    name = f"quality-hpsearch-{uuid.uuid4().hex[:8]}"
    config = parse_config(
        {
            "study": {
                "name": name,
                "n_trials": n_trials,
                "sampler": sampler,
                "seed": seed,
                "direction": "maximize",
            },
            "pruner": {"type": "none"},
            "task": {"name": "digits", "epochs": STEPS},
            "space": SPACE,
        }
    )
    storage = open_storage(url)
    upgrade(storage)
    queue_first_trials(storage, create_study(storage, config)[0])

    def trial(run: Any) -> TrialOutcome:
        value = score(run.params)
        for step in range(1, STEPS + 1):
            time.sleep(step_s)
            run.report(step, value * step / STEPS)
        return TrialOutcome(status="completed", value=value)

    def one_worker() -> None:
        own = open_storage(url)
        Worker(own, open_study(own, name), run_trial=trial, grace_s=60, progress=False).run()
        own.close()

    threads = [threading.Thread(target=one_worker) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return _best(url, name)


def run_optuna(url: str, sampler: str, n_trials: int, workers: int, seed: int, step_s: float):
    import optuna

    name = f"quality-optuna-{uuid.uuid4().hex[:8]}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        chosen = (
            optuna.samplers.TPESampler(multivariate=True, constant_liar=True, seed=seed)
            if sampler == "tpe"
            else optuna.samplers.RandomSampler(seed=seed)
        )
    study = optuna.create_study(study_name=name, storage=url, direction="maximize", sampler=chosen)

    def objective(trial: optuna.Trial) -> float:
        params = {}
        for key, spec in SPACE.items():
            if spec["type"] == "float":
                params[key] = trial.suggest_float(
                    key, spec["low"], spec["high"], log=spec.get("log", False)
                )
            elif spec["type"] == "int":
                params[key] = trial.suggest_int(
                    key, spec["low"], spec["high"], log=spec.get("log", False)
                )
            else:
                params[key] = trial.suggest_categorical(key, spec["choices"])
        value = score(params)
        for step in range(1, STEPS + 1):
            time.sleep(step_s)
            trial.report(value * step / STEPS, step)
        return value

    study.optimize(objective, n_trials=n_trials, n_jobs=workers)
    return _best(url, name)


def _best(url: str, name: str) -> dict[str, Any]:
    import optuna

    trials = optuna.load_study(study_name=name, storage=url).get_trials(deepcopy=False)
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    return {"best": max(t.value for t in complete), "trials": len(complete)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--storage", default=BENCH_STORAGE)
    parser.add_argument("--trials", type=int, default=60)
    parser.add_argument("--workers", default="1,8")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--samplers", default="tpe,random")
    parser.add_argument("--sides", default="hpsearch,optuna")
    parser.add_argument("--step-s", type=float, default=0.03)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()

    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    _ensure_database(args.storage)
    results = []
    for sampler in args.samplers.split(","):
        for workers in [int(w) for w in args.workers.split(",")]:
            for seed in range(args.seeds):
                for side in args.sides.split(","):
                    if sampler == "random" and (side == "optuna" or workers != 1):
                        continue  # the floor: one row is enough
                    run = run_hpsearch if side == "hpsearch" else run_optuna
                    started = time.perf_counter()
                    out = run(args.storage, sampler, args.trials, workers, seed, args.step_s)
                    row = {
                        "side": side,
                        "sampler": sampler,
                        "workers": workers,
                        "seed": seed,
                        "wall_s": round(time.perf_counter() - started, 1),
                        **out,
                    }
                    results.append(row)
                    print(json.dumps(row), flush=True)

    print(f"\nbest value after N={args.trials} trials (best possible 1.0), mean ± sd over seeds")
    print(f"{'sampler':<8} {'W':>3}  {'side':<9} {'best':>22}  {'seeds':>5}")
    keys = sorted({(r["sampler"], r["workers"], r["side"]) for r in results})
    for sampler, workers, side in keys:
        bests = [
            r["best"]
            for r in results
            if (r["sampler"], r["workers"], r["side"]) == (sampler, workers, side)
        ]
        spread = (
            f"{statistics.mean(bests):.4f} ± {statistics.stdev(bests):.4f}"
            if len(bests) > 1
            else f"{bests[0]:.4f}"
        )
        print(f"{sampler:<8} {workers:>3}  {side:<9} {spread:>22}  {len(bests):>5}")
    if args.json:
        write_json(args.json, results)


if __name__ == "__main__":
    main()
