"""The real path's cost per trial: a default LCBench study through the real Worker and database.

A 5,000-epoch study of the default (TPE + ASHA with an epoch budget) on one worker, SQLite
(as `python -m bench.efficiency` runs it), timed end to end; `--profile` also runs it under
cProfile and prints where the time went, by cumulative time and by own time.

    python -m bench.systems.real_path                        # 189906, seed 0, 5,000 epochs
    python -m bench.systems.real_path --seeds 3 --profile 25
    python -m bench.systems.real_path --storage postgresql+psycopg://postgres@127.0.0.1/x
    python -m bench.systems.real_path --code /tmp/before,. --seeds 2 --repeats 2
    python -m bench.systems.real_path --instance 189906,167168,189873,3945,7593,126029 --seeds 3

`--instance` takes several, comma-separated: each instance's seeds in turn, and at the end the
median over all studies. `--code A,B` runs each study in a fresh process on the code of each
checkout in turn (A, B, A, B, ...: the machine's load falls on both alike) and prints each
side's median wall and CPU seconds (of each study's `--repeats`, then over the studies) and
their ratio; `decided` (a digest of the trials each study trained, to what end, in what order)
says whether the two sides' searches decided the same.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import io
import itertools
import json
import os
import pstats
import statistics
import subprocess
import sys
import time

from bench.signals import RunSignals


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
    started, cpu = time.perf_counter(), time.process_time()
    run = run_job(job)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    trials = run.extra.get("trials", 0)
    # What the search decided, in a few characters: two runs with the same digest trained the
    # same trials to the same ends in the same order.
    decided = hashlib.sha256(json.dumps([run.finished, run.epochs, trials]).encode()).hexdigest()
    return {
        "instance": instance,
        "seed": seed,
        "budget_epochs": budget,
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "trials": trials,
        "decided": decided[:12],
        "ms_per_trial": round(1000 * wall / max(1, trials), 1),
        "load": os.getloadavg()[0],
    }


def side_by_side(codes: list[str], args: argparse.Namespace) -> None:
    """Each instance's and seed's study on each checkout in turn, `--repeats` times, in fresh
    processes."""
    here = os.path.abspath(__file__)
    results: dict[str, list[dict]] = {code: [] for code in codes}
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    studies = itertools.product(range(args.repeats), args.instance.split(","), seeds, codes)
    for _, instance, seed, code in studies:
        command = [sys.executable, "-P", here, "--instance", instance, "--seeds", "1"]
        command += ["--first-seed", str(seed), "--budget-epochs", str(args.budget_epochs)]
        if args.storage:
            command += ["--storage", args.storage]
        if args.data:
            command += ["--data", args.data]
        root = os.path.abspath(code)
        env = {**os.environ, "PYTHONPATH": root}
        out = subprocess.run(
            command, cwd=root, env=env, check=True, capture_output=True, text=True
        ).stdout
        result = {"code": code, **json.loads(out.strip().splitlines()[-1])}
        results[code].append(result)
        print(json.dumps(result), flush=True)
    medians = {code: _median_of_studies(rs) for code, rs in results.items()}
    base = medians[codes[0]]
    for code, m in medians.items():
        print(
            f"{code}: median wall {m['wall_s']:.2f} s ({m['wall_s'] / base['wall_s']:.3f} of "
            f"{codes[0]}), CPU {m['cpu_s']:.2f} s ({m['cpu_s'] / base['cpu_s']:.3f})"
        )
    same = all(
        a["decided"] == b["decided"] for a, b in zip(*(results[c] for c in codes), strict=False)
    )
    print("the same trials on every side" if same else "the sides decided differently")


def _median_of_studies(results: list[dict]) -> dict[str, float]:
    """Wall and CPU seconds: each study's median over its repeats, then the median over the
    studies (instance, seed)."""
    by_study: dict[tuple[str, int], list[dict]] = {}
    for r in results:
        by_study.setdefault((r["instance"], r["seed"]), []).append(r)
    return {
        k: statistics.median(statistics.median(r[k] for r in rs) for rs in by_study.values())
        for k in ("wall_s", "cpu_s")
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instance", default="189906", help="one or more, comma-separated")
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--code", help="checkouts to run side by side, comma-separated")
    parser.add_argument("--repeats", type=int, default=1, help="with --code")
    parser.add_argument("--budget-epochs", type=int, default=5000)
    parser.add_argument("--storage", help="default: SQLite in a temporary directory")
    parser.add_argument("--data", help="YAHPO data (default $YAHPO_DATA, as bench.efficiency)")
    parser.add_argument("--profile", type=int, default=0, help="print the N costliest functions")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if args.code:
        side_by_side(args.code.split(","), args)
        return
    # The study's Worker runs in this process and takes kill and Ctrl-C as a notice to hand
    # its trial back: the study then ends early, and is not reported as a measurement.
    signals = RunSignals()
    cut_short = "its study cut short is left out"
    results = []
    for instance in args.instance.split(","):
        one_study(instance, 99, 200, args.storage, args.data)  # imports, data: before timing
        signals.stopped("real_path", cut_short)
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            profiler = cProfile.Profile() if args.profile else None
            if profiler:
                profiler.enable()
            result = one_study(instance, seed, args.budget_epochs, args.storage, args.data)
            if profiler:
                profiler.disable()
                result["profiled"] = True
            signals.stopped("real_path", cut_short)
            results.append(result)
            print(json.dumps(result), flush=True)
            if profiler:
                for order in ("cumulative", "tottime"):
                    out = io.StringIO()
                    pstats.Stats(profiler, stream=out).sort_stats(order).print_stats(args.profile)
                    print(out.getvalue())
    if len(results) > 1:
        m = _median_of_studies(results)
        print(
            f"median over {len(results)} studies: wall {m['wall_s']:.2f} s, CPU {m['cpu_s']:.2f} s"
        )


if __name__ == "__main__":
    main()
