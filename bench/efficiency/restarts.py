"""A candidate for the default, measured through the real path: a fresh search when the search
has stalled (issue 27, items 4 and 5).

Where the default misses random search's final, its seeds have settled on one region (3945 on
balanced accuracy: one-layer networks at 0.76, where the seeds that found five-layer ones end
at 0.89-0.92) and stop improving: the best fully trained trial stays the best while 15 more
finish. The candidate `restart-K` starts the search afresh once K fully trained trials in a row
have not beaten the best of the current search: a new TPE that sees none of the trials before,
new rungs that rank the new trials only against each other, the next seed; the best trial found
so far stays the study's best. It restarts only while at least `--min-left` epochs of the budget
are left (a fresh search needs ~170 epochs before its first full training).

How it is measured, exactly and through the real path: a search's first `s` epochs do not
depend on its budget (until the budget's last epochs, which finish the best paused trial), so a
restarted study is the default's study with the same seed cut at the epoch `s` where it stalls,
followed by a default study with the budget that is left (`B - s`) and the seed `seed + 1000`,
itself cut where it stalls, and so on. The trials in flight at `s` are lost (the product would
let them finish: this reading is the candidate's worst case). The default's own studies come
from the suite's cache (`--cache`, bench/efficiency/runner.py's keys), and the later parts are
run by the runner's `run_job` and appended to it (so are the default's and random search's
studies where the cache lacks them; the other peers are shown where it holds them); so the
table is the suite's, for the same seeds, with the candidate beside the default:

    python -m bench.efficiency.restarts --metric val_balanced_accuracy --seeds 20 --stall 15 \
        --cache bench/results/efficiency-lcbench-dev.jsonl --jobs 2

Only the development instances may be run.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import sys
from typing import Any

from bench.efficiency.design import DEV, REFERENCES
from bench.efficiency.lcbench import EPOCHS, METRICS
from bench.efficiency.runner import (
    Job,
    _append_cache,
    _cache_key,
    _read_cache,
    bad_input,
    run_job,
)
from bench.efficiency.stats import Run, distribution, summarize
from bench.efficiency.targets import item5, print_item5
from bench.signals import exit_with_parent
from bench.stamp import write_json

BUDGET = 5000
SEED_STEP = 1000
"""The seed of a search's n-th restart: seed + n x SEED_STEP."""


def stall_point(run: Run, stall: int, maximize: bool) -> int | None:
    """The cumulative epoch at which `stall` fully trained trials in a row have not beaten the
    best of `run` (None: never)."""
    sign = 1.0 if maximize else -1.0
    best, since = -math.inf, 0
    for at, value in sorted(run.finished):
        if sign * value > best:
            best, since = sign * value, 0
        else:
            since += 1
            if since >= stall:
                return at
    return None


def restarted(
    part: Any, seed: int, stall: int, min_left: int, maximize: bool
) -> tuple[Run | None, tuple[int, int] | None]:
    """The restarted study of `seed` from its parts (`part(seed, budget)`: the default's study,
    None if not run yet), or the (seed, budget) of the part it still needs."""
    finished: list[tuple[int, float]] = []
    offset, left, n = 0, BUDGET, 0
    while True:
        run = part(seed + n * SEED_STEP, left)
        if run is None:
            return None, (seed + n * SEED_STEP, left)
        at = stall_point(run, stall, maximize)
        if at is None or left - at < min_left:
            finished += [(offset + e, v) for e, v in run.finished]
            return Run(sorted(finished), BUDGET, {"restarts": n}), None
        finished += [(offset + e, v) for e, v in run.finished if e <= at]
        offset, left, n = offset + at, left - at, n + 1


def _run(job: Job) -> tuple[Job, Run]:
    return job, run_job(job)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--metric", default="val_accuracy", choices=sorted(METRICS))
    parser.add_argument("--instances", default=",".join(DEV))
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--stall", default="15", help="K, or several: 10,15,20")
    parser.add_argument("--min-left", type=int, default=10 * EPOCHS)
    parser.add_argument("--cache", required=True)
    parser.add_argument("--data", default=None)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    instances = args.instances.split(",")
    if set(instances) - set(DEV):
        return bad_input(
            f"--instances: {', '.join(sorted(set(instances) - set(DEV)))}: not a development "
            "instance (the others are the test set)",
            "bench.efficiency.restarts",
        )
    stalls = [int(k) for k in args.stall.split(",")]
    maximize = METRICS[args.metric]
    cached = _read_cache(args.cache)

    def job(instance: str, strategy: str, seed: int, budget: int) -> Job:
        return Job(
            "lcbench", instance, strategy, seed, budget, 1, args.data, None, 0.0, args.metric
        )

    def runs_of(instance: str, strategy: str) -> list[Run | None]:
        return [
            cached.get(_cache_key(job(instance, strategy, s, BUDGET))) for s in range(args.seeds)
        ]

    results: dict[tuple[str, int, int], Run] = {}
    ran = 0
    pool = mp.get_context("spawn").Pool(args.jobs, exit_with_parent) if args.jobs > 1 else None
    try:
        while True:  # in rounds: a restart's part needs the part before it
            todo: dict[str, Job] = {}
            for instance in instances:

                def part(seed: int, budget: int, instance: str = instance) -> Run | None:
                    return cached.get(_cache_key(job(instance, "default", seed, budget)))

                for seed in range(args.seeds):
                    reference = job(instance, "random", seed, BUDGET)  # the target's
                    if _cache_key(reference) not in cached:
                        todo[_cache_key(reference)] = reference
                    for k in stalls:
                        if (instance, seed, k) in results:  # put together in an earlier round
                            continue
                        run, need = restarted(part, seed, k, args.min_left, maximize)
                        if run is not None:
                            results[(instance, seed, k)] = run
                        else:
                            assert need is not None
                            j = job(instance, "default", *need)
                            todo[_cache_key(j)] = j
            if not todo:
                break
            print(f"running {len(todo)} studies", file=sys.stderr, flush=True)
            jobs = list(todo.values())
            done = pool.imap_unordered(_run, jobs) if pool else map(_run, jobs)
            for j, run in done:
                _append_cache(args.cache, j, run)
                cached[_cache_key(j)] = run
                ran += 1
                print(
                    f"[{ran}/{len(jobs)}] {j.instance} {j.strategy} seed {j.seed} "
                    f"budget {j.budget}",
                    file=sys.stderr,
                )
    finally:
        if pool:
            pool.close()
            pool.join()
    return _report(args, instances, stalls, results, runs_of, maximize)


def _report(
    args: argparse.Namespace,
    instances: list[str],
    stalls: list[int],
    results: dict[tuple[str, int, int], Run],
    runs_of: Any,
    maximize: bool,
) -> int:
    out: dict[str, Any] = {"metric": args.metric, "seeds": args.seeds, "instances": {}}
    names = ["default", *[f"restart-{k}" for k in stalls]]
    per: dict[str, list[dict[str, Any]]] = {}
    print(f"\n{args.metric}, {args.seeds} seeds: speedup, seeds reaching, final mean, restarts\n")
    print("| instance | " + " | ".join(names) + " |")
    print("| --- |" + " --- |" * len(names))
    for instance in instances:
        runs: dict[str, list[Run]] = {}
        for name in (*REFERENCES, "default"):
            got = runs_of(instance, name)
            if all(r is not None for r in got):
                runs[name] = got
        for k in stalls:
            runs[f"restart-{k}"] = [results[(instance, s, k)] for s in range(args.seeds)]
        worst = -math.inf if maximize else math.inf
        target = summarize(runs["random"], BUDGET, worst, maximize=maximize)["final_mean"]
        table = {}
        for name, rs in runs.items():
            s = summarize(rs, BUDGET, target, maximize=maximize)
            s["restarts_mean"] = sum(r.extra.get("restarts", 0) for r in rs) / len(rs)
            table[name] = s
            if name in names:
                per.setdefault(name, []).append(s)
        out["instances"][instance] = {"target": target, "strategies": table}
        cells = [
            f"{(table[n]['speedup'] or 0):.1f}x, {table[n]['seeds_reached']}, "
            f"{table[n]['final_mean']:.4f}, {table[n]['restarts_mean']:.1f}"
            for n in names
        ]
        print(f"| {instance} | " + " | ".join(cells) + " |")
    out["targets"] = {}
    for name in names:
        d = distribution(per[name])
        print(
            f"\n{name}: median {d['speedup_median']:.1f}x, p10 {d['speedup_p10']:.1f}x, "
            f"seeds {d['instance_seeds_reached']}/{d['instance_seeds']}"
        )
        as_default = {
            i: {
                "target": v["target"],
                "strategies": {**v["strategies"], "default": v["strategies"][name]},
            }
            for i, v in out["instances"].items()
        }
        rows = item5(as_default, args.metric, maximize, BUDGET)
        print_item5(rows, name)
        out["targets"][name] = rows
    if args.json:
        write_json(args.json, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
