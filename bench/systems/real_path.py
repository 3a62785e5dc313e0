"""The real path's cost per trial: a default LCBench study through the real Worker and database.

A 5,000-epoch study of the default (TPE + ASHA with an epoch budget) on one worker, SQLite
(as `python -m bench.efficiency` runs it), timed end to end; `--profile` also runs it under
cProfile and prints where the time went, by cumulative time and by own time.

    python -m bench.systems.real_path                        # 189906, seed 0, 5,000 epochs
    python -m bench.systems.real_path --seeds 3 --profile 25
    python -m bench.systems.real_path --storage postgresql+psycopg://postgres@127.0.0.1/x
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import time


def one_study(
    instance: str, seed: int, budget: int, storage: str | None, data: str | None = None
) -> dict:
    from bench.efficiency.runner import Job, run_job

    job = Job(
        benchmark="lcbench",
        instance=instance,
        strategy="default",
        seed=seed,
        budget=budget,
        workers=1,
        data=data,
        storage=storage,
        time_scale=0.0,
    )
    started = time.perf_counter()
    run = run_job(job)
    wall = time.perf_counter() - started
    trials = run.extra.get("trials", 0)
    return {
        "instance": instance,
        "seed": seed,
        "budget_epochs": budget,
        "wall_s": round(wall, 2),
        "trials": trials,
        "ms_per_trial": round(1000 * wall / max(1, trials), 1),
        "load": os.getloadavg()[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instance", default="189906")
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--budget-epochs", type=int, default=5000)
    parser.add_argument("--storage", help="default: SQLite in a temporary directory")
    parser.add_argument("--data", help="YAHPO data (default $YAHPO_DATA, as bench.efficiency)")
    parser.add_argument("--profile", type=int, default=0, help="print the N costliest functions")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    one_study(
        args.instance, 99, 200, args.storage, args.data
    )  # imports and data loaded before timing
    for seed in range(args.seeds):
        profiler = cProfile.Profile() if args.profile else None
        if profiler:
            profiler.enable()
        result = one_study(args.instance, seed, args.budget_epochs, args.storage, args.data)
        if profiler:
            profiler.disable()
            result["profiled"] = True
        print(json.dumps(result), flush=True)
        if profiler:
            for order in ("cumulative", "tottime"):
                out = io.StringIO()
                pstats.Stats(profiler, stream=out).sort_stats(order).print_stats(args.profile)
                print(out.getvalue())


if __name__ == "__main__":
    main()
